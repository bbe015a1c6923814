# Databricks notebook source
# MAGIC %md
# MAGIC # Consistency pipeline (paper 1): CST and CS-Blind against the baseline classifier
# MAGIC
# MAGIC Pipeline `consistency`: ingest, group the catalog's item versions, split (accuracy test, consistency
# MAGIC test of version pairs, unlabeled pool), train the hierarchical fastText classifier per method and
# MAGIC repeat, and report weighted F1 and the consistency rate (mean ± std over `consistency.repeats`).
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `consistency.repeats=3`) are the bundle jobs' parameters.
# MAGIC Locally: `.venv/bin/python notebooks/consistency.py [--conf conf/demo.yaml] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("consistency")

# COMMAND ----------

from common.catalog.metrics import by_method

lh = nb.ctx.lakehouse
# Group sizes: groups outside the paper's 2..192 go to catalog_groups_quarantine, with a reason.
nb.show(lh.read("catalog_group_sizes").orderBy("group_size"), 10)
nb.show(by_method(lh.read("consistency_results")).orderBy("method"))

# COMMAND ----------

nb.chart("consistency", "f1_vs_consistency.png")

# COMMAND ----------

nb.close()
