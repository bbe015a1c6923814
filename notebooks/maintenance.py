# Databricks notebook source
# MAGIC %md
# MAGIC # Maintenance: compaction and VACUUM of every lakehouse table
# MAGIC
# MAGIC Pipeline `maintenance` (`maintain`, weekly in the bundle): OPTIMIZE (or delta-rs compaction) of the
# MAGIC tables with at least `maintenance.min_files` live files, VACUUM at `maintenance.retention_hours`
# MAGIC (never below Delta's 168-hour safety default unless `maintenance.force_retention=true`), and a per-table
# MAGIC report of files and bytes before and after. Compaction rewrites files, never rows: every version reads
# MAGIC the same rows before and after.
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `maintenance.tables=[consistency_results]`) are the bundle jobs'
# MAGIC parameters. Locally: `.venv/bin/python notebooks/maintenance.py [--conf ...] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("maintenance")

# COMMAND ----------

from common.platform.runner.cli import format_tables

print(format_tables(nb.ctx.lakehouse.tables()))

# COMMAND ----------

nb.close()
