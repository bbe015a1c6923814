"""What a run ships: a pipeline's final classifiers as MLflow pyfunc models, registered, and promoted by the gate.

A job that trained its classifiers hands :func:`ship` one :class:`Candidate` per method: the model folder its seed-0
classifier was saved to, the manifest the loader needs, its test metrics over the R seeds, and the Delta table
versions it was trained and tested on. For each one :func:`ship` logs an MLflow Model (``loader_module`` the
suite's :mod:`common.pyfunc.loader`, carried in ``code_paths`` as :data:`SHIPPED_PACKAGE`; a signature, an input
example, pinned pip requirements, the classifier's files; its tables' versions as params, its metrics linked to the
test table's dataset), registers it as a new version of ``<registry.name_prefix><pipeline>_<method>`` and runs
the gate (:mod:`common.models.promotion`): the version takes ``registry.alias`` or records why not (version tags
``gate.decision`` and ``gate.reason``, and a line in the job's summary). A run that reused its results trains
nothing and ships nothing, so a rerun adds no version.
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from common.models.promotion import RULES, Decision, Measure, decide

if TYPE_CHECKING:
    from common.platform.job import JobContext, JobRun

log = logging.getLogger(__name__)

# The top-level name the model's copy of common/pyfunc has (distinct from the suite's own package names, so a
# serving process that also has the suite installed loads the model's copy).
SHIPPED_PACKAGE = "catalog_augment_pyfunc"
LOADER = f"{SHIPPED_PACKAGE}.loader"
# What the loader imports besides the standard library (versions pinned from this environment).
REQUIREMENTS = ("mlflow", "fasttext-numpy2", "numpy", "pandas")
# Rescores the champion's classifier (a local copy of its files and its manifest) on the candidate's test table
# versions: one value per metric, or None where the job cannot.
Rescore = Callable[[str, Mapping[str, Any]], Optional[Mapping[str, float]]]


@dataclass
class Candidate:
    """One method's final classifier, ready to ship."""

    pipeline: str
    method: str
    folder: str                            # the classifier's files: a local path or an object-store URI
    manifest: dict[str, Any]               # the loader's model.json: kind and its fields (common.pyfunc.loader)
    measures: dict[str, Measure]           # test metrics over the R seeds
    train: dict[str, int]                  # the Delta tables (and versions) it was trained on
    test: dict[str, int]                   # the fixed test tables (and versions) its metrics were measured on
    examples: list[str]                    # a few input texts: the model's input example
    lineage: dict[str, str] = field(default_factory=dict)  # config hash, generator model and version...
    rescore: Optional[Rescore] = None      # this candidate's own re-scoring of a champion (else ship's)


@dataclass(frozen=True)
class Shipped:
    """What :func:`ship` did with one candidate."""

    name: str
    version: str
    model_uri: str
    champion: bool           # the version holds the alias now
    reason: str

    def line(self, alias: str) -> str:
        state = f"took @{alias}" if self.champion else f"not @{alias}"
        return f"model {self.name} v{self.version} {state}: {self.reason}"


def generator_lineage(model, versions: Sequence[str] = ()) -> dict[str, str]:
    """A generative method's lineage for its classifier's model: the generator (``model``: its
    :class:`~common.models.config.T5ModelConfig`) by name and kind, and the model versions that generated the
    training rows (the generated table's ``model_version`` values), where given."""
    name = model.endpoint.model if model.served else (model.name_or_path or model.kind)
    out = {"generator.model": str(name), "generator.kind": model.kind}
    if versions:
        out["generator.model_version"] = ", ".join(sorted(v for v in versions if v))
    return out


def word(text: str) -> str:
    """``text`` with every character other than letters, digits and ``_`` as ``_`` (what Unity Catalog allows in a
    model name, and MLflow in a model or metric name; ``eda+boostaug`` -> ``eda_boostaug``)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def registered_name(prefix: str, pipeline: str, method: str) -> str:
    """``<prefix><pipeline>_<method>`` (:func:`word` of the pipeline and method)."""
    return prefix + word(f"{pipeline}_{method}")


def signature(kind: str):
    """The pyfunc signature of a classifier ``kind`` (:data:`common.pyfunc.loader.KINDS`): text in; label,
    confidence and level (``hft``) or the decided labels and each label's score (``multilabel``) out."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Schema

    inputs = Schema([ColSpec("string", "text")])
    if kind == "hft":
        outputs = Schema([ColSpec("string", "label"), ColSpec("double", "confidence"), ColSpec("long", "level")])
    else:
        outputs = Schema([ColSpec(Array("string"), "labels"), ColSpec(Array("double"), "scores")])
    return ModelSignature(inputs=inputs, outputs=outputs)


def requirements() -> list[str]:
    """The loader's pip requirements, pinned to this environment's versions (unpinned where one is not installed
    as that distribution)."""
    from importlib.metadata import PackageNotFoundError, version

    pinned = []
    for name in REQUIREMENTS:
        try:
            pinned.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            pinned.append(name)
    return pinned


def registry_client(ctx: "JobContext"):
    """An MLflow client on the config's registry (``tracking.registry_uri``; null: the tracking URI's own, Unity
    Catalog when that is Databricks). A client of its own: MLflow's process-wide registry URI would also reach
    every subprocess through the environment."""
    from mlflow import MlflowClient
    from mlflow.tracking._model_registry.utils import _get_default_registry_uri_for_tracking_uri

    uri = ctx.cfg.tracking_uri
    return MlflowClient(uri, ctx.cfg.tracking.registry_uri or _get_default_registry_uri_for_tracking_uri(uri))


def model_files(candidate: Candidate, folder: Path) -> Path:
    """The candidate's classifier files and ``model.json`` in ``folder``/classifier."""
    from common.platform.storage import is_local, local_copy
    from common.pyfunc.loader import MANIFEST

    target = folder / "classifier"
    source = local_copy(candidate.folder)
    try:
        shutil.copytree(source, target)
    finally:
        if not is_local(candidate.folder):
            shutil.rmtree(source, ignore_errors=True)
    (target / MANIFEST).write_text(json.dumps(candidate.manifest, indent=1, sort_keys=True), encoding="utf-8")
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


def log_classifier(ctx: "JobContext", candidate: Candidate):
    """Log ``candidate`` as an MLflow Model of the job's run (whose ``mlflow.data`` inputs and outputs are the Delta
    table versions it read and wrote): its tables' versions and locations as the model's params, its metrics
    (``<method>.<metric>.mean|std|n``) linked to the model and to its test table's dataset; returns MLflow's
    ``ModelInfo``."""
    import mlflow
    import pandas as pd

    from common.platform.tracking import delta_dataset

    lakehouse = ctx.lakehouse
    with tempfile.TemporaryDirectory(prefix="augment-model-") as tmp:
        info = mlflow.pyfunc.log_model(
            name=f"classifier-{word(candidate.method)}", loader_module=LOADER,
            data_path=str(model_files(candidate, Path(tmp))), code_paths=[str(shipped_code(Path(tmp)))],
            signature=signature(candidate.manifest["kind"]),
            input_example=pd.DataFrame({"text": candidate.examples[:3]}), pip_requirements=requirements(),
            params={"pipeline": candidate.pipeline, "method": candidate.method, **candidate.lineage,
                    **table_tags(ctx, "train", candidate.train), **table_tags(ctx, "test", candidate.test)})
    # Linked to the model and its test table; run metrics too, so named by method (one run ships several models).
    test_table = next(iter(candidate.test))
    mlflow.log_metrics({f"{word(candidate.method)}.{k.removeprefix('metric.')}": v
                        for k, v in measure_tags(candidate.measures, numeric=True).items()}, model_id=info.model_id,
                       dataset=delta_dataset(test_table, candidate.test[test_table], lakehouse.location(test_table)))
    return info


def table_tags(ctx: "JobContext", prefix: str, tables: Mapping[str, int]) -> dict[str, str]:
    """``<prefix>.<table>``: each table's version, and ``<prefix>.<table>.location``: where it is (two lakehouses
    both have an ``accuracy_test`` v0)."""
    out = {}
    for table, version in tables.items():
        out[f"{prefix}.{table}"] = str(version)
        out[f"{prefix}.{table}.location"] = ctx.lakehouse.location(table)
    return out


def measure_tags(measures: Mapping[str, Measure], numeric: bool = False) -> dict[str, Any]:
    """``metric.<name>.mean|std|n`` of each measure (as strings for tags, unless ``numeric``)."""
    out = {}
    for name, m in measures.items():
        for part, value in (("mean", m.mean), ("std", m.std), ("n", m.n)):
            out[f"metric.{name}.{part}"] = value if numeric else repr(value)
    return out


def measures_of(tags: Mapping[str, str]) -> dict[str, Measure]:
    """The measures a version's :func:`measure_tags` recorded."""
    names = {k.split(".")[1] for k in tags if k.startswith("metric.") and k.endswith(".mean")}
    return {n: Measure(float(tags[f"metric.{n}.mean"]), float(tags[f"metric.{n}.std"]), int(tags[f"metric.{n}.n"]))
            for n in names}


def champion_figures(ctx: "JobContext", client, name: str, champion, candidate: Candidate,
                     rescore: Optional[Rescore]) -> Optional[dict[str, Measure]]:
    """The champion's measures on the candidate's test table versions: its own recorded ones when it was measured
    on the same versions, else ``rescore``'s values on them (each with the champion's recorded std and n); None
    when neither is possible."""
    recorded = measures_of(champion.tags)
    if {k: v for k, v in champion.tags.items() if k.startswith("test.")} == table_tags(ctx, "test", candidate.test):
        return recorded
    if rescore is None:
        return None
    import mlflow

    with tempfile.TemporaryDirectory(prefix="augment-champion-") as tmp:
        path = mlflow.artifacts.download_artifacts(f"models:/{name}/{champion.version}", dst_path=tmp,
                                                   tracking_uri=client._registry_uri)
        folder = Path(path) / "data" / "classifier"
        from common.pyfunc.loader import MANIFEST

        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        values = rescore(str(folder), manifest)
    if values is None:
        return None
    log.info("champion %s v%s re-scored on %s: %s", name, champion.version, candidate.test, values)
    return {m: Measure(float(values[m]), recorded[m].std, recorded[m].n) for m in values if m in recorded}


def lakehouse_rescore(ctx: "JobContext", score: Callable[[str, Mapping[str, Any]], Mapping[str, float]]) -> Rescore:
    """A :data:`Rescore` that copies the champion's files under the lakehouse's models (where Spark's executors and
    Ray's workers on other nodes read them), runs ``score(uri, manifest)`` and removes the copy."""
    from common.platform.job import hash_of
    from common.platform.storage import put_folder, remove_tree

    def rescore(folder: str, manifest: Mapping[str, Any]) -> Mapping[str, float]:
        uri = ctx.models_dir("champion", hash_of(folder, dict(manifest)))
        put_folder(folder, uri)
        try:
            return score(uri, manifest)
        finally:
            remove_tree(uri)

    return rescore


def method_candidates(pipeline: str, results, folders: Mapping[str, str], metrics: Sequence[str],
                      manifests: Mapping[str, dict[str, Any]], train: Callable[[str], dict[str, int]],
                      **shared: Any) -> list[Candidate]:
    """One candidate per method of ``folders`` (method -> its kept classifier's folder): its ``metrics`` over the
    rows of ``results`` (a pandas frame of the job's results, one row per seed) with that method, its manifest
    from ``manifests``, its training tables ``train(method)``; ``shared``: the :class:`Candidate` fields every
    method has alike (test, examples, lineage)."""
    lineage = shared.pop("lineage", {})
    return [Candidate(pipeline, method, folder, dict(manifests[method]),
                      {m: Measure.of(results.loc[results["method"] == method, m].tolist()) for m in metrics},
                      train=train(method), lineage=dict(lineage), **shared)
            for method, folder in folders.items()]


def task_rescore(ctx: "JobContext", evaluate: Callable[..., Mapping[str, float]], test: Sequence[Any]) -> Rescore:
    """A :data:`Rescore` running ``evaluate(model_dir=<the champion's copy>, test=test)`` in a Ray task, as the
    job's own classifiers are evaluated (``test``: row sources, (files, filters))."""
    from common.models.classifiers.text_classifier import run_tasks

    def score(uri: str, manifest: Mapping[str, Any]) -> Mapping[str, float]:
        return run_tasks(ctx.ray(), evaluate, [{"model_dir": uri, "test": list(test)}])[0]

    return lakehouse_rescore(ctx, score)


def gate(ctx: "JobContext", client, name: str, candidate: Candidate,
         rescore: Optional[Rescore]) -> Decision:
    """The gate's decision for a new version of ``name`` holding ``candidate`` (promotion without comparison where
    the pipeline is not gated)."""
    from mlflow.exceptions import MlflowException

    cfg = ctx.cfg.registry
    try:
        champion = client.get_model_version_by_alias(name, cfg.alias)
    except MlflowException:
        champion = None
    if champion is None:
        return decide(RULES[candidate.pipeline], candidate.measures, None)
    if candidate.pipeline not in cfg.gate:
        return Decision(True, f"registry.gate does not list {candidate.pipeline}: every new version takes the alias")
    figures = champion_figures(ctx, client, name, champion, candidate, rescore)
    if figures is None:
        return Decision(False, f"champion v{champion.version} was measured on other test versions and cannot be "
                               "re-scored on this run's: the alias stays")
    return decide(RULES[candidate.pipeline], candidate.measures, figures, cfg.margin, f"champion v{champion.version}")


def create_registered_model(client, name: str, description: str) -> None:
    """Create registered model ``name`` unless it exists (a concurrent run may create it first)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description=description)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise


def ship(ctx: "JobContext", tr: "JobRun", candidates: Sequence[Candidate],
         rescore: Optional[Rescore] = None) -> list[Shipped]:
    """Log, register and gate each candidate (nothing where ``registry.pipelines`` leaves its pipeline out);
    returns what happened, also recorded in the job's summary lines and the run's ``shipped.json``."""
    cfg = ctx.cfg.registry
    chosen = [c for c in candidates if c.pipeline in cfg.pipelines]
    if not chosen:
        return []
    client = registry_client(ctx)
    done = []
    for candidate in chosen:
        name = registered_name(cfg.name_prefix, candidate.pipeline, candidate.method)
        info = log_classifier(ctx, candidate)
        create_registered_model(client, name, f"{candidate.pipeline} pipeline's {candidate.method} classifier "
                                              "(catalog-augment)")
        tags = {**measure_tags(candidate.measures), **candidate.lineage, **table_tags(ctx, "train", candidate.train),
                **table_tags(ctx, "test", candidate.test)}
        version = client.create_model_version(name, info.model_uri, run_id=tr.run_id, tags=tags,
                                              model_id=info.model_id)
        decision = gate(ctx, client, name, candidate, candidate.rescore or rescore)
        if decision.promote:
            client.set_registered_model_alias(name, cfg.alias, version.version)
        client.set_model_version_tag(name, version.version, "gate.decision", "promoted" if decision.promote else "kept")
        client.set_model_version_tag(name, version.version, "gate.reason", decision.reason)
        shipped = Shipped(name, str(version.version), info.model_uri, decision.promote, decision.reason)
        log.info("%s", shipped.line(cfg.alias))
        tr.result.notes.append(shipped.line(cfg.alias))
        done.append(shipped)
    tr.log_dict([s.__dict__ for s in done], "models/shipped.json")
    return done
