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
import sys
from dataclasses import asdict
from typing import Optional, Sequence

from common.job import JobContext, JobResult, hash_of, job_main

log = logging.getLogger(__name__)

NAME = "subsample"


def run(ctx: JobContext) -> JobResult:
    """Sub-sample ``subsample.table``; returns the output version and TVD before/after."""
    from pyspark.sql import functions as F

    from common.sampling import SamplingError, histogram, subsample
    from common.taxonomy import truncate_col

    cfg = ctx.cfg.subsample
    if not cfg.table:
        raise SamplingError("subsample.table is not set: name the lakehouse table to sample")
    if not cfg.target_table and not cfg.weights:
        raise SamplingError("set subsample.target_table (a table whose histogram is the target) or subsample.weights")
    result = JobResult(job=NAME)
    with ctx.tracked(NAME) as tr:
        result.run_id = tr.run_id
        source, version = ctx.read_table(tr, cfg.table)
        missing = [c for c in [cfg.label_column, *cfg.key_columns] if c not in source.columns]
        if missing:
            raise SamplingError(f"table {cfg.table!r} has no column {missing[0]!r} (columns: {source.columns})")
        inputs = {cfg.table: str(version)}

        def stratum(df, column):
            label = F.col(column) if cfg.level is None else truncate_col(F.col(column), cfg.level)
            return df.withColumn("_stratum", label)

        if cfg.target_table:
            target_df, target_version = ctx.read_table(tr, cfg.target_table)
            if cfg.target_column not in target_df.columns:
                raise SamplingError(f"target table {cfg.target_table!r} has no column {cfg.target_column!r}")
            target = histogram(stratum(target_df, cfg.target_column), "_stratum")
            inputs[cfg.target_table] = str(target_version)
        else:
            target = dict(cfg.weights)
        sample, plan = subsample(stratum(source, cfg.label_column), "_stratum", target, cfg.seed, cfg.key_columns, cfg.n)
        output = cfg.output or f"{cfg.table}_subsample"
        result.outputs[output] = ctx.write(tr, sample.drop("_stratum"), output, hash_of(asdict(cfg)), inputs)
        result.metrics = {"rows_in": float(sum(plan.counts.values())), "rows_out": float(plan.n),
                          "largest_matching": float(plan.largest), "tvd_before": plan.tvd_before,
                          "tvd_after": plan.tvd_after}
        tr.log_metrics(result.metrics)
        tr.log_dict(asdict(plan), "subsample/plan.json")
        print(f"subsample {cfg.table} -> {output}: {plan.n} of {sum(plan.counts.values())} rows, "
              f"TVD {plan.tvd_before:.4f} -> {plan.tvd_after:.4f}")
    return result


def main(argv: Optional[Sequence[str]] = None) -> JobResult:
    """CLI / spark-submit entry: ``augment run subsample --set subsample.table=T subsample.target_table=U``."""
    return job_main(NAME, run, argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main(sys.argv[1:])
