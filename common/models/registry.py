"""What a run ships: a pipeline's final classifiers as MLflow pyfunc models, registered, and promoted by the gate.

A job that trained its classifiers hands :func:`ship` one :class:`Candidate` per method: the model folder its seed-0
classifier was saved to, the manifest the loader needs, its test metrics over the R seeds, and the Delta table
versions it was trained and tested on. For each one :func:`ship` logs an MLflow Model
(:mod:`common.models.pyfunc_model`: ``loader_module`` the suite's :mod:`common.pyfunc.loader`, carried in
``code_paths``; a signature, an input example, pinned pip requirements, the classifier's files; its tables' versions
as params, its metrics linked to the test table's dataset), registers it as a new version of
``<registry.name_prefix><pipeline>_<method>`` (``_<model>`` added for a classifier kind other than fastText:
``..._eda_boostaug_encoder``) and runs the gate (:mod:`common.models.promotion`): the version takes
``registry.alias`` or records why not (version tags ``gate.decision`` and ``gate.reason``, and a line in the job's
summary). A run that reused its results trains nothing and ships nothing, so a rerun adds no version.
"""
from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from common.models.promotion import RULES, Decision, Measure, decide
from common.models.pyfunc_model import read_manifest

if TYPE_CHECKING:
    from common.models.config import EncoderConfig
    from common.platform.job import JobContext, JobRun

log = logging.getLogger(__name__)

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
    model: str = "fasttext"                # the classifier kind of the pipeline's eval.models

    @property
    def name(self) -> str:
        """The method, and the classifier kind where it is not fastText (``eda+boostaug``,
        ``eda+boostaug_encoder``): what the registered model, the logged model and its metrics are named by."""
        return classifier_name(self.method, self.model)


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


def registry_client(ctx: "JobContext"):
    """An MLflow client on the config's registry (``tracking.registry_uri``; null: the tracking URI's own, Unity
    Catalog when that is Databricks). A client of its own: MLflow's process-wide registry URI would also reach
    every subprocess through the environment."""
    from mlflow import MlflowClient
    from mlflow.tracking._model_registry.utils import _get_default_registry_uri_for_tracking_uri

    uri = ctx.cfg.tracking_uri
    return MlflowClient(uri, ctx.cfg.tracking.registry_uri or _get_default_registry_uri_for_tracking_uri(uri))


def log_classifier(ctx: "JobContext", candidate: Candidate):
    """Log ``candidate`` as an MLflow Model of the job's run (whose ``mlflow.data`` inputs and outputs are the Delta
    table versions it read and wrote): its tables' versions and locations as the model's params, its metrics
    (``<method>.<metric>.mean|std|n``) linked to the model and to its test table's dataset; returns MLflow's
    ``ModelInfo``."""
    import mlflow

    from common.models.pyfunc_model import log_model
    from common.platform.tracking import delta_dataset

    lakehouse = ctx.lakehouse
    params = {"pipeline": candidate.pipeline, "method": candidate.method, "classifier": candidate.model,
              **candidate.lineage, **table_tags(ctx, "train", candidate.train),
              **table_tags(ctx, "test", candidate.test)}
    info = log_model(f"classifier-{word(candidate.name)}", params, candidate.folder, candidate.manifest,
                     candidate.examples)
    # Linked to the model and its test table; run metrics too, so named by method (one run ships several models).
    test_table = next(iter(candidate.test))
    mlflow.log_metrics({f"{word(candidate.name)}.{k.removeprefix('metric.')}": v
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
        values = rescore(str(folder), read_manifest(str(folder)))
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


def classifier_name(method: str, model: str) -> str:
    """``method``, and the classifier kind where it is not fastText: ``eda+boostaug``, ``eda+boostaug_encoder``."""
    return method if model == "fasttext" else f"{method}_{model}"


def method_candidates(pipeline: str, results, folders: Mapping[tuple[str, str], str], metrics: Sequence[str],
                      train: Callable[[str], dict[str, int]], substitute: Sequence[Sequence[str]] = (),
                      **shared: Any) -> list[Candidate]:
    """One candidate per kept classifier of ``folders`` ((model, method) -> the folder its seed-0 classifier was
    kept in, with the loader's ``model.json``): its ``metrics`` over the rows of ``results`` (a pandas frame of
    the job's results, one row per seed, with ``model`` and ``method`` columns) of that model and method, its
    training tables ``train(method)``, ``substitute`` patterns added to its manifest where given; ``shared``: the
    :class:`Candidate` fields every method has alike (test, examples, lineage, rescore)."""
    lineage = shared.pop("lineage", {})
    manifests = {key: read_manifest(folder) for key, folder in folders.items()}
    extra = {"substitute": [list(p) for p in substitute]} if substitute else {}
    out = []
    for (model, method), folder in folders.items():
        rows = results[(results["model"] == model) & (results["method"] == method)]
        out.append(Candidate(pipeline, method, folder, {**manifests[(model, method)], **extra},
                             {m: Measure.of(rows[m].tolist()) for m in metrics}, train=train(method),
                             lineage=dict(lineage), model=model, **shared))
    return out


def task_rescore(ctx: "JobContext", evaluate: Callable[..., Mapping[str, float]], test: Sequence[Any],
                 encoder: Optional["EncoderConfig"] = None) -> Rescore:
    """A :data:`Rescore` running ``evaluate(model_dir=<the champion's copy>, test=test)`` in a Ray task, as the
    job's own classifiers are evaluated (``test``: row sources, (files, filters)): an encoder champion in a task of
    torch's workers with ``encoder``'s CPUs and GPUs (the job's evaluation encoder config)."""
    from common.models.classifiers.text_classifier import run_tasks
    from common.pyfunc.loader import ENCODER_KINDS

    def score(uri: str, manifest: Mapping[str, Any]) -> Mapping[str, float]:
        jobs = [{"model_dir": uri, "test": list(test)}]
        if manifest.get("kind") in ENCODER_KINDS:
            cpus, gpus = (encoder.num_cpus, encoder.num_gpus) if encoder else (1, 0.0)
            return run_tasks(ctx.ray(), evaluate, jobs, cpus, gpus, torch=True)[0]
        return run_tasks(ctx.ray(), evaluate, jobs)[0]

    return lakehouse_rescore(ctx, score)


class RegistryUnavailable(RuntimeError):
    """The registry answered a question with an error that is not "there is no such thing" (down, a timeout, a
    permission): the gate cannot know the champion and keeps the alias where it is."""


def champion_version(client, name: str, alias: str):
    """The version of ``name`` holding ``alias``, or None when the registry says there is none: the registered model
    does not exist, or its aliases (read as a fact, not inferred from an error's wording) do not hold ``alias``. Any
    other error raises :class:`RegistryUnavailable` naming it: the gate fails closed."""
    from mlflow.exceptions import MlflowException

    def unavailable(exc: MlflowException) -> RegistryUnavailable:
        return RegistryUnavailable(f"the registry could not say which version of {name} holds @{alias} "
                                   f"({exc.error_code}: {' '.join(str(exc).split())[:200]})")

    try:
        model = client.get_registered_model(name)
    except MlflowException as exc:
        if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND"):
            return None
        raise unavailable(exc) from None
    aliases = model.aliases or {}
    if alias not in aliases:
        return None
    try:
        return client.get_model_version(name, str(aliases[alias]))
    except MlflowException as exc:
        raise unavailable(exc) from None


def gate(ctx: "JobContext", client, name: str, candidate: Candidate,
         rescore: Optional[Rescore]) -> Decision:
    """The gate's decision for a new version of ``name`` holding ``candidate`` (promotion without comparison where
    the pipeline is not gated). Raises :class:`RegistryUnavailable` when the registry cannot say who the champion
    is: no champion is assumed from an error."""
    cfg = ctx.cfg.registry
    champion = champion_version(client, name, cfg.alias)
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
    """Log, register and gate each candidate (nothing where the registry config does not ship its pipeline and
    classifier kind); returns what happened, also recorded in the job's summary lines and the run's
    ``shipped.json``."""
    cfg = ctx.cfg.registry
    chosen = [c for c in candidates if cfg.ships(c.pipeline, c.model)]
    if not chosen:
        return []
    client = registry_client(ctx)
    done = []
    for candidate in chosen:
        name = registered_name(cfg.name_prefix, candidate.pipeline, candidate.name)
        info = log_classifier(ctx, candidate)
        create_registered_model(client, name, f"{candidate.pipeline} pipeline's {candidate.method} classifier "
                                              f"({candidate.model}; catalog-augment)")
        tags = {**measure_tags(candidate.measures), "classifier": candidate.model, **candidate.lineage,
                **table_tags(ctx, "train", candidate.train),
                **table_tags(ctx, "test", candidate.test)}
        version = client.create_model_version(name, info.model_uri, run_id=tr.run_id, tags=tags,
                                              model_id=info.model_id)
        undecided = False
        try:
            decision = gate(ctx, client, name, candidate, candidate.rescore or rescore)
        except RegistryUnavailable as exc:  # fail closed: the alias stays, and the run says the ship is incomplete
            decision, undecided = Decision(False, f"{exc}: the alias stays"), True
            tr.result.incomplete.append(f"{name} v{version.version}: {exc}")
        if decision.promote:
            client.set_registered_model_alias(name, cfg.alias, version.version)
        # "undecided", not "kept": the gate never judged this version (the registry erred), and nothing may read the
        # tag as a verdict.
        verdict = "promoted" if decision.promote else "undecided" if undecided else "kept"
        client.set_model_version_tag(name, version.version, "gate.decision", verdict)
        client.set_model_version_tag(name, version.version, "gate.reason", decision.reason)
        shipped = Shipped(name, str(version.version), info.model_uri, decision.promote, decision.reason)
        log.info("%s", shipped.line(cfg.alias))
        tr.result.notes.append(shipped.line(cfg.alias))
        done.append(shipped)
    tr.log_dict([s.__dict__ for s in done], "models/shipped.json")
    return done


def registry_lines(ctx: "JobContext") -> list[str]:
    """One line per registered model named with ``registry.name_prefix`` (pipelines x methods: a bounded list): the
    version holding ``registry.alias`` with its gate metric over its seeds, and the newest version's gate decision
    where that is another version; [] where no pipeline registers. A registry that cannot list models by name (Unity
    Catalog takes no filter) gives one line saying where to look."""
    from mlflow.exceptions import MlflowException

    cfg = ctx.cfg.registry
    if not cfg.pipelines:
        return []
    client = registry_client(ctx)
    try:
        models = client.search_registered_models(filter_string=f"name LIKE '{cfg.name_prefix}%'", max_results=1000)
    except MlflowException as exc:
        return [f"the registry lists no models by name ({exc.error_code}): see {cfg.name_prefix}<pipeline>_<method>"]
    lines = []
    # LIKE reads the prefix's "_" as any character: the names are checked again.
    for model in sorted((m for m in models if m.name.startswith(cfg.name_prefix)), key=lambda m: m.name):
        rule = RULES.get(model.name[len(cfg.name_prefix):].split("_")[0])
        versions = sorted(client.search_model_versions(f"name = '{model.name}'"), key=lambda v: int(v.version))
        try:
            champion = champion_version(client, model.name, cfg.alias)
        except RegistryUnavailable as exc:
            lines.append(f"{model.name}: {exc}")
            continue
        line = f"{model.name}: " + (f"@{cfg.alias} v{champion.version}" if champion else f"no @{cfg.alias}")
        measure = measures_of(champion.tags).get(rule.metric) if champion and rule else None
        if measure:
            line += f", {rule.metric} {measure.text()}"
        newest = versions[-1] if versions else None
        if newest and (champion is None or str(newest.version) != str(champion.version)):
            line += f"; newest v{newest.version} {newest.tags.get('gate.decision', '?')}: " \
                    f"{newest.tags.get('gate.reason', '')}"
        lines.append(line)
    return lines
