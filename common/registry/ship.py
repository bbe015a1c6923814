"""The shipping step of a job that trained its classifiers: each :class:`~common.registry.candidates.Candidate` is
logged as an MLflow Model of the job's run (:func:`~common.registry.store.log_classifier`), registered as a new
version of ``<registry.name_prefix><pipeline>_<method>`` (``_<model>`` added for a classifier kind other than
fastText: ``..._eda_boostaug_encoder``), and gated: the shipped artifact and the current champion are scored on the
same fixed test rows (:mod:`common.registry.compare`) and the paired decision (:mod:`common.registry.gate`) says
whether the version takes ``registry.alias``. The alias moves by compare-and-set (:func:`take_alias`): the champion
is read again just before the alias is set and once after; a run that finds another version there judges again
against it, so two concurrent runs end with the better model, never merely the later one.

Every version is tagged with its pipeline, method and classifier kind, its tables' versions, its recipe's figures
over the R seeds (``metric.*``), and the gate's verdict (``gate.decision``: promoted, kept or undecided;
``gate.reason``; both artifacts' figures, the interval and the rows, ``gate.*``). A registry that errs while
gating keeps the alias where it is (fail closed), tags the version undecided, and the job's result says the ship
is incomplete (exit 7).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from common.platform.errors import one_line
from common.registry import ledger
from common.registry.candidates import Candidate, Shipped
from common.registry.compare import Compare, CompareOf, champion_cells, task_compare
from common.registry.gate import RULES, Decision, decide
from common.registry.naming import CLASSIFIER_TAG, FOLDER_TAG, METHOD_TAG, PIPELINE_TAG, registered_name
from common.registry.store import (
    RegistryUnavailable,
    champion_version,
    create_registered_model,
    log_classifier,
    measure_tags,
    registry_client,
    table_tags,
)

if TYPE_CHECKING:
    from common.platform.job import JobContext, JobRun

log = logging.getLogger(__name__)


def ship(
    ctx: "JobContext",
    tr: "JobRun",
    candidates: Sequence[Candidate],
    compare_of: Optional[CompareOf] = None,
    client=None,
) -> list[Shipped]:
    """Log, register and gate each candidate (nothing where the registry config does not ship its pipeline and
    classifier kind), after what earlier runs of the job left unshipped (:func:`resume`); ``compare_of``: the job's
    scoring of a candidate beside a champion from its ``scoring`` (default: :func:`~.compare.task_compare`);
    ``client``: the registry's MLflow client (default: :func:`~.store.registry_client`'s, from the config).
    Returns what happened, also recorded in the job's summary lines and the run's ``models/shipped.json``."""
    cfg = ctx.cfg.registry
    chosen = [c for c in candidates if cfg.ships(c.pipeline, c.model)]
    if chosen:
        ledger.save(
            f"{ledger.folder(ctx, tr.result.job)}/{tr.run_id}.json",
            [ledger.Entry(c, registered_name(cfg.name_prefix, c.pipeline, c.name)) for c in chosen],
        )
    return resume(ctx, tr, compare_of, client)


def resume(ctx: "JobContext", tr: "JobRun", compare_of: Optional[CompareOf] = None, client=None) -> list[Shipped]:
    """Finish every ship of this job that a run left undone (:mod:`.ledger`), oldest first: register what has no
    version yet, gate what has no verdict, in this run, without retraining; a ledger file whose candidates are all
    done is removed, one another run is finishing is left to it. What a job calls where it returns early on its
    results. An entry that fails is left for the next run with an incomplete line (exit 7), and dropped with one
    after :data:`~.ledger.MAX_ATTEMPTS` runs. Returns what happened (also in the summary lines)."""
    files = ledger.pending(ctx, tr.result.job)
    if not files:
        return []
    if getattr(tr, "offline", None):  # every registry call would wait out the client's retries again, per entry
        tr.result.incomplete.append(f"{len(files)} ship(s) left to the next run: the MLflow server is not answering")
        return []
    client = client or registry_client(ctx)
    build = compare_of or (lambda scoring: task_compare(ctx, scoring))
    done: list[Shipped] = []
    for uri in files:
        with ledger.claim(uri) as mine:
            if not mine:
                tr.result.notes.append(f"{uri}: another run is shipping it; left to that run")
                continue
            try:
                entries = ledger.load(uri)
            except FileNotFoundError:  # finished and removed by another run meanwhile
                continue
            except (ValueError, OSError) as exc:
                tr.result.incomplete.append(f"{exc}: its models are not shipped; remove it to ship them no more")
                continue
            done += resume_file(ctx, tr, client, uri, entries, build)
    if done:
        tr.log_dict([s.__dict__ for s in done], "models/shipped.json")
    return done


def resume_file(ctx: "JobContext", tr: "JobRun", client, uri: str, entries: list, build: CompareOf) -> list:
    """:func:`ship_entry` of each entry of the ledger file ``uri`` not done; the file removed once all are."""
    cfg, done = ctx.cfg.registry, []
    for entry in entries:
        c = entry.candidate
        entry.name = entry.name or registered_name(cfg.name_prefix, c.pipeline, c.name)
        if entry.done:
            continue
        if not cfg.ships(c.pipeline, c.model):  # the config no longer ships it: nothing registered or moved
            entry.done = True
            tr.result.notes.append(
                f"{entry.name}: not shipped: the registry config no longer ships {c.pipeline}'s {c.model} classifiers"
            )
        else:
            try:
                shipped = ship_entry(ctx, tr, client, uri, entries, entry, build)
            except Exception as exc:  # noqa: BLE001 - any failure: left for the next run, never every run's crash
                entry.attempts += not transient(exc)
                entry.done = entry.attempts >= ledger.MAX_ATTEMPTS
                then = f"dropped after {entry.attempts} runs failed on it" if entry.done else "the next run ships it"
                tr.result.incomplete.append(f"{entry.name}: not shipped ({then}): {one_line(exc)}")
                log.warning("%s: not shipped", entry.name, exc_info=True)
            else:
                done += [shipped] if shipped else []
        with contextlib.suppress(OSError):  # progress not saved: the next run redoes this entry's lookups
            ledger.save(uri, entries)
    if all(e.done for e in entries):
        ledger.remove(uri)
    return done


# MLflow's error codes of a registry that did not answer (as against one that refused: a permission, a bad value).
TRANSIENT_CODES = ("TEMPORARILY_UNAVAILABLE", "INTERNAL_ERROR", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED")


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the registry or the store did not answer (no fault of the entry, so it uses up no
    attempt): RegistryUnavailable, an MLflow error of :data:`TRANSIENT_CODES` or one whose HTTP request failed, a
    network or file-system error other than a missing file (pyarrow's S3 errors are plain OSErrors)."""
    from mlflow.exceptions import MlflowException

    if isinstance(exc, RegistryUnavailable):
        return True
    if isinstance(exc, MlflowException):
        return exc.error_code in TRANSIENT_CODES or "API request to" in str(exc)
    return isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError)


def ship_entry(ctx: "JobContext", tr: "JobRun", client, uri: str, entries: list, entry, build: CompareOf):
    """Register (where the entry has no version yet: the logged model reused where it has one) and gate one ledger
    entry, saving its progress to ``uri`` around each registry call; returns what became of it, or None where it
    was done already."""
    from common.platform.storage import folder_state

    candidate, name = entry.candidate, entry.name
    try:
        version = registered_version(client, name, entry)
    except VersionDeleted as exc:
        entry.done = True  # said once, then dropped: a deleted version is someone's decision
        tr.result.incomplete.append(str(exc))
        return None
    if version is None:
        state = folder_state(candidate.folder)
        if state == "absent":
            entry.done = True  # said once, then dropped: nothing can ship it again
            tr.result.incomplete.append(f"{name}: its classifier folder {candidate.folder} is gone; not shipped")
            return None
        if state == "incomplete":  # cut short, or being written by another run: tried again, dropped after 3 runs
            raise RuntimeError(f"its classifier folder {candidate.folder} is incomplete")
        if entry.model_uri is None:
            info = log_classifier(ctx, candidate)
            entry.model_uri, entry.model_id = info.model_uri, info.model_id
            ledger.save(uri, entries)
        create_registered_model(
            client,
            name,
            f"{candidate.pipeline} pipeline's {candidate.method} classifier ({candidate.model}; catalog-augment)",
        )
        tags = {
            **measure_tags(candidate.measures),
            PIPELINE_TAG: candidate.pipeline,
            METHOD_TAG: candidate.method,
            CLASSIFIER_TAG: candidate.model,
            FOLDER_TAG: candidate.folder,
            **candidate.lineage,
            **table_tags(ctx, "train", candidate.train),
            **table_tags(ctx, "test", candidate.test),
        }
        entry.run_id = tr.run_id
        ledger.save(uri, entries)  # a kill after the next call: the rerun finds the version by this run
        version = client.create_model_version(
            name, entry.model_uri, run_id=tr.run_id, tags=tags, model_id=entry.model_id
        )
        entry.version = str(version.version)
        ledger.save(uri, entries)
    elif version.tags.get("gate.decision") in ledger.VERDICTS:
        entry.done = True
        return None
    shipped = settle(ctx, tr, client, name, version, candidate, build(candidate.scoring))
    entry.done = shipped.decided
    return shipped


def registered_version(client, name: str, entry):
    """The version of ``name`` that ``entry`` registered: by its number, or (a kill between the registration and
    the ledger's save) the one its run registered; None where there is none. Raises :class:`VersionDeleted` where
    the registry no longer has the version the ledger names (someone deleted it: not registered again)."""
    from mlflow.exceptions import MlflowException

    missing = ("RESOURCE_DOES_NOT_EXIST", "NOT_FOUND")
    if entry.version is not None:
        try:
            return _ready(client.get_model_version(name, entry.version), entry)
        except MlflowException as exc:
            if exc.error_code in missing:
                raise VersionDeleted(
                    f"{name} v{entry.version} was deleted from the registry before its gate "
                    "finished; not registered again"
                ) from None
            raise
    if entry.run_id is None:
        return None
    # One condition: Unity Catalog's registry takes no more; the name is matched here.
    found = [
        v
        for v in client.search_model_versions(f"run_id = '{entry.run_id}'")
        if v.name == name and getattr(v, "status", "READY") != "FAILED_REGISTRATION"
    ]
    return _ready(client.get_model_version(name, str(found[0].version)), entry) if found else None


def _ready(version, entry):
    """``version``, where the registry finished registering it; None where its registration failed (the entry then
    registers again: the failed version never ships); RegistryUnavailable while it is still pending."""
    status = getattr(version, "status", "READY") or "READY"
    if status == "FAILED_REGISTRATION":
        entry.version = None
        return None
    if status != "READY":
        raise RegistryUnavailable(f"{version.name} v{version.version} is still {status}: the next run gates it")
    return version


class VersionDeleted(LookupError):
    """A ledger entry's version is gone from the registry."""


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
