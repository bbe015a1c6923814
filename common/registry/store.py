"""The registry's MLflow calls: the client on the config's registry, the champion lookup that fails closed,
registering a model and logging a classifier as an MLflow Model of the job's run, and the version tags that carry
a version's tables and figures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from common.registry.gate import Measure
from common.registry.naming import word

if TYPE_CHECKING:
    from common.platform.runner.job_context import JobContext
    from common.registry.candidates import Candidate


def registry_client(ctx: "JobContext"):
    """An MLflow client on the config's registry (``tracking.registry_uri``; null: the tracking URI's own, Unity
    Catalog when that is Databricks). A client of its own: MLflow's process-wide registry URI would also reach
    every subprocess through the environment."""
    from mlflow import MlflowClient
    from mlflow.tracking._model_registry.utils import _get_default_registry_uri_for_tracking_uri

    uri = ctx.cfg.tracking_uri
    return MlflowClient(uri, ctx.cfg.tracking.registry_uri or _get_default_registry_uri_for_tracking_uri(uri))


def log_classifier(ctx: "JobContext", candidate: "Candidate"):
    """Log ``candidate`` as an MLflow Model of the job's run (whose ``mlflow.data`` inputs and outputs are the Delta
    table versions it read and wrote): its tables' versions and locations as the model's params, its metrics
    (``<method>.<metric>.mean|std|n``) linked to the model and to its test table's dataset; returns MLflow's
    ``ModelInfo``."""
    import mlflow

    from common.platform.tracking.tracker import delta_dataset
    from common.registry.mlflow_model import log_model

    lakehouse = ctx.lakehouse
    params = {
        "pipeline": candidate.pipeline,
        "method": candidate.method,
        "classifier": candidate.model,
        **candidate.lineage,
        **table_tags(ctx, "train", candidate.train),
        **table_tags(ctx, "test", candidate.test),
    }
    info = log_model(
        f"classifier-{word(candidate.name)}", params, candidate.folder, candidate.manifest, candidate.examples
    )
    # Linked to the model and its test table; run metrics too, so named by method (one run ships several models).
    test_table = next(iter(candidate.test))
    mlflow.log_metrics(
        {
            f"{word(candidate.name)}.{k.removeprefix('metric.')}": v
            for k, v in measure_tags(candidate.measures, numeric=True).items()
        },
        model_id=info.model_id,
        dataset=delta_dataset(test_table, candidate.test[test_table], lakehouse.location(test_table)),
    )
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
    return {
        n: Measure(float(tags[f"metric.{n}.mean"]), float(tags[f"metric.{n}.std"]), int(tags[f"metric.{n}.n"]))
        for n in names
    }


class RegistryUnavailable(RuntimeError):
    """The registry answered a question with an error that is not "there is no such thing" (down, a timeout, a
    permission): the gate cannot know the champion and keeps the alias where it is."""


def champion_version(client, name: str, alias: str):
    """The version of ``name`` holding ``alias``, or None when the registry says there is none: the registered model
    does not exist, or its aliases (read as a fact, not inferred from an error's wording) do not hold ``alias``. Any
    other error raises :class:`RegistryUnavailable` naming it: the gate fails closed."""
    from mlflow.exceptions import MlflowException

    def unavailable(exc: MlflowException) -> RegistryUnavailable:
        return RegistryUnavailable(
            f"the registry could not say which version of {name} holds @{alias} "
            f"({exc.error_code}: {' '.join(str(exc).split())[:200]})"
        )

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


def create_registered_model(client, name: str, description: str) -> None:
    """Create registered model ``name`` unless it exists (a concurrent run may create it first)."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description=description)
    except MlflowException as exc:
        if exc.error_code not in ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS"):
            raise
