"""The code a registered MLflow model carries (``code_paths``): its pyfunc loader and the scorers the suite itself
predicts with, so a model loaded by ``mlflow.pyfunc.load_model`` in a process without the suite, or served by
``mlflow models serve``, gives the suite's predictions.

Self-contained by rule (tests/test_architecture.py): the standard library, numpy, pandas, fastText and MLflow (and
for the encoder kinds torch, transformers and safetensors) only, and relative imports among its own modules, because
a model ships this folder under another top-level name (:data:`common.registry.mlflow_model.SHIPPED_PACKAGE`). The
suite imports its modules as ``common.pyfunc.*``.
"""
