"""Job ``subsample``: draw rows of any table to match a target label distribution, exactly.

Reads: ``subsample.table`` and, for the target, ``subsample.target_table``'s histogram of
``subsample.target_column`` (or explicit ``subsample.weights``); labels are compared truncated to
``subsample.level``. Draws the largest sample matching the target, or ``subsample.n`` rows; each
stratum is within one row of its quota, deterministic by ``subsample.seed``.
Writes: ``subsample.output`` (default ``<table>_subsample``) with the table's columns; the plan
(quotas, total-variation distance before and after) goes to the MLflow run.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "subsample"


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> dict[str, float]:
    """Sub-sample ``subsample.table``; returns the output version and TVD before/after."""
    from pyspark.sql import functions as F

    from common.data.sampling import SamplingError, histogram, subsample
    from common.data.taxonomy import truncate_col

    cfg = ctx.cfg.subsample
    if not cfg.table:
        raise SamplingError("subsample.table is not set: name the lakehouse table to sample")
    if not cfg.target_table and not cfg.weights:
        raise SamplingError("set subsample.target_table (a table whose histogram is the target) or subsample.weights")
    source = tr.read(cfg.table)
    missing = [c for c in [cfg.label_column, *cfg.key_columns] if c not in source.columns]
    if missing:
        raise SamplingError(f"table {cfg.table!r} has no column {missing[0]!r} (columns: {source.columns})")

    def stratum(df, column):
        label = F.col(column) if cfg.level is None else truncate_col(F.col(column), cfg.level)
        return df.withColumn("_stratum", label)

    if cfg.target_table:
        target_df = tr.read(cfg.target_table)
        if cfg.target_column not in target_df.columns:
            raise SamplingError(f"target table {cfg.target_table!r} has no column {cfg.target_column!r}")
        target = histogram(stratum(target_df, cfg.target_column), "_stratum")
    else:
        target = dict(cfg.weights)
    sample, plan = subsample(stratum(source, cfg.label_column), "_stratum", target, cfg.seed, cfg.key_columns, cfg.n)
    output = cfg.output or f"{cfg.table}_subsample"
    tr.write(sample.drop("_stratum"), output, hash_of(asdict(cfg)))
    tr.log_dict(asdict(plan), "subsample/plan.json")
    print(
        f"subsample {cfg.table} -> {output}: {plan.n} of {sum(plan.counts.values())} rows, "
        f"TVD {plan.tvd_before:.4f} -> {plan.tvd_after:.4f}"
    )
    return {
        "rows_in": sum(plan.counts.values()),
        "rows_out": plan.n,
        "largest_matching": plan.largest,
        "tvd_before": plan.tvd_before,
        "tvd_after": plan.tvd_after,
    }


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
