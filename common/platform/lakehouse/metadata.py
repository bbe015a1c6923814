"""The lakehouse's table metadata, under its one contract (:class:`~common.platform.lakehouse.lakehouse.Lakehouse`
mixes this in): whether a table exists, its versions and history with lineage, the newest version that changed data,
the version a lineage wrote, the tables' names and sizes, and one column's value counts. Path tables are read from
their ``_delta_log`` through delta-rs, whichever path wrote them (no Spark job per look-up); catalog tables ask
Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from common.platform.lakehouse import delta_native, delta_rs
from common.platform.lakehouse.tables import Commit, LakehouseError, Lineage, TableInfo, parse_lineage

if TYPE_CHECKING:
    from common.platform.config import LakehouseConfig


class TableMetadata:
    """The metadata half of the lakehouse: needs the table API's ``cfg``, ``location``, ``_ident``, ``read`` and
    ``_require_spark``."""

    cfg: "LakehouseConfig"

    def exists(self, table: str) -> bool:
        """Whether the table has at least one committed version."""
        return self.version(table) is not None

    # Metadata of path tables comes from their _delta_log through delta-rs, whichever path wrote them (no
    # Spark job per look-up); catalog tables ask Spark (DESCRIBE HISTORY).
    def version(self, table: str) -> Optional[int]:
        """The latest version number, or None when the table does not exist."""
        if self.cfg.catalog:
            if not self._native_exists(table):
                return None
            return delta_native.latest_version(self._require_spark(), self._ident(table))
        from deltalake import DeltaTable

        location = self.location(table)
        if not DeltaTable.is_deltatable(location, storage_options=self.cfg.storage_options or None):
            return None
        return DeltaTable(location, storage_options=self.cfg.storage_options or None).version()

    def history(self, table: str, limit: Optional[int] = None) -> list[Commit]:
        """The commits (the newest ``limit``, or all), newest first, with lineage parsed from userMetadata."""
        if self.cfg.catalog:
            if not self._native_exists(table):
                raise LakehouseError(f"table {table!r} does not exist at {self.location(table)}")
            commits = delta_native.history(self._require_spark(), self._ident(table), limit)
        else:
            dt = self._delta_rs_table(table)
            commits = [
                Commit(
                    version=int(entry["version"]),
                    timestamp_ms=entry.get("timestamp"),
                    operation=entry.get("operation"),
                    lineage=parse_lineage(entry.get("userMetadata")),
                )
                for entry in delta_rs.commit_infos(
                    self.location(table), self.cfg.storage_options or None, limit, dt.version()
                )
            ]
        return sorted(commits, key=lambda c: c.version, reverse=True)

    def data_version(self, table: str, version: Optional[int] = None) -> int:
        """The newest version at or before ``version`` (default: latest) whose commit changed data: maintenance
        commits (OPTIMIZE, VACUUM) read the same rows as the version before them, so lineage names this one."""
        commit = self.data_commit(table, version)
        if commit is not None:
            return commit.version
        return self.history(table, 1)[0].version if version is None else version

    def data_commit(self, table: str, version: Optional[int] = None) -> Optional[Commit]:
        """The commit of :meth:`data_version` (with its lineage), or None when no commit at or before
        ``version`` changed data."""
        # Maintenance commits are rare and come in short runs: the last few commits nearly always suffice;
        # the whole history is read only when they do not (or ``version`` is older than them).
        for limit in (8, None):
            commits = self.history(table, limit)
            newest = commits[0].version if version is None else version
            for commit in commits:
                if commit.version <= newest and commit.changes_data:
                    return commit
        return None

    def table_names(self) -> list[str]:
        """The names of the lakehouse's tables, sorted (no metadata read)."""
        if self.cfg.catalog:
            spark = self._require_spark()
            return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {self.cfg.catalog}").collect())
        return delta_rs.path_table_names(self.cfg.root)

    def tables(self) -> list[TableInfo]:
        """Every table in the lakehouse with its latest version and row count."""
        if self.cfg.catalog:
            infos = []
            for name in self.table_names():
                history = self.history(name)
                infos.append(
                    TableInfo(
                        name,
                        history[0].version,
                        self.read(name).count(),
                        self.location(name),
                        (history[0].lineage or {}).get("job"),
                    )
                )
            return infos
        storage = self.cfg.storage_options or None
        return [delta_rs.path_table_info(name, self.location(name), storage) for name in self.table_names()]

    def value_counts(
        self,
        table: str,
        column: str,
        fold: Callable[[Optional[str]], Optional[str]] = lambda v: v,
        version: Optional[int] = None,
    ) -> dict[Optional[str], int]:
        """{fold(value): rows} of one column of a table version (the latest by default). Rows are streamed,
        never held: path tables in delta-rs' record batches, catalog tables through Spark's aggregate; a
        ``fold`` that maps values onto a bounded set keeps the result bounded however many values there are."""
        from collections import Counter

        counts: Counter = Counter()
        if self.cfg.catalog:
            from pyspark.sql import functions as F

            for row in self.read(table, version).groupBy(F.col(column).cast("string")).count().toLocalIterator():
                counts[fold(row[0])] += row[1]
            return dict(counts)
        import pyarrow.compute as pc
        from deltalake import DeltaTable

        dt = DeltaTable(self.location(table), version=version, storage_options=self.cfg.storage_options or None)
        for batch in dt.to_pyarrow_dataset().to_batches(columns=[column]):
            for entry in pc.value_counts(batch.column(0)).to_pylist():
                counts[fold(entry["values"])] += entry["counts"]
        return dict(counts)

    def find_version(self, table: str, lineage: Lineage) -> Optional[int]:
        """The version whose commit carries ``lineage``'s key, or None."""
        if not self.exists(table):
            return None
        key = lineage.key(table)
        for commit in self.history(table):
            if commit.lineage and commit.lineage.get("key") == key:
                return commit.version
        return None

    def _native_exists(self, table: str) -> bool:
        return delta_native.table_exists(
            self._require_spark(), self._ident(table), self.location(table) if self.cfg.catalog else None
        )

    def _delta_rs_table(self, table: str):
        return delta_rs.open_table(table, self.location(table), self.cfg.storage_options or None)
