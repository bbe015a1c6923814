"""Table maintenance: compaction and VACUUM on both write paths change no version's rows, honour the retention,
and do not make jobs re-run; pipelines report progress per job."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from common.platform.config import MaintenanceConfig
from common.platform.config_loader import ConfigError
from common.platform.lakehouse.maintenance import file_stats, format_report, maintain_table
from jobs import REGISTRY, run_pipeline


def _rows(lakehouse, table, version):
    return sorted(tuple(r) for r in lakehouse.read(table, version).collect())


def _many_small_files(spark, lakehouse, appends=6):
    """A table of ``appends`` appends of 2 files each; returns {version: its rows}."""
    for i in range(appends):
        df = spark.range(i * 10, i * 10 + 10, numPartitions=2).select(
            F.col("id").cast("string").alias("item_id"), (F.col("id") * 2).alias("count")
        )
        lakehouse.write(df, "items", mode="overwrite" if i == 0 else "append")
    return {v: _rows(lakehouse, "items", v) for v in range(appends)}


def test_compaction_keeps_every_version_and_vacuum_honours_retention(spark, lakehouse):
    versions = _many_small_files(spark, lakehouse)
    before = file_stats(lakehouse, "items")
    assert before.live_files >= 12 and before.stored_files == before.live_files

    report = maintain_table(lakehouse, "items", MaintenanceConfig(min_files=4))
    assert report.compacted
    # One OPTIMIZE commit (and, on Spark, VACUUM START/END commits), none of which changes data.
    added = [c for c in lakehouse.history("items") if c.version > report.version_before]
    assert len(added) == report.version_after - report.version_before
    assert [c.operation for c in added].count("OPTIMIZE") == 1 and not any(c.changes_data for c in added)
    assert report.after.live_files < before.live_files // 4
    assert report.after.live_bytes > 0
    # Within the retention window VACUUM deletes nothing: the small files serve the older versions.
    assert report.vacuumed_files == 0 and report.after.stored_files == before.stored_files + report.after.live_files
    for version, rows in versions.items():
        assert _rows(lakehouse, "items", version) == rows
    assert _rows(lakehouse, "items", None) == versions[max(versions)]
    # The compaction commit does not change data: lineage still names the last append.
    assert lakehouse.data_version("items") == max(versions)
    assert "items" in format_report([report])

    # A second run on a compacted table leaves it alone (fewer live files than min_files).
    again = maintain_table(lakehouse, "items", MaintenanceConfig(min_files=4))
    assert not again.compacted and again.after.live_files == report.after.live_files

    # Forced zero retention removes every file the latest version does not read; the latest still reads.
    forced = maintain_table(
        lakehouse, "items", MaintenanceConfig(min_files=4, retention_hours=0, force_retention=True)
    )
    assert forced.after.stored_files == forced.after.live_files
    assert forced.vacuumed_files == before.stored_files
    assert _rows(lakehouse, "items", None) == versions[max(versions)]
    assert lakehouse.data_version("items") == max(versions)


def test_retention_below_the_delta_default_needs_force():
    with pytest.raises(ConfigError, match="maintenance.retention_hours.*below Delta's safety default"):
        MaintenanceConfig(retention_hours=24)
    assert MaintenanceConfig(retention_hours=24, force_retention=True).retention_hours == 24


def test_maintain_job_then_rerun_writes_nothing(small_world, tmp_path):
    small_world.run("foundation")  # the world's generate-demo and ingest, which most of its pipelines start with
    lines = small_world.progress["foundation"]
    assert [line.split("] ")[1].split(" ")[0] for line in lines[:-1]] == [
        "generate-demo",
        "generate-demo",
        "ingest",
        "ingest",
    ]
    assert "done in" in lines[-2] and "new version" in lines[-2] and lines[-1].startswith("[foundation] 2 jobs in")
    # group-catalog on a copy of the world's ingested catalog: its input and its outputs are the tables
    # maintained (maintaining all 13 tables costs a minute more).
    ctx = small_world.copy(tmp_path, ["catalog", "taxonomy"])
    try:
        lines = []
        first = run_pipeline(ctx, "foundation", ["group-catalog"], progress=lines.append)
        assert [line.split("] ")[1].split(" ")[0] for line in lines[:-1]] == ["group-catalog", "group-catalog"]
        assert "done in" in lines[-2] and "4 new versions" in lines[-2]
        assert lines[-1].startswith("[foundation] 1 jobs in")
        tables = {
            t.name: t.version
            for t in ctx.lakehouse.tables()
            if t.name in ("catalog", "catalog_groups", "catalog_group_sizes", "taxonomy")
        }
        assert len(tables) == 4, tables
        rows = {name: ctx.lakehouse.read(name).count() for name in tables}

        ctx.cfg.maintenance.tables = ["catalog", "no_such_table"]
        with pytest.raises(ValueError, match="'no_such_table', which is not a table of the lakehouse"):
            REGISTRY.runner("maintain")(ctx)
        ctx.cfg.maintenance.tables = list(tables)
        ctx.cfg.maintenance.min_files = 2
        result = REGISTRY.runner("maintain")(ctx)
        assert result.metrics["tables"] == len(tables) and result.metrics["compacted"] >= 1
        assert result.metrics["live_files_after"] < result.metrics["live_files_before"]
        after = {t.name: t.version for t in ctx.lakehouse.tables() if t.name in tables}
        assert any(after[name] > version for name, version in tables.items())
        for name, version in tables.items():
            assert ctx.lakehouse.read(name, version).count() == rows[name] == ctx.lakehouse.read(name).count()

        # The compaction is not new input: the scheduled re-run skips every write.
        rerun = REGISTRY.runner("group-catalog")(ctx)
        assert rerun.outputs and all(r.skipped for r in rerun.outputs.values())
        assert {t.name: t.version for t in ctx.lakehouse.tables() if t.name in tables} == after
        assert rerun.outputs.keys() == first[-1].outputs.keys()
    finally:
        ctx.close()


def test_maintain_removes_registered_classifier_folders_and_keeps_the_rest(ctx, monkeypatch):
    """A kept classifier folder a registered version names goes (listed first by ``shipped_models: list``); one no
    version names (a cache, a classifier not shipped), one an unfinished shipping ledger names, and every folder when
    the registry does not answer, stay."""
    import socket
    from pathlib import Path

    from mlflow import MlflowClient

    from common.registry import ledger
    from common.registry.candidates import Candidate
    from common.registry.cleanup import clean_shipped, shipped_folders
    from common.registry.naming import FOLDER_TAG
    from common.registry.store import registry_client

    folders = {
        key: ctx.models_dir(key, "k1")
        for key in ("genre_fasttext", "boostaug_eda", "compositional_cg", "genre_generator")
    }
    for folder in folders.values():
        Path(folder).mkdir(parents=True)
        (Path(folder) / "model.bin").write_bytes(b"weights")
    client, prefix = registry_client(ctx), ctx.cfg.registry.name_prefix
    for key in ("genre_fasttext", "compositional_cg"):
        client.create_registered_model(prefix + key)
        client.create_model_version(prefix + key, "file:///registered/copy", tags={FOLDER_TAG: folders[key]})
    waiting = Candidate("compositional", "cg", folders["compositional_cg"], {}, {}, {}, {}, [])
    ledger.save(
        f"{ledger.folder(ctx, 'compositional')}/run-1.json",
        [ledger.Entry(waiting, name=prefix + "compositional_cg", version="1")],
    )  # registered, not yet gated

    listed = clean_shipped(ctx, "list")
    assert listed == [f"would remove {folders['genre_fasttext']} (registered as {prefix}genre_fasttext v1)"]
    assert all(Path(folder).is_dir() for folder in folders.values())
    assert clean_shipped(ctx, "remove") == [listed[0].replace("would remove", "removed")]
    assert [key for key, folder in folders.items() if not Path(folder).exists()] == ["genre_fasttext"]
    assert clean_shipped(ctx, "keep") == [] and clean_shipped(ctx, "remove") == []

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    ledger.remove(f"{ledger.folder(ctx, 'compositional')}/run-1.json")
    assert shipped_folders(ctx.cfg.lakehouse.root, MlflowClient(f"http://127.0.0.1:{closed}")) == []
    assert shipped_folders(ctx.cfg.lakehouse.root, client) == [
        (folders["compositional_cg"], f"{prefix}compositional_cg v1")
    ]  # its ledger done: it may go now
