"""A classifier folder as an MLflow Model with the pyfunc flavour: the loader (:mod:`common.pyfunc.loader`, carried in
``code_paths`` as :data:`SHIPPED_PACKAGE`), the classifier's files and its manifest as the model's data, a signature
per
classifier kind, an input example and pinned pip requirements. :mod:`common.registry` logs and registers
these; :func:`model_arguments` also serves ``mlflow.pyfunc.save_model`` for a model outside any run.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from common.models.classifiers.manifest import write_manifest

# The top-level name the model's copy of common/pyfunc has (distinct from the suite's own package names, so a
# serving process that also has the suite installed loads the model's copy).
SHIPPED_PACKAGE = "catalog_augment_pyfunc"
LOADER = f"{SHIPPED_PACKAGE}.loader"
# What the loader imports besides the standard library (versions pinned from this environment); the kinds whose
# loader class declares TORCH also need torch and transformers.
REQUIREMENTS = ("mlflow", "fasttext-numpy2", "numpy", "pandas")
ENCODER_REQUIREMENTS = ("torch", "transformers", "tokenizers", "safetensors")


def signature(kind: str):
    """The pyfunc signature of a classifier ``kind``: text in; out, the columns its loader class declares
    (:data:`common.pyfunc.loader.KINDS`, ``OUTPUTS``)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Schema

    from common.pyfunc.loader import KINDS

    def spec(name: str, kind: str) -> ColSpec:
        return (
            ColSpec(Array(kind.removeprefix("list<").removesuffix(">")), name)
            if kind.startswith("list<")
            else ColSpec(kind, name)
        )

    return ModelSignature(
        inputs=Schema([ColSpec("string", "text")]),
        outputs=Schema([spec(name, kind) for name, kind in KINDS[kind].OUTPUTS]),
    )


def requirements(kind: str, installed: Optional[Callable[[str], str]] = None) -> list[str]:
    """The loader's pip requirements for a classifier ``kind``, pinned to this environment's versions (``installed``:
    a distribution's version, importlib's by default; less a local version label such as ``+cpu``). Raises
    RuntimeError naming the package where one is not installed as that distribution: an unpinned requirement would
    let a serving environment resolve another version than the one the model was trained and tested with."""
    from importlib.metadata import PackageNotFoundError, version

    from common.pyfunc.loader import KINDS

    pinned = []
    for name in REQUIREMENTS + (ENCODER_REQUIREMENTS if KINDS[kind].TORCH else ()):
        try:
            pinned.append(f"{name}=={(installed or version)(name).split('+')[0]}")
        except PackageNotFoundError:
            raise RuntimeError(
                f"the {kind} classifier's requirement {name} cannot be pinned: no distribution named "
                f"{name} is installed here (pip install {name}, or install the suite with its "
                "extras); the model is not logged with an unpinned requirement"
            ) from None
    return pinned


def model_files(source_uri: str, manifest: Mapping[str, Any], folder: Path) -> Path:
    """The classifier files of ``source_uri`` (a local path or an object-store URI) and ``manifest`` as the loader's
    ``model.json``, in ``folder``/classifier."""
    from common.platform.storage import COMPLETE, WRITING, is_local, local_copy

    target = folder / "classifier"
    source = local_copy(source_uri)
    try:
        # The suite's write marks are the folder's, not the model's: they stay out of the registered copy.
        shutil.copytree(source, target, ignore=shutil.ignore_patterns(WRITING, COMPLETE))
    finally:
        if not is_local(source_uri):
            shutil.rmtree(source, ignore_errors=True)
    write_manifest(str(target), manifest)
    return target


def shipped_code(folder: Path) -> Path:
    """A copy of ``common/pyfunc`` named :data:`SHIPPED_PACKAGE` in ``folder`` (the model's ``code_paths``), read
    as package resources: from a checkout, an install, or the zip ``spark-submit --py-files`` put on the path."""
    from importlib.resources import files

    target = folder / SHIPPED_PACKAGE
    target.mkdir()
    for entry in files("common.pyfunc").iterdir():
        if entry.name.endswith(".py"):
            (target / entry.name).write_bytes(entry.read_bytes())
    if not (target / "loader.py").is_file():
        raise FileNotFoundError(f"common.pyfunc's loader.py not found beside {files('common.pyfunc')}")
    return target


def model_arguments(
    source_uri: str, manifest: Mapping[str, Any], examples: Sequence[str], folder: Path
) -> dict[str, Any]:
    """``mlflow.pyfunc.save_model``'s and ``log_model``'s arguments for the classifier in ``source_uri`` (its files
    and the loader's code copied under ``folder``; ``manifest``: the loader's model.json): loader module, data and
    code paths, signature, input example (up to three of ``examples``), pinned pip requirements."""
    import pandas as pd

    kind = manifest["kind"]
    return {
        "loader_module": LOADER,
        "data_path": str(model_files(source_uri, manifest, folder)),
        "code_paths": [str(shipped_code(folder))],
        "signature": signature(kind),
        "input_example": pd.DataFrame({"text": list(examples)[:3]}),
        "pip_requirements": requirements(kind),
    }


class _UncheckedPyfunc:
    """``mlflow.pyfunc`` as :meth:`mlflow.models.Model.log`'s flavor, less MLflow's serving check of the input example
    (``Model.log`` reads ``validate_serving_input`` from the arguments it hands the flavor, which
    ``pyfunc.save_model`` would refuse)."""

    @staticmethod
    def save_model(path, mlflow_model=None, validate_serving_input=True, **arguments):
        import mlflow

        mlflow.pyfunc.save_model(path, mlflow_model=mlflow_model, **arguments)


def log_model(
    name: str, params: Mapping[str, str], source_uri: str, manifest: Mapping[str, Any], examples: Sequence[str]
):
    """Log the classifier in ``source_uri`` as MLflow Model ``name`` of the active run, with ``params``; returns
    MLflow's ``ModelInfo``."""
    import mlflow
    from mlflow.models import Model

    from common.pyfunc.loader import KINDS

    with tempfile.TemporaryDirectory(prefix="augment-model-") as tmp:
        arguments = {
            "name": name,
            "params": dict(params),
            **model_arguments(source_uri, manifest, examples, Path(tmp)),
        }
        if KINDS[manifest["kind"]].TORCH:
            # MLflow tries the input example by loading the model and predicting in this process: for an encoder that
            # is torch and the model in the job's driver (Ray tasks hold the suite's torch work). The job has just
            # scored this classifier in its Ray task; the tests load and serve it in processes of their own.
            return Model.log(
                artifact_path=None,
                flavor=_UncheckedPyfunc,
                flavor_name="pyfunc",
                validate_serving_input=False,
                **arguments,
            )
        return mlflow.pyfunc.log_model(**arguments)
