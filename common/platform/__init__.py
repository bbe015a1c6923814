"""The platform every job stands on: config loading, the SparkSession factory, the Ray runtime, the Delta
lakehouse (table API and its two write paths), MLflow tracking, storage, the job context and runner, the CLI.

It imports nothing from the other ``common`` packages: data, models, algorithms and the method packages
depend on it, never the reverse (``tests/test_architecture.py`` keeps it so).
"""
