# Databricks notebook source
# MAGIC %md
# MAGIC # Query reformulation pipeline (paper 2): generated reformulations grow the interaction log
# MAGIC
# MAGIC Pipeline `query-reformulation` = `query-graph` (unchanged jobs are skipped) + the generator fine-tuned
# MAGIC on the reformulation pairs in a Ray actor, reformulations sampled on a Ray Data actor pool, the
# MAGIC augmented log (new queries inherit their source's products), and the matcher check: a query -> product
# MAGIC model trained on the original vs the augmented log, precision/recall @k on held-out queries.
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `query_reformulation.generation.n_samples=5`) are the bundle jobs'
# MAGIC parameters. Locally: `.venv/bin/python notebooks/query_reformulation.py [--conf ...] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("query-reformulation")

# COMMAND ----------

lh = nb.ctx.lakehouse
nb.show(lh.read("augmented_interactions").groupBy("origin").count())
nb.show(lh.read("augmented_interactions_rejected").groupBy("reason").count())
nb.show(lh.read("augmented_interactions").filter("origin != 'original'"), 10)
nb.show(lh.read("matcher_results").orderBy("k", "variant"))

# COMMAND ----------

nb.close()
