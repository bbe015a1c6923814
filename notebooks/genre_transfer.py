# Databricks notebook source
# MAGIC %md
# MAGIC # Genre transfer across topics (paper 5): topic-controlled synthetic documents for off-topic training sets
# MAGIC
# MAGIC Pipeline `genre-transfer`: documents with a genre (`inputs.documents`; the Brown Corpus in the demo) get a
# MAGIC topic model (Spark MLlib LDA) and per-passage keywords; for each evaluated topic and size N, each genre's
# MAGIC documents split into an on-topic test set, an on-topic and an off-topic training set; one keywords-to-text
# MAGIC generator per genre learns from its off-topic documents only and writes, from on-topic test documents'
# MAGIC keywords, one synthetic document per genre (as many in all as the off-topic set: the paper's 1:1); genre
# MAGIC classifiers trained on-topic, off-topic and off-topic + synthetic are compared by macro-F1 on the
# MAGIC on-topic test set over R seeds (the paper's Table 4).
# MAGIC
# MAGIC Widgets `conf` (e.g. `conf/genre_brown.yaml`) and `overrides` are the bundle job's parameters. Locally:
# MAGIC `.venv/bin/python notebooks/genre_transfer.py [--conf ...] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("genre-transfer")

# COMMAND ----------

lh = nb.ctx.lakehouse
nb.show(lh.read("genre_topic_words").orderBy("topic"), 30)
nb.show(lh.read("genre_splits").groupBy("topic", "n", "role").count().orderBy("topic", "n", "role"))
nb.show(
    lh.read("genre_synthetic")
    .select("topic", "genre", "source_genre", "keywords_from", "keywords", "text")
    .orderBy("source_id"),
    5,
)

# COMMAND ----------

from pyspark.sql import functions as F

res = lh.read("genre_results")
nb.show(
    res.groupBy("model", "n", "method")
    .agg(F.avg("macro_f1").alias("macro_f1"), F.stddev("macro_f1").alias("std"), F.count("*").alias("runs"))
    .orderBy("model", "n", "method")
)

# COMMAND ----------

nb.close()
