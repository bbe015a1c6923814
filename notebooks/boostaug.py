# Databricks notebook source
# MAGIC %md
# MAGIC # BoostAug pipeline (paper 3): augmentations filtered by cross-boosted surrogates
# MAGIC
# MAGIC Pipeline `boostaug`: labeled texts (`inputs.texts`; the demo's titles with their top-level category when
# MAGIC unset) are split and dealt into k folds; EDA, spelling-noise and word-split backends (and, when
# MAGIC `boostaug.backends` names it, the contextual one: a masked span filled by a fine-tuned seq2seq infiller)
# MAGIC make 2·Ñ candidates per text; one surrogate per fold (by default an MLP head on frozen MiniLM embeddings,
# MAGIC each candidate embedded once; the demo world's: fastText), trained on k - 2 other folds and validated on one,
# MAGIC scores the candidates of the fold it never saw; confidence ranking, the confidence threshold and the
# MAGIC predicted-label constraint keep or reject each candidate; classifiers trained with filtered vs
# MAGIC unfiltered augmentation are compared on the test split over R seeds.
# MAGIC
# MAGIC Widgets `conf` (e.g. `conf/boostaug_sst2.yaml`, the paper's setting on SST-2) and `overrides` are the
# MAGIC bundle job's parameters. Locally: `.venv/bin/python notebooks/boostaug.py [--conf ...] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("boostaug")

# COMMAND ----------

lh = nb.ctx.lakehouse
nb.show(lh.read("boostaug_rejects").groupBy("backend", "reason").count().orderBy("backend", "reason"))
nb.show(lh.read("boostaug_kept").select("backend", "source_text", "text", "confidence").orderBy("source_id"), 10)

# COMMAND ----------

from pyspark.sql import functions as F

res = lh.read("boostaug_results")
nb.show(
    res.groupBy("method", "n_aug")
    .agg(
        F.avg("accuracy").alias("accuracy"),
        F.stddev("accuracy").alias("std"),
        F.avg("macro_f1").alias("macro_f1"),
        F.count("*").alias("runs"),
    )
    .orderBy("n_aug", "method")
)
nb.chart("boostaug", "accuracy_vs_n_aug.png")

# COMMAND ----------

nb.close()
