"""Ray Datasets in and out of the lakehouse, under its one contract
(:class:`~common.platform.lakehouse.lakehouse.Lakehouse`
mixes this in): a table version read by Ray's workers from its Parquet files (no driver copy), in a stable order
when batches must hold the same rows whatever the file layout, and a dataset written as ONE new version with lineage
and idempotence, committed by delta-rs in place or by Spark's Delta writer from a staging folder."""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from common.platform.lakehouse.delta_rs_read import read_parquet_folder
from common.platform.lakehouse.tables import LakehouseError, Lineage, WriteMode, WriteResult, app_id, check_name
from common.platform.storage import arrow_uri, remove_tree

if TYPE_CHECKING:
    from common.platform.config import LakehouseConfig


class RayHandoff:
    """The Ray half of the lakehouse: needs the table API's ``cfg``, ``native_delta``, ``file_uris``, ``read``,
    ``write``, ``already_written``, ``_commit_written`` and ``_require_spark``."""

    cfg: "LakehouseConfig"
    native_delta: bool

    def read_ray(self, table: str, version: Optional[int] = None, columns: Optional[list[str]] = None):
        """The table version as a Ray Dataset read from its Parquet files by Ray's workers (no driver copy)."""
        import ray

        return ray.data.read_parquet(self.file_uris(table, version), columns=columns)

    @contextlib.contextmanager
    def read_ray_ordered(self, table: str, version: Optional[int], columns: Sequence[str], order_by: Sequence[str]):
        """A context giving the table version's ``columns`` as a Ray Dataset whose rows come in ``order_by``
        order, whatever the version's file layout: Spark sorts them into a staging folder of Parquet files
        that Ray reads in order (the dataset's ``preserve_order``). Batches cut from it in order, as the
        generation pool's are, then hold the same rows however many files or Spark partitions the table has.
        ``order_by`` should be a total order (a unique id). The staging folder is removed on exit, so the
        dataset must have run (been written) inside the context."""
        import ray

        from common.platform.storage import list_files

        staging = f"{self.cfg.root.rstrip('/')}/_staging/{table}-v{version}-{uuid.uuid4().hex[:12]}"
        try:
            self.read(table, version).select(*columns).orderBy(*order_by).write.parquet(staging)
            # Spark's part files hold consecutive ranges of the sort, numbered in order.
            names = sorted(os.path.basename(f.path) for f in list_files(staging) if f.path.endswith(".parquet"))
            ds = ray.data.read_parquet([arrow_uri(f"{staging}/{name}") for name in names])  # ``columns`` only
            ds.context.execution_options.preserve_order = True  # this dataset's context, a copy made at read
            yield ds
        finally:
            remove_tree(staging)

    def write_ray(
        self,
        ds,
        table: str,
        mode: WriteMode = "overwrite",
        lineage: Optional[Lineage] = None,
        force: bool = False,
        before_commit: Optional[Callable[[], None]] = None,
    ) -> WriteResult:
        """Write a Ray Dataset as ONE new version of ``table`` (lineage and idempotence as in :meth:`write`).

        Ray's workers write the Parquet files. delta-rs path: the driver commits them in place. Native path (and
        catalog tables): they land in a staging folder that Spark's executors read and commit with Spark's Delta
        writer, so the table's every commit is Spark's; the staging folder is then removed. A stage that fails
        because the cluster lost a node runs again from its inputs (``ray.stage_retries``, :func:`run_stage`): the
        files of the failed attempt are removed first. ``before_commit()`` runs then; what it raises leaves no
        version."""
        check_name(table)
        if (done := self.already_written(table, lineage, force)) is not None:
            return done
        # Batches read from Spark-written files carry Spark's schema in their metadata (Ray Data's V1 Parquet
        # reader keeps it), stale once a stage adds columns; Spark would read the written files back with it.
        ds = ds.map_batches(_without_spark_schema, batch_format="pyarrow", zero_copy_batch=True)

        def run(staging: str) -> None:
            # Runs the stage, lazily (a lost node: again); Ray names S3 as pyarrow does, Spark reads it as given.
            from common.platform.compute.ray_stages import run_stage

            run_stage(
                lambda: ds.write_parquet(arrow_uri(staging)),
                f"the stage writing {table}",
                lambda: remove_tree(staging),
            )
            (before_commit or (lambda: None))()

        if not self.native_delta:
            if self.cfg.catalog:
                raise LakehouseError("catalog tables are written with Spark's Delta writer (spark.delta: native)")
            metadata = lineage.to_metadata(table) if lineage else None
            return self._commit_written(table, mode, metadata, run, None, app_id(table, lineage, force))
        staging = f"{self.cfg.root.rstrip('/')}/_staging/{table}-{uuid.uuid4().hex[:12]}"
        try:
            run(staging)
            # ds.schema, not ds.schema(): the dataset is lazy, and its schema would run it (the model) again.
            return self.write(
                read_parquet_folder(self._require_spark(), staging, ds.schema), table, mode, lineage, force
            )
        finally:
            remove_tree(staging)


def _without_spark_schema(batch):
    """The Arrow ``batch`` without the Spark schema in its metadata (``org.apache.spark.*`` keys). Spark reads a
    Parquet file's columns from that key when it is there, not from the file's own schema, so a file written
    with a stale copy (a batch read from a Spark-written table, then given more columns) would lose the new
    columns when Spark reads it."""
    metadata = batch.schema.metadata
    if not metadata or not any(key.startswith(b"org.apache.spark.") for key in metadata):
        return batch
    return batch.replace_schema_metadata({k: v for k, v in metadata.items() if not k.startswith(b"org.apache.spark.")})
