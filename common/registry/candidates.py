"""What a job hands the registry: one :class:`Candidate` per method (the folder its seed-0 classifier was kept
in, the loader's manifest, its figures over the R seeds, its tables' versions, how to score it beside a champion),
and what came of it (:class:`Shipped`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from common.models.classifiers.manifest import read_manifest
from common.registry.gate import Measure
from common.registry.naming import classifier_name

if TYPE_CHECKING:
    from common.models.classifier_config import EncoderConfig


@dataclass
class Candidate:
    """One method's final classifier, ready to ship (``pipeline``: one of
    :data:`~common.registry.naming.SHIPPING_PIPELINES`)."""

    pipeline: str
    method: str
    folder: str  # the classifier's files: a local path or an object-store URI
    manifest: dict[str, Any]  # the loader's model.json: kind and its fields (common.pyfunc.loader)
    measures: dict[str, Measure]  # test metrics over the R seeds
    train: dict[str, int]  # the Delta tables (and versions) it was trained on
    test: dict[str, int]  # the fixed test tables (and versions) its metrics were measured on
    examples: list[str]  # a few input texts: the model's input example
    lineage: dict[str, str] = field(default_factory=dict)  # config hash, generator model and version...
    scoring: dict[str, Any] = field(default_factory=dict)  # JSON: how to score it beside a champion (CompareOf)
    model: str = "fasttext"  # the classifier kind of the pipeline's eval.models

    def to_json(self) -> dict[str, Any]:
        """The candidate as JSON (the shipping ledger's)."""
        return {**asdict(self), "measures": {k: asdict(m) for k, m in self.measures.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Candidate":
        """The candidate :meth:`to_json` wrote."""
        return cls(**{**data, "measures": {k: Measure(**m) for k, m in data["measures"].items()}})

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
    champion: bool  # the version holds the alias now
    reason: str
    decided: bool = True  # the gate judged it (False: the registry erred, and the next run gates it again)

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


def method_candidates(
    pipeline: str,
    results,
    folders: Mapping[tuple[str, str], str],
    metrics: Sequence[str],
    train: Callable[[str], dict[str, int]],
    substitute: Sequence[Sequence[str]] = (),
    **shared: Any,
) -> list[Candidate]:
    """One candidate per kept classifier of ``folders`` ((model, method) -> the folder its seed-0 classifier was
    kept in, with the loader's ``model.json``): its ``metrics`` over the rows of ``results`` (a pandas frame of
    the job's results, one row per seed, with ``model`` and ``method`` columns) of that model and method, its
    training tables ``train(method)``, ``substitute`` patterns added to its manifest where given; ``shared``: the
    :class:`Candidate` fields every method has alike (test, examples, lineage, scoring)."""
    lineage = shared.pop("lineage", {})
    manifests = {key: read_manifest(folder) for key, folder in folders.items()}
    extra = {"substitute": [list(p) for p in substitute]} if substitute else {}
    out = []
    for (model, method), folder in folders.items():
        rows = results[(results["model"] == model) & (results["method"] == method)]
        out.append(
            Candidate(
                pipeline,
                method,
                folder,
                {**manifests[(model, method)], **extra},
                {m: Measure.of(rows[m].tolist()) for m in metrics},
                train=train(method),
                lineage=dict(lineage),
                model=model,
                **shared,
            )
        )
    return out


def task_scoring(test: Sequence[Any], encoder: Optional["EncoderConfig"] = None, multilabel: bool = False) -> dict:
    """A candidate's ``scoring`` (JSON, kept in the shipping ledger) for
    :func:`~common.registry.compare.task_compare`: its test rows
    (row sources, (files, filters)), single- or multi-label, and the CPUs and GPUs of an encoder's task
    (``encoder``: the job's evaluation encoder config)."""
    return {
        "test": [[list(files), [list(f) for f in filters] if filters else None] for files, filters in test],
        "multilabel": multilabel,
        "cpus": encoder.num_cpus if encoder else 1,
        "gpus": encoder.num_gpus if encoder else 0.0,
    }
