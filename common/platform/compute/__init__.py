"""The engines a job computes on: the SparkSession factory (:mod:`.session`) and the local JVMs' class
archive (:mod:`.jvm_archive`), the Ray runtime (:mod:`.ray_runtime`), Ray on Spark (:mod:`.ray_on_spark`,
:mod:`.ray_on_spark_nodes`), Ray stages' resources and retries (:mod:`.ray_stages`) and bounded waits on Ray work
(:mod:`.ray_waits`).
"""
