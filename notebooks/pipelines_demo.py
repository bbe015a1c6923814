# Databricks notebook source
# MAGIC %md
# MAGIC # Catalog augmentation: the consistency, CGA, query-graph and query-reformulation pipelines
# MAGIC
# MAGIC Runs `consistency` (catalog grouping, splits, HFT methods, evaluation), `cga` (T5 fine-tuned on
# MAGIC version pairs in Ray, generation on a Ray Data actor pool, BLEU filter, HFT on D_L ∪ D_aug, the
# MAGIC Figure-2 sweep), `query-graph` (specificity, PMI similarities, per-product subgraph clusters,
# MAGIC reformulation pairs) and `query-reformulation` (T5 reformulations, the augmented log, the matcher
# MAGIC check), and shows their results tables. On a GPU cluster set `cga.model.name_or_path` and the
# MAGIC `num_gpus` keys (README: Production use). Databricks: `conf/databricks.yaml` and the notebook's `spark`; locally:
# MAGIC `MALLOC_MMAP_THRESHOLD_=131072 .venv/bin/python notebooks/pipelines_demo.py`.

# COMMAND ----------

import os

from common.config import load_config
from common.platform.job import build_context
from jobs import PIPELINES, run_pipeline

on_databricks = "DATABRICKS_RUNTIME_VERSION" in os.environ
cfg = load_config("conf/databricks.yaml" if on_databricks else "conf/local.yaml", ["consistency.repeats=2"])
ctx = build_context(cfg, spark=globals().get("spark"))

# COMMAND ----------

for result in run_pipeline(ctx, "consistency", PIPELINES["consistency"]):
    print(result.summary())
ctx.lakehouse.read("consistency_results").groupBy("method").avg("f1_weighted", "consistency_rate").show()

# COMMAND ----------

for result in run_pipeline(ctx, "query-graph", PIPELINES["query-graph"]):
    print(result.summary())
ctx.lakehouse.read("query_clusters").orderBy("internal_edges", ascending=False).show(10, truncate=False)
ctx.lakehouse.read("reformulation_pairs").show(10, truncate=False)

# COMMAND ----------

for result in run_pipeline(ctx, "cga", PIPELINES["cga"]):
    print(result.summary())
ctx.lakehouse.read("consistency_results").groupBy("method").avg("f1_weighted", "consistency_rate").show()
ctx.lakehouse.read("cga_sweep_results").orderBy("threshold", "n").show(truncate=False)

# COMMAND ----------

for result in run_pipeline(ctx, "query-reformulation", PIPELINES["query-reformulation"]):
    print(result.summary())
ctx.lakehouse.read("augmented_interactions").groupBy("origin").count().show()
ctx.lakehouse.read("matcher_results").orderBy("k", "variant").show()

# COMMAND ----------

ctx.close()
