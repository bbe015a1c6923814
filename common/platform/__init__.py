"""The platform every job stands on, one folder per concept:

* :mod:`.process`    signals and how a process ends, its native heap, its identity (for leases and runs), packages
* :mod:`.compute`    the SparkSession factory, the JVM class archive, the Ray runtime, Ray on Spark, Ray stages' waits
* :mod:`.lakehouse`  Delta tables: the table API, metadata and lineage, the Ray handoff, the delta-rs and native write
  paths, the commit lease and flock, maintenance
* :mod:`.tracking`   MLflow runs, what they record, runs under faults, the outbox of a run whose server is down
* :mod:`.reports`    dataset cards, report folders, the docs site's results pages
* :mod:`.doctor`     ``augment doctor``'s checks and report
* :mod:`.runner`     the job context, a job's tracked run, pipelines, a job module's entry, the ``augment`` CLI

At its root only what all of them use: the typed config (:mod:`.config`, :mod:`.base_config`), its loading and
reference (:mod:`.config_loader`, :mod:`.config_reference`), errors and exit codes (:mod:`.errors`) and storage paths
(:mod:`.storage`). It imports nothing from the other ``common`` packages: data, models, algorithms and the method
packages depend on it, never the reverse (``tests/test_architecture.py`` keeps it so).
"""
