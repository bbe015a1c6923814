"""The shipping step of a job that trained its classifiers: each :class:`~common.registry.candidates.Candidate` is
logged as an MLflow Model of the job's run (:func:`~common.registry.store.log_classifier`), registered as a new
version of ``<registry.name_prefix><pipeline>_<method>`` (``_<model>`` added for a classifier kind other than
fastText: ``..._eda_boostaug_encoder``), and gated: the shipped artifact and the current champion are scored on the
same fixed test rows (:mod:`common.registry.compare`) and the paired decision (:mod:`common.registry.gate`) says
whether the version takes ``registry.alias`` (:mod:`common.registry.promotion`). The alias moves by compare-and-set
(:func:`~common.registry.promotion.take_alias`): the champion is read again just before the alias is set and once
after; a run that finds another version there judges again against it, so two concurrent runs end with the better
model, never merely the later one.

Every version is tagged with its pipeline, method and classifier kind, its tables' versions, its recipe's figures
over the R seeds (``metric.*``), and the gate's verdict (``gate.decision``: promoted, kept or undecided;
``gate.reason``; both artifacts' figures, the interval and the rows, ``gate.*``). A registry that errs while
gating keeps the alias where it is (fail closed), tags the version undecided, and the job's result says the ship
is incomplete (exit 7).
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Optional, Sequence

from common.platform.errors import one_line
from common.registry import ledger
from common.registry.candidates import Candidate, Shipped
from common.registry.compare import CompareOf, task_compare
from common.registry.naming import CLASSIFIER_TAG, FOLDER_TAG, METHOD_TAG, PIPELINE_TAG, registered_name
from common.registry.promotion import settle
from common.registry.store import (
    RegistryUnavailable,
    create_registered_model,
    log_classifier,
    measure_tags,
    registry_client,
    table_tags,
)

if TYPE_CHECKING:
    from common.platform.runner.job import JobContext, JobRun

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
