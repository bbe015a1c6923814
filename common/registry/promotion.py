"""Gating one registered version of a shipped classifier (:mod:`common.registry.ship` registers it): judged against
the current champion on the same fixed test rows (:mod:`common.registry.compare`, :mod:`common.registry.gate`), the
alias moved by compare-and-set (:func:`take_alias`: the champion read again just before the alias is set and once
after, a version that finds another there judged again), and the verdict recorded on the version's tags. A registry
that errs while gating keeps the alias where it is (fail closed) and tags the version undecided."""

from __future__ import annotations

import json
import logging
import math
import time
from typing import TYPE_CHECKING, Callable, Optional

from common.registry.candidates import Candidate, Shipped
from common.registry.compare import Compare, champion_cells
from common.registry.gate import RULES, Decision, decide
from common.registry.store import RegistryUnavailable, champion_version

if TYPE_CHECKING:
    from common.platform.runner.job import JobContext, JobRun

log = logging.getLogger(__name__)


def settle(
    ctx: "JobContext", tr: "JobRun", client, name: str, model_version, candidate: Candidate, compare: Optional[Compare]
) -> Shipped:
    """Gate ``model_version`` (a registered version of ``name``, from ``candidate``) and record the verdict on its
    tags; a registry error on the way leaves the alias where it is, tags the version undecided where it can, and adds
    the error to the job's incomplete list. Returns what became of the version."""
    from mlflow.exceptions import MlflowException

    cfg, version = ctx.cfg.registry, str(model_version.version)
    ungated = f"registry.gate does not list {candidate.pipeline}"

    def newer(champion) -> Decision:  # ungated: the newer version wins (an older ship finished late never does)
        if champion is None or int(champion.version) < int(version):
            return Decision(True, f"{ungated}: every new version takes the alias")
        return Decision(False, f"{ungated}, and the newer v{champion.version} holds it")

    undecided = False
    try:
        if candidate.pipeline not in cfg.gate:
            decision = take_alias(client, name, cfg.alias, version, newer, cfg.settle_s, cfg.max_rejudge)
        else:
            decision = take_alias(
                client,
                name,
                cfg.alias,
                version,
                lambda champion: judge(ctx, client, name, candidate, champion, compare),
                cfg.settle_s,
                cfg.max_rejudge,
            )
    except (RegistryUnavailable, MlflowException) as exc:  # fail closed: the run says the ship is incomplete
        reason = (
            exc
            if isinstance(exc, RegistryUnavailable)
            else f"the registry erred ({exc.error_code}: {' '.join(str(exc).split())[:200]})"
        )
        decision, undecided = Decision(False, f"{reason}: the alias stays"), True
        tr.result.incomplete.append(f"{name} v{version}: {reason}")
    # "undecided", not "kept": the gate never judged this version (the registry erred), and nothing may read the
    # tag as a verdict.
    verdict = "promoted" if decision.promote else "undecided" if undecided else "kept"
    # The verdict last: a version with gate.decision has its reason and figures (a kill in between leaves it to the
    # next run to gate again).
    tags = {
        "gate.reason": decision.reason,
        **decision.figures,
        "gate.test": json.dumps(candidate.test, sort_keys=True),
        "gate.decision": verdict,
    }
    try:
        for key, value in tags.items():
            client.set_model_version_tag(name, version, key, value)
    except MlflowException as exc:  # the verdict is not on the version: the next run gates it again
        undecided = True
        tr.result.incomplete.append(f"{name} v{version}: its gate tags could not be written ({exc.error_code})")
    shipped = Shipped(name, version, model_version.source, decision.promote, decision.reason, decided=not undecided)
    log.info("%s", shipped.line(cfg.alias))
    tr.result.notes.append(shipped.line(cfg.alias))
    return shipped


def _number(version) -> Optional[str]:
    return None if version is None else str(version.version)


def take_alias(
    client, name: str, alias: str, version: str, judge: Callable[[object], Decision], settle_s: float, max_rejudge: int
) -> Decision:
    """Move ``alias`` of ``name`` to ``version`` when ``judge(champion)`` (the champion's model version, or None)
    says so, by compare-and-set: the champion is read again just before setting, and ``settle_s`` after; where
    another version is there either time (a concurrent run moved it), ``version`` is judged again against that one.
    Returns the last decision; raises :class:`RegistryUnavailable` after ``max_rejudge`` judgements that the alias
    kept moving under (the alias then holds whatever a concurrent run set; this version stays undecided)."""
    champion = champion_version(client, name, alias)
    for _ in range(max_rejudge):
        if _number(champion) == version:  # an earlier attempt set it (killed before its tags): never judged by itself
            return Decision(True, f"v{version} holds @{alias} already (set by an earlier run of this ship)")
        decision = judge(champion)
        if not decision.promote:
            return decision
        now = champion_version(client, name, alias)
        if _number(now) != _number(champion):
            log.info("@%s of %s moved to v%s while v%s was judged: judged again", alias, name, _number(now), version)
            champion = now
            continue
        client.set_registered_model_alias(name, alias, version)
        time.sleep(settle_s)
        after = champion_version(client, name, alias)
        if _number(after) == version:
            return decision
        log.info("@%s of %s was set to v%s after v%s took it: judged again", alias, name, _number(after), version)
        champion = after
    raise RegistryUnavailable(f"@{alias} of {name} moved under v{version} {max_rejudge} times while it was judged")


def judge(
    ctx: "JobContext", client, name: str, candidate: Candidate, champion, compare: Optional[Compare]
) -> Decision:
    """The gate's decision for ``candidate`` against ``champion`` (a model version of ``name``, or None: the first
    version takes the alias): both artifacts scored by ``compare`` on the candidate's test rows, decided by
    :func:`common.registry.gate.decide` with the registry config's margin, confidence and resamples."""
    cfg = ctx.cfg.registry
    rule = RULES[candidate.pipeline]
    if champion is None:
        measure = candidate.measures.get(rule.metric)
        if measure is None or math.isnan(measure.mean):  # a broken first model is no champion either
            return Decision(False, f"the candidate has no {rule.metric}: the first version takes no alias")
        return decide(rule, None)
    if compare is None:
        return Decision(
            False, f"this job cannot score champion v{champion.version} beside the candidate: the alias stays"
        )
    cells = champion_cells(ctx, client, name, str(champion.version), candidate.folder, candidate.manifest, compare)
    return decide(
        rule, cells, cfg.margin, cfg.confidence, cfg.resamples, ctx.cfg.seed, f"champion v{champion.version}"
    )
