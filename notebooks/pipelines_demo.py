# Databricks notebook source
# MAGIC %md
# MAGIC # Catalog augmentation: the consistency and query-graph pipelines
# MAGIC
# MAGIC Runs `consistency` (catalog grouping, splits, HFT methods, evaluation) and `query-graph`
# MAGIC (specificity, PMI similarities, per-product subgraph clusters, reformulation pairs) and shows
# MAGIC their results tables. Databricks: `conf/databricks.yaml` and the notebook's `spark`; locally:
# MAGIC `MALLOC_MMAP_THRESHOLD_=131072 .venv/bin/python notebooks/pipelines_demo.py`.

# COMMAND ----------

import os

from common.config import load_config
from common.job import build_context
from common.pipeline import run_pipeline
from jobs import PIPELINES

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

ctx.close()
