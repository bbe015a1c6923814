# Databricks notebook source
# MAGIC %md
# MAGIC # CGA pipeline (paper 1): consistency-guided augmentation with a fine-tuned generator
# MAGIC
# MAGIC Pipeline `cga` = `consistency` (jobs whose inputs and config are unchanged are skipped) + version pairs,
# MAGIC the generator fine-tuned on them in a Ray actor, sampling on a Ray Data actor pool, the similarity
# MAGIC filter at T, HFT on D_L ∪ D_aug, and the paper's Figure-2 sweep over T and N. On a GPU cluster set
# MAGIC `cga.model.name_or_path` and the `num_gpus` keys (README: Production use).
# MAGIC
# MAGIC Widgets `conf` and `overrides` (e.g. `cga.threshold=0.8`) are the bundle jobs' parameters.
# MAGIC Locally: `.venv/bin/python notebooks/cga.py [--conf conf/demo.yaml] [--overrides '...']`.

# COMMAND ----------

from jobs.notebook import Notebook

nb = Notebook(globals())

# COMMAND ----------

results = nb.run("cga")

# COMMAND ----------

from common.catalog.metrics import by_method

lh = nb.ctx.lakehouse
# D_aug: generated titles at or above T, each with its source title, the source's category and its score.
nb.show(lh.read("cga_augmented").select("source_title", "title", "category", "score"), 10)
nb.show(by_method(lh.read("consistency_results")).orderBy("method"))
nb.show(lh.read("cga_sweep_results").orderBy("threshold", "n"))

# COMMAND ----------

nb.chart("cga", "figure2.png")

# COMMAND ----------

nb.close()
