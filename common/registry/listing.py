"""What the registry holds of the suite's models, one line per registered model: what the results summary says."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.registry.gate import RULES
from common.registry.naming import PIPELINE_TAG
from common.registry.store import RegistryUnavailable, champion_version, measures_of, registry_client

if TYPE_CHECKING:
    from common.platform.runner.job_context import JobContext


def registry_lines(ctx: "JobContext") -> list[str]:
    """One line per registered model named with ``registry.name_prefix`` (pipelines x methods: a bounded list): the
    version holding ``registry.alias`` with its recipe's gate metric over its seeds and the gate's paired figures,
    and the newest version's gate decision where that is another version; [] where no pipeline registers. A
    registry that cannot list models by name (Unity Catalog takes no filter) gives one line saying where to look."""
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
        versions = sorted(client.search_model_versions(f"name = '{model.name}'"), key=lambda v: int(v.version))
        try:
            champion = champion_version(client, model.name, cfg.alias)
        except RegistryUnavailable as exc:
            lines.append(f"{model.name}: {exc}")
            continue
        line = f"{model.name}: " + (f"@{cfg.alias} v{champion.version}" if champion else f"no @{cfg.alias}")
        rule = RULES.get(champion.tags.get(PIPELINE_TAG, "")) if champion else None
        measure = measures_of(champion.tags).get(rule.metric) if rule else None
        if measure:
            line += f", {rule.metric} {measure.text()}"
        newest = versions[-1] if versions else None
        if newest and (champion is None or str(newest.version) != str(champion.version)):
            line += (
                f"; newest v{newest.version} {newest.tags.get('gate.decision', '?')}: "
                f"{newest.tags.get('gate.reason', '')}"
            )
        lines.append(line)
    return lines
