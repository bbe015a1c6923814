# Databricks notebook source
# MAGIC %md
# MAGIC # Query graph pipeline (paper 2, first half): specificity, similarities, subgraph clusters, pairs
# MAGIC
# MAGIC Pipeline `query-graph`: normalise the click log (quarantine with a reason), click-entropy specificity
# MAGIC per query, PMI similarities within the specificity window (hub products capped), per-product subgraph
# MAGIC clustering, and the reformulation pairs (generic -> specific) that train the reformulation model.
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `query_graph.max_cluster_size=30`) are the bundle jobs' parameters.
# MAGIC Locally: `.venv/bin/python notebooks/query_graph.py [--conf conf/demo.yaml] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("query-graph")

# COMMAND ----------

from pyspark.sql import functions as F

lh = nb.ctx.lakehouse
nb.show(lh.read("query_interactions_quarantine").groupBy("reason").count())
nb.show(lh.read("query_specificity").orderBy(F.desc("specificity")), 10)
nb.show(lh.read("query_clusters").orderBy(F.desc("internal_edges"), F.desc("size")), 10)
nb.show(lh.read("reformulation_pairs"), 10)

# COMMAND ----------

nb.chart("query_graph", "histograms.png")

# COMMAND ----------

nb.close()
