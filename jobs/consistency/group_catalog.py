"""Job ``group-catalog``: which catalog items are versions of the same item.

Reads: ``catalog``. Items keep their ``group_id``; items without one are grouped by connected
components over shared identifiers (``grouping.identifiers``: gtin, mpn, brand + model number), with
GraphFrames where its jar is on the classpath and a DataFrame algorithm otherwise.
Writes: ``catalog_groups`` (items of groups within ``grouping.min_size..max_size``, with ``group_id``,
``group_source``, ``group_size``), ``catalog_groups_quarantine`` (items of groups outside the bounds,
with a ``reason``), ``catalog_group_sizes`` (the group-size report), ``catalog_identifier_caps``
(identifier values ignored for being shared by too many items).
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "group-catalog"
OUTPUTS = ("catalog_groups", "catalog_groups_quarantine", "catalog_group_sizes", "catalog_identifier_caps")


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Group the catalog; returns the table versions and group counts by source."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.catalog.grouping import group_items, size_histogram, size_reason

    cfg = ctx.cfg.grouping
    catalog = tr.read("catalog")
    config_hash = hash_of(asdict(cfg))
    if tr.all_written(OUTPUTS, config_hash):
        return None
    grouping = group_items(
        catalog,
        cfg.identifiers,
        cfg.max_items_per_identifier,
        cfg.max_iterations,
        use_graphframes=ctx.capabilities.graphframes,
    )
    items = grouping.items.withColumn("reason", size_reason(cfg.min_size, cfg.max_size)).persist(
        StorageLevel.MEMORY_AND_DISK
    )
    try:
        columns = ["item_id", "title", "group_id", "group_source", "group_size", "gtin", "mpn", "brand"]
        tr.write(items.filter("reason IS NULL").select(*columns), "catalog_groups", config_hash)
        tr.write(
            items.filter("reason IS NOT NULL").select(*columns, "reason"), "catalog_groups_quarantine", config_hash
        )
        sizes = size_histogram(items).withColumn("in_bounds", F.col("group_size").between(cfg.min_size, cfg.max_size))
        tr.write(sizes, "catalog_group_sizes", config_hash)
        tr.write(grouping.capped_identifiers, "catalog_identifier_caps", config_hash)
        # One row per (source, in bounds): a handful of numbers.
        summary = (
            items.groupBy("group_source", F.col("reason").isNull().alias("kept"))
            .agg(F.countDistinct("group_id").alias("groups"), F.count("*").alias("items"))
            .collect()
        )
    finally:
        items.unpersist()
    metrics = {
        "items_in": float(sum(r["items"] for r in summary)),
        "items_kept": float(sum(r["items"] for r in summary if r["kept"])),
        "groups_kept": float(sum(r["groups"] for r in summary if r["kept"])),
    }
    metrics["items_quarantined"] = metrics["items_in"] - metrics["items_kept"]
    for source in ("group_id", "identifiers", "singleton"):
        metrics[f"groups.{source}"] = float(sum(r["groups"] for r in summary if r["group_source"] == source))
    tr.log_text(tr.written("catalog_group_sizes").toPandas().to_string(index=False), "grouping/group_sizes.txt")
    log.info("catalog grouping: %s", metrics)
    if metrics["groups_kept"] == 0:
        raise ValueError(
            f"no catalog groups of size {cfg.min_size}..{cfg.max_size}: {int(metrics['items_in'])} items, "
            f"{int(metrics['groups.singleton'])} of them without a group_id or a shared identifier. CST and the "
            "consistency test need versions of the same item: give group_id, gtin, mpn or brand columns"
        )
    return metrics


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
