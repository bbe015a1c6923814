# Databricks notebook source
# MAGIC %md
# MAGIC # Foundation: the synthetic catalog, ingested into versioned Delta tables with quarantine
# MAGIC
# MAGIC Pipeline `foundation` (`generate-demo`, `ingest`): writes the demo world's raw files (or takes the
# MAGIC config's `inputs`), validates them against their contracts and writes the kept and the quarantined
# MAGIC rows (with a `reason`) as Delta table versions whose lineage names the input files and the config.
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `demo.scale=0.5 spark.delta=rs`) are the bundle jobs' parameters.
# MAGIC On Databricks install the wheel first (`%pip install /Volumes/.../catalog_augment-0.1.0-py3-none-any.whl`).
# MAGIC Locally: `.venv/bin/python notebooks/foundation.py [--conf conf/demo.yaml] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())
print(nb.conf, nb.overrides, nb.ctx.capabilities)

# COMMAND ----------

results = nb.run("foundation")

# COMMAND ----------

from common.platform.runner.cli import format_history, format_tables

lh = nb.ctx.lakehouse
print(format_tables(lh.tables()))
print(format_history(lh.history("labeled_products")))

# COMMAND ----------

# Quarantined rows, with the reason each was rejected: rows in = rows kept + rows quarantined.
nb.show(lh.read("labeled_products_quarantine").groupBy("reason").count())
nb.show(lh.read("labeled_products"), 5)

# COMMAND ----------

nb.close()
