"""A spark-submit driver that runs a pipeline notebook as a scheduled Databricks job runs it: the session exists
before the notebook starts (``spark``, built here as a cluster's runtime builds it, with none of the suite's
settings), the notebook's cells execute in one namespace (``__name__`` is not ``__main__``: no command line of its
own), and its parameters come the way a scheduled run passes them, ``$AUGMENT_CONF`` and ``$AUGMENT_OVERRIDES``.
Tables go through ``display`` (printed here).

Usage: spark-submit --py-files dist/augment.zip tests/cluster/notebook_job.py NOTEBOOK_FILE
"""

from __future__ import annotations

import runpy
import sys


def main(notebook: str) -> None:
    import logging

    from pyspark.sql import SparkSession

    # The job's Python log at INFO, as a job cluster configured for it shows (the suite's progress and the Ray on
    # Spark task report are INFO lines); a notebook configures no logging itself.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    spark = SparkSession.builder.getOrCreate()

    def display(df) -> None:
        df.show(20, truncate=False)

    runpy.run_path(notebook, init_globals={"spark": spark, "display": display}, run_name="notebook")
    print(f"notebook {notebook}: every cell ran", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
