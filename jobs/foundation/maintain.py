"""Job ``maintain``: compact and VACUUM the lakehouse's Delta tables, with a per-table before/after report.

Reads: every table of the lakehouse (or ``maintenance.tables``). For each: compaction (Spark ``OPTIMIZE`` on the
native path, delta-rs ``optimize.compact`` otherwise) when it has at least ``maintenance.min_files`` live
files, then VACUUM with ``maintenance.retention_hours`` (never below Delta's 168-hour safety default unless
``maintenance.force_retention``), and removal of ``<root>/_staging`` folders older than the retention (left by a
native-path Ray write killed before its commit), and of the kept classifier folders under ``<root>/models`` whose
models are registered (``maintenance.shipped_models``: remove, list, keep; :mod:`common.registry.cleanup`). Writes:
no data; each compaction is one OPTIMIZE version that
reads the same rows. The report (versions, live and stored files and bytes before and after) is printed, logged to the
MLflow
run as ``maintenance.json`` and summed into metrics. Scheduled weekly by the bundle (resources/maintenance.yml).
"""

from __future__ import annotations

import logging

from common.platform.errors import ConfigError
from common.platform.lakehouse.maintenance import format_report, maintain_table, remove_stale_staging
from common.platform.runner.job import JobContext, JobRun, job
from common.registry.cleanup import clean_shipped
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "maintain"


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Maintain every configured table; returns totals (tables, compacted, files and bytes before/after)."""
    cfg = ctx.cfg.maintenance
    known = ctx.lakehouse.table_names()
    names = cfg.tables or known
    missing = [n for n in names if n not in known]
    if missing:
        raise ConfigError(
            f"maintenance.tables names {missing[0]!r}, which is not a table of the lakehouse "
            f"({ctx.lakehouse.cfg.catalog or ctx.lakehouse.cfg.root}); tables: {', '.join(known)}"
        )
    reports = [maintain_table(ctx.lakehouse, name, cfg) for name in names]
    print(format_report(reports), flush=True)
    tr.log_dict({"retention_hours": cfg.retention_hours, "tables": [r.as_row() for r in reports]}, "maintenance.json")
    tr.set_tags({"maintenance.tables": ",".join(names)})
    metrics = {
        "tables": len(reports),
        "compacted": sum(r.compacted for r in reports),
        "vacuumed_files": sum(r.vacuumed_files for r in reports),
    }
    if cfg.vacuum and not ctx.lakehouse.cfg.catalog:
        metrics["staging_folders_removed"] = remove_stale_staging(ctx.lakehouse.cfg.root, cfg.retention_hours)
    shipped = clean_shipped(ctx, cfg.shipped_models)
    if shipped:
        print("\n".join(["shipped classifier folders:", *shipped]), flush=True)
        tr.log_text("\n".join(shipped) + "\n", "shipped_models.txt")
    metrics["shipped_model_folders"] = sum(line.startswith(("removed", "would remove")) for line in shipped)
    for side in ("before", "after"):
        metrics[f"live_files_{side}"] = sum(getattr(r, side).live_files for r in reports)
        metrics[f"live_bytes_{side}"] = sum(getattr(r, side).live_bytes for r in reports)
        stored = [getattr(r, side).stored_files for r in reports]
        if None not in stored:
            metrics[f"stored_files_{side}"] = sum(stored)
    return metrics


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
