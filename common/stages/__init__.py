"""The model stages a job runs: Spark -> Ray -> Delta. A stage takes the job's run, reads its input table,
hands it to the model layer (:mod:`common.models`) on Ray and commits what comes back as one Delta version with
lineage (:mod:`.generation`: fine-tune and generate), with what it reports (:mod:`.accounting`). The model layer
below never imports the runner, the lakehouse's tables or tracking: this layer joins them.
"""
