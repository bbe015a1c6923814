"""Incremental ingest: rows appended to a Delta input are the only rows the next run reads and writes."""

from __future__ import annotations

import pandas as pd
import pytest

from common.data.config import InputSpec
from common.platform.lakehouse.delta_rs_read import appended_files
from common.platform.lakehouse.lakehouse import Lakehouse
from jobs.foundation import ingest


def _rows(start: int, n: int, bad: int = 0) -> pd.DataFrame:
    titles = [f"Widget {i} blue steel" for i in range(start, start + n)]
    for i in range(bad):  # rows the ingest rules reject: an empty title
        titles[i] = " "
    return pd.DataFrame(
        {"item_id": [f"i{i}" for i in range(start, start + n)], "title": titles, "category": ["Toys > Games"] * n}
    )


def _source_writer(spark, write_path: str, location: str):
    """Appends (or overwrites) the source table the way its owner would: Spark's Delta writer on the native
    path, delta-rs elsewhere."""

    def write(pdf: pd.DataFrame, mode: str = "append") -> None:
        if write_path == "native":
            spark.createDataFrame(pdf).write.format("delta").mode(mode).save(location)
        else:
            from deltalake import write_deltalake

            write_deltalake(location, pdf, mode=mode)

    return write


@pytest.fixture
def incremental_ctx(ctx, spark, write_path, tmp_path):
    source = str(tmp_path / "bronze_labeled")
    ctx.cfg.inputs.labeled = InputSpec(path=source, format="delta")
    ctx.lakehouse = Lakehouse(ctx.cfg.lakehouse, spark, native_delta=write_path == "native")
    return ctx, source, _source_writer(spark, write_path, source)


def test_appended_rows_are_the_only_rows_ingested(incremental_ctx):
    ctx, source, write = incremental_ctx
    lh = ctx.lakehouse
    write(_rows(0, 40, bad=2), mode="overwrite")
    first = ingest.run(ctx).metrics
    assert (first["labeled.rows_in"], first["labeled.rows_quarantined"], first["labeled.incremental"]) == (40, 2, 0)
    v_kept, v_bad = lh.version("labeled_products"), lh.version("labeled_products_quarantine")

    again = ingest.run(ctx)  # unchanged source: nothing read, nothing written
    assert all(r.skipped for r in again.outputs.values())
    assert lh.version("labeled_products") == v_kept

    write(_rows(40, 10, bad=1))
    write(_rows(50, 5))
    assert len(appended_files(source, 0, 2)) >= 2
    third = ingest.run(ctx)
    metrics = third.metrics
    # Only the 15 appended rows were validated, and appended: rows in = kept + quarantined for them.
    assert (
        metrics["labeled.rows_in"],
        metrics["labeled.rows_kept"],
        metrics["labeled.rows_quarantined"],
        metrics["labeled.incremental"],
    ) == (15, 14, 1, 1)
    assert third.outputs["labeled_products"].version == v_kept + 1
    assert lh.history("labeled_products", 1)[0].operation == "WRITE"
    kept = lh.read("labeled_products").toPandas()
    assert len(kept) == 38 + 14 and kept.item_id.is_unique
    assert lh.read("labeled_products_quarantine").count() == 3
    assert lh.version("labeled_products_quarantine") == v_bad + 1
    # The earlier version still reads the first ingest.
    assert lh.read("labeled_products", v_kept).count() == 38

    # Not an append (the owner rewrote the table): a full ingest that overwrites.
    write(_rows(0, 20), mode="overwrite")
    assert appended_files(source, 2, 3) is None
    full = ingest.run(ctx).metrics
    assert (full["labeled.rows_in"], full["labeled.incremental"]) == (20, 0)
    assert lh.read("labeled_products").count() == 20 and lh.read("labeled_products_quarantine").count() == 0


def test_force_and_the_switch_ingest_everything(incremental_ctx):
    ctx, _, write = incremental_ctx
    write(_rows(0, 12), mode="overwrite")
    ingest.run(ctx)
    write(_rows(12, 3))
    ctx.cfg.ingest.incremental = False  # a new config: its first run reads everything
    assert ingest.run(ctx).metrics["labeled.rows_in"] == 15
    write(_rows(15, 2))
    ctx.force = True
    forced = ingest.run(ctx).metrics
    assert (forced["labeled.rows_in"], forced["labeled.incremental"]) == (17, 0)
    assert ctx.lakehouse.read("labeled_products").count() == 17
