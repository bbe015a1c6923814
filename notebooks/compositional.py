# Databricks notebook source
# MAGIC %md
# MAGIC # Compositional multi-label augmentation (paper 4): synthetic texts for label sets never seen in training
# MAGIC
# MAGIC Pipeline `compositional`: multi-label texts (`inputs.multilabel`; SemEval-2018 E-c tweets in the demo) are
# MAGIC split so that training and test share no label set (20 test compositions, a support set of 50 test-side
# MAGIC examples), with an iid split of the same sizes beside it. A label-composition model fit on the support set
# MAGIC samples novel label sets; Concat, a seq2seq model fed the label phrases and the label-prefix model (one
# MAGIC learned prefix block per label) write texts for them; a multi-label classifier keeps the half whose
# MAGIC predicted labels best match the intended ones (Jaccard). Classifiers trained without and with each
# MAGIC generator's texts are compared on the CG and iid test sets over R seeds (the paper's Tables 1 and 2).
# MAGIC
# MAGIC Widgets `conf` (e.g. `conf/compositional_semeval.yaml`) and `overrides` are the bundle job's parameters.
# MAGIC Locally: `.venv/bin/python notebooks/compositional.py [--conf ...] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("compositional")

# COMMAND ----------

from pyspark.sql import functions as F

lh = nb.ctx.lakehouse
nb.show(lh.read("cg_test").groupBy("composition").count().orderBy(F.desc("count")), 20)
nb.show(lh.read("cg_label_sets").orderBy(F.desc("draws")), 10)
nb.show(
    lh.read("cg_synthetic").select("method", "composition", "text", "predicted", "jaccard").orderBy("method", "rank"),
    9,
)
nb.show(lh.read("cg_rejects").groupBy("method", "reason").count().orderBy("method", "reason"))

# COMMAND ----------

res = lh.read("compositional_results")
nb.show(
    res.groupBy("model", "split_kind", "method", "n_augmented")
    .agg(
        F.avg("accuracy").alias("accuracy"),
        F.stddev("accuracy").alias("std"),
        F.avg("jaccard").alias("jaccard"),
        F.count("*").alias("runs"),
    )
    .orderBy("model", "split_kind", "method", "n_augmented")
)

# COMMAND ----------

nb.close()
