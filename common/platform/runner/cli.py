"""The ``augment`` command: one entry point for every job and pipeline, plus lakehouse inspection.

The console script is ``jobs.cli:entry``, which hands this module the job registry and the config loader.

    augment run NAME [--conf FILE] [--set KEY=VALUE ...] [--force]   a job or a pipeline
    augment tables   [--conf FILE] [--set ...]                       tables, versions, row counts
    augment history TABLE [--conf FILE] [--set ...]                  a table's versions with lineage
    augment jobs                                                     the jobs and pipelines
    augment config   [--conf FILE] [--set ...] [--reference]         the resolved, validated config (or every key)
    augment doctor   [--conf FILE] [--set ...]                       what this installation can do
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from common.platform.config_loader import ConfigError
from common.platform.errors import (
    SHIP_INCOMPLETE,
    USER_ERRORS,
    exit_code_table,
    interruption,
    one_line,
    report,
    user_error,
)

if TYPE_CHECKING:
    from common.platform.runner.pipeline import JobRegistry

log = logging.getLogger(__name__)


def _parser(registry: "JobRegistry") -> argparse.ArgumentParser:
    from common.platform.runner.entry import add_common_args

    jobs, pipelines = registry.jobs, registry.pipelines

    parser = argparse.ArgumentParser(
        prog="augment",
        description="Catalog-scale training-data augmentation for product text classifiers "
        "(Spark jobs, Ray model stages, Delta tables, MLflow runs).",
        epilog=exit_code_table(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a job or a pipeline",
        description=f"jobs: {', '.join(jobs)}; pipelines: {', '.join(pipelines)}",
    )
    run.add_argument("name", help="job or pipeline name")
    add_common_args(run)
    tables = sub.add_parser("tables", help="list lakehouse tables with their latest version and row count")
    add_common_args(tables)
    history = sub.add_parser("history", help="show a table's versions with their lineage")
    history.add_argument("table")
    add_common_args(history)
    sub.add_parser("jobs", help="list jobs and pipelines")
    check = sub.add_parser(
        "check",
        help="check a job's or pipeline's config (every job's own checks too), starting "
        "nothing: exit 2 on a config error; what only a rerun can cure (a model "
        "server not answering) is said and left to the run",
    )
    check.add_argument("name", help="job or pipeline name")
    add_common_args(check)
    config = sub.add_parser("config", help="print the resolved configuration")
    add_common_args(config)
    config.add_argument(
        "--reference",
        action="store_true",
        help="print every key with its type, built-in default and description (Markdown)",
    )
    doctor = sub.add_parser(
        "doctor",
        help="what this installation can do (Spark, Java, Delta, GraphFrames, Ray, "
        "torch, MLflow, lakehouse, MiniLM); exit 1 when the config needs "
        "something missing",
    )
    add_common_args(doctor)
    return parser


def main(
    argv: Optional[Sequence[str]],
    registry: "JobRegistry",
    load: Callable,
    doctor_checks: Sequence[Callable] = (),
    table_reports: Sequence[Callable] = (),
) -> int:
    """Parse ``argv`` and dispatch to ``registry``'s jobs with the config that ``load(path, overrides)``
    builds; returns the process exit code (2 for config errors). ``doctor_checks`` are more ``augment doctor``
    lines, each a function of the config returning a :class:`common.platform.doctor.checks.Check` (the layers above
    the platform know what their models need); ``table_reports`` more ``augment tables`` lines, each a
    function of the lakehouse and its table infos returning lines (the ingest's dedup report)."""
    from common.platform.runner.entry import override_list, setup_logging

    args = _parser(registry).parse_args(argv)
    if args.command == "jobs":
        return _print_jobs(registry)
    setup_logging(args.log_level)
    try:
        cfg = load(args.conf, override_list(args))
    except ConfigError as exc:
        print(f"augment: config error: {exc}", file=sys.stderr)
        return 2
    if args.command == "doctor":
        from common.platform.doctor.report import report

        text, code = report(cfg, doctor_checks)
        print(text)
        return code
    if args.command == "config" and args.reference:
        from common.platform.config_reference import markdown, reference

        print(markdown(reference(type(cfg)())), end="")
        return 0
    if args.command == "config":
        import yaml

        from common.platform.config_loader import mask_secrets

        print(yaml.safe_dump(mask_secrets(cfg.to_dict()), sort_keys=False))
        return 0
    if args.command == "tables":
        lakehouse = _metadata_lakehouse(cfg)
        infos = lakehouse.tables()
        print(format_tables(infos))
        lines = [line for table_report in table_reports for line in table_report(lakehouse, infos)]
        if lines:
            print("\n" + "\n".join(lines))
        return 0
    if args.command == "check":
        return _check(cfg, registry, args.name)
    if args.command == "history":
        print(format_history(_metadata_lakehouse(cfg).history(args.table)))
        return 0
    from common.platform.process.signals import Terminated, handled

    with handled(cfg.tracking.shutdown_grace_s):
        try:
            return _run(cfg, registry, args.name, args.force)
        except Terminated as exc:  # the job's runs are KILLED and its context closed on the way here
            print(f"augment: terminated: {exc}", file=sys.stderr)
            return exc.exit_code


USER_ERRORS_TYPES = tuple(cls for cls, _, _ in USER_ERRORS)


def _known(registry: "JobRegistry", name: str) -> bool:
    """Whether ``name`` is a job or pipeline of ``registry``; where not, says so with the names there are."""
    if name in registry.jobs or name in registry.pipelines:
        return True
    print(
        f"augment: unknown job or pipeline {name!r}; jobs: {', '.join(registry.jobs)}; "
        f"pipelines: {', '.join(registry.pipelines)}",
        file=sys.stderr,
    )
    return False


def _check(cfg, registry: "JobRegistry", name: str) -> int:
    """``augment check NAME``: the config of job or pipeline ``name`` with every job's own check, before anything
    starts (the bundle's first task, run once without retries): 2 on a config error; any other fault a check meets
    (a model server that does not answer) is said and left to the run, whose tasks retry it (0)."""
    from common.platform.runner.pipeline import preflight

    if not _known(registry, name):
        return 2
    try:
        preflight(cfg, registry.pipelines.get(name, [name]), registry.runner)
    except ConfigError as exc:
        print(f"augment: config error: {exc}", file=sys.stderr)
        return 2
    except USER_ERRORS_TYPES as exc:
        print(
            f"augment: check: the config holds; {one_line(str(exc))} (left to the run, which retries it)",
            file=sys.stderr,
        )
    print(f"augment: check: the config of {name} holds")
    return 0


def _run(cfg, registry: "JobRegistry", name: str, force: bool) -> int:
    from common.platform.process.signals import cause
    from common.platform.runner.job_context import build_context
    from common.platform.runner.pipeline import preflight, run_pipeline

    if not _known(registry, name):
        return 2
    try:
        # Before the JVM, Ray and MLflow start: a missing key costs the user a second, not an engine's start.
        preflight(cfg, registry.pipelines.get(name, [name]), registry.runner)
    except USER_ERRORS_TYPES as exc:  # a bad key, or a model server the config names that does not answer
        return report(exc)
    try:
        ctx = build_context(cfg, force=force)
    except USER_ERRORS_TYPES as exc:  # the lakehouse's object store does not answer
        return report(exc)
    try:
        if name in registry.pipelines:
            results = run_pipeline(ctx, name, registry.pipelines[name], registry.runner)
        else:
            results = [registry.runner(name)(ctx)]
        for result in results:
            print(result.summary())
        print()
        print(format_tables(ctx.lakehouse.tables()))
        code = exit_code(results)
        if code:
            print(
                f"augment: ship incomplete: {one_line('; '.join(i for r in results for i in r.incomplete))}",
                file=sys.stderr,
            )
            return code
    except Exception as exc:
        # A bad config or input is the user's to fix, an outage the operator's: one line naming the file/key,
        # column and row, or the dependency (the job's MLflow run has already ended FAILED), found inside a Ray
        # worker's error as well; a bug keeps its traceback.
        signalled = cause(exc)  # a signal that reached a C extension's wait comes back as its error
        if signalled is not None:
            raise signalled from None
        found = user_error(exc)
        if found is None:
            raise
        log.debug("the error behind the line below", exc_info=exc)
        return report(found)
    except KeyboardInterrupt:
        error = interruption()  # a watchdog's error outside a job's run (between jobs)
        if error is None:
            raise
        return report(error)
    finally:
        ctx.close()
    return 0


def exit_code(results) -> int:
    """0 for job results that finished everything, :data:`~common.platform.errors.SHIP_INCOMPLETE` when any holds
    something it could not finish (``JobResult.incomplete``)."""
    return SHIP_INCOMPLETE if any(r.incomplete for r in results) else 0


def _metadata_lakehouse(cfg):
    """Path tables are listed with delta-rs alone (no JVM start); catalog tables need Spark."""
    from common.platform.lakehouse.lakehouse import Lakehouse

    if cfg.lakehouse.catalog:
        from common.platform.runner.job_context import build_context

        return build_context(cfg).lakehouse
    return Lakehouse(cfg.lakehouse)


def format_tables(infos) -> str:
    """A fixed-width table of TableInfo rows."""
    if not infos:
        return "no tables yet"
    header = f"{'table':<34} {'version':>7} {'rows':>10}  last job"
    lines = [header, "-" * len(header)]
    for info in infos:
        rows = "?" if info.num_rows is None else str(info.num_rows)
        lines.append(f"{info.name:<34} {info.version:>7} {rows:>10}  {info.last_job or '-'}")
    return "\n".join(lines)


def format_history(commits) -> str:
    """One line per commit: version, time (UTC), operation, job, config hash and input versions."""
    lines = []
    for c in commits:
        when = (
            datetime.fromtimestamp(c.timestamp_ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
            if c.timestamp_ms
            else "?"
        )
        lineage = c.lineage or {}
        inputs = json.dumps(lineage.get("inputs", {}), sort_keys=True)
        lines.append(
            f"v{c.version:<4} {when}  {c.operation or '-':<14} job={lineage.get('job', '-')} "
            f"config={lineage.get('config_hash', '-')} run={lineage.get('run_id', '-')} inputs={inputs}"
        )
    return "\n".join(lines)


def _print_jobs(registry: "JobRegistry") -> int:
    print("jobs:")
    for name in registry.jobs:
        print(f"  {name:<22} {registry.summary(name)}")
    print("pipelines:")
    for name, steps in registry.pipelines.items():
        print(f"  {name:<22} {' -> '.join(steps)}")
    return 0
