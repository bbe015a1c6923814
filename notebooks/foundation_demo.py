# Databricks notebook source
# MAGIC %md
# MAGIC # Catalog augmentation: the foundation demo
# MAGIC
# MAGIC Generates the synthetic e-commerce dataset, ingests it into versioned Delta tables with
# MAGIC quarantine, and shows the versions and their lineage. The same cells run on Databricks
# MAGIC (`conf/databricks.yaml`, the notebook's `spark`) and locally (`conf/local.yaml`, a local session):
# MAGIC `.venv/bin/python notebooks/foundation_demo.py`.
# MAGIC
# MAGIC On Databricks, install the wheel first: `%pip install /Volumes/.../catalog_augment-0.1.0-py3-none-any.whl`.

# COMMAND ----------

import os

from common.config import load_config
from common.platform.job import build_context
from jobs import PIPELINES, run_pipeline

on_databricks = "DATABRICKS_RUNTIME_VERSION" in os.environ
cfg = load_config("conf/databricks.yaml" if on_databricks else "conf/local.yaml",
                  ["demo.scale=0.5"])  # any --set override works here too
ctx = build_context(cfg, spark=globals().get("spark"))
print(ctx.capabilities)

# COMMAND ----------

results = run_pipeline(ctx, "foundation", PIPELINES["foundation"])
for result in results:
    print(result.summary())

# COMMAND ----------

from common.platform.cli import format_history, format_tables

print(format_tables(ctx.lakehouse.tables()))
print(format_history(ctx.lakehouse.history("labeled_products")))

# COMMAND ----------

# Quarantined rows, with the reason each was rejected.
ctx.lakehouse.read("labeled_products_quarantine").groupBy("reason").count().show(truncate=False)
ctx.lakehouse.read("labeled_products").show(5, truncate=False)

# COMMAND ----------

ctx.close()
