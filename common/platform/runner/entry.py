"""The command line of a job module: the options every job and the ``augment`` command take, logging, and
``entry_point``, which makes a module's ``main(argv)`` (parse the arguments, build the context, run, print, close)
for the CLI, ``spark-submit jobs/<family>/<module>.py`` and a scheduled task alike."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable, Optional, Sequence

from common.platform.base_config import BaseConfig
from common.platform.config_loader import ConfigError
from common.platform.errors import SHIP_INCOMPLETE, interruption, one_line, report, user_error
from common.platform.process.signals import Terminated, cause, handled
from common.platform.runner.job import JobContext, JobResult, build_context


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """The options every job and the CLI accept: --conf, --set (repeatable), --force, --log-level."""
    parser.add_argument("--conf", help="YAML config (default: $AUGMENT_CONF or conf/local.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        nargs="+",
        help="override a config value, e.g. --set demo.scale=2 spark.master=local[2]",
    )
    parser.add_argument(
        "--overrides",
        dest="set_string",
        default="",
        metavar="'KEY=VALUE ...'",
        help="overrides in one argument, separated by spaces (may be empty): what scheduled jobs pass "
        "from a job parameter, e.g. --overrides 'cga.threshold=0.8 demo.scale=2'",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write new table versions even when the same config and inputs were written before",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def config_from_args(args: argparse.Namespace, load: Callable[..., BaseConfig]) -> BaseConfig:
    """The config that ``load(path, overrides)`` builds from parsed ``--conf``/``--set`` arguments."""
    return load(args.conf, override_list(args))


def override_list(args: argparse.Namespace) -> list[str]:
    """The ``KEY=VALUE`` overrides of parsed arguments: every ``--set`` item, then ``--overrides`` split with
    shell quoting rules (so a value may contain spaces when quoted)."""
    import shlex

    return [item for group in args.overrides for item in group] + shlex.split(args.set_string or "")


def setup_logging(level: str) -> None:
    """Plain timestamped logs on stderr; py4j's chatter is kept at WARNING."""
    logging.basicConfig(level=getattr(logging, level), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "urllib3", "alembic", "filelock", "botocore", "boto3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def job_main(
    name: str,
    run: Callable[[JobContext], JobResult],
    argv: Optional[Sequence[str]] = None,
    description: str = "",
    load: Optional[Callable[..., BaseConfig]] = None,
) -> JobResult:
    """Entry point shared by every job module: parse args, load the config with ``load(path, overrides)``,
    build the context, run, print, close."""
    if load is None:
        raise TypeError("job_main needs the application's config loader (load=...)")
    parser = argparse.ArgumentParser(prog=f"augment run {name}", description=description)
    add_common_args(parser)
    args = parser.parse_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = config_from_args(args, load)
    except ConfigError as exc:
        raise SystemExit(report(exc)) from None
    with handled(cfg.tracking.shutdown_grace_s):
        try:
            result = _run_closed(cfg, run, args.force)
        except Terminated as exc:
            print(f"augment: terminated: {exc}", file=sys.stderr)
            raise SystemExit(exc.exit_code) from None
        except KeyboardInterrupt:
            error = interruption()  # a watchdog's error outside a job's run
            if error is None:
                raise
            raise SystemExit(report(error)) from None
        except Exception as exc:  # one line and its code, as the CLI's; a bug keeps its traceback
            signalled = cause(exc)
            if signalled is not None:
                print(f"augment: terminated: {signalled}", file=sys.stderr)
                raise SystemExit(signalled.exit_code) from None
            found = user_error(exc)
            if found is None:
                raise
            logging.getLogger(__name__).debug("the error behind the line below", exc_info=exc)
            raise SystemExit(report(found)) from None
    print(result.summary())
    if result.incomplete:  # spark-submit jobs/<family>/<module>.py says it as the CLI does: exit code 7
        print(f"augment: ship incomplete: {one_line('; '.join(result.incomplete))}", file=sys.stderr)
        raise SystemExit(SHIP_INCOMPLETE)
    return result


def _run_closed(cfg: BaseConfig, run: Callable[[JobContext], JobResult], force: bool) -> JobResult:
    """``run`` on a context built from ``cfg``, closed after."""
    ctx = build_context(cfg, force=force)
    try:
        return run(ctx)
    finally:
        ctx.close()


def entry_point(
    name: str, run: Callable[[JobContext], JobResult], doc: Optional[str], load: Callable[..., BaseConfig]
) -> Callable[[Optional[Sequence[str]]], JobResult]:
    """``main(argv=None)`` for a job module: the CLI / spark-submit entry of ``run``, described by the first
    line of ``doc``."""
    description = (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""

    def main(argv: Optional[Sequence[str]] = None) -> JobResult:
        return job_main(name, run, argv, description=description, load=load)

    main.__doc__ = f"CLI / spark-submit entry: ``augment run {name} [--conf FILE] [--set k=v ...] [--force]``."
    return main
