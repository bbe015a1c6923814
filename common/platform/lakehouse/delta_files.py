"""What the delta-rs write path reads off the Parquet files its writers left
(:mod:`common.platform.lakehouse.delta_rs`): each
file's add action with its statistics from the footer, and the folder's schema."""

from __future__ import annotations

import json
import time
from typing import Any

from common.platform.lakehouse.tables import LakehouseError
from common.platform.storage import filesystem, list_files


def add_actions_for(staging: str, batch_dir: str) -> list:
    """AddActions (relative path, size, mtime, stats) for the Parquet files under ``staging``.

    Stats (numRecords, nullCount, min/max) come from each file's footer: one small read per file.
    """
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    fs, root = filesystem(staging)
    files = [f for f in list_files(staging) if f.base_name.endswith(".parquet") and not f.base_name.startswith(".")]
    actions = []
    for info in sorted(files, key=lambda f: f.path):
        with fs.open_input_file(info.path) as handle:
            stats = parquet_stats(pq.ParquetFile(handle).metadata)
        relative = f"{batch_dir}/{info.path[len(root) :].lstrip('/')}"
        mtime_ms = int(info.mtime.timestamp() * 1000) if info.mtime else int(time.time() * 1000)
        actions.append(AddAction(relative, info.size, {}, mtime_ms, True, json.dumps(stats)))
    return actions


def parquet_stats(meta) -> dict[str, Any]:
    """Delta file statistics from a Parquet footer: numRecords, and per top-level column nullCount/min/max."""
    null_count: dict[str, int] = {}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    complete: dict[str, bool] = {}
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        for ci in range(group.num_columns):
            column = group.column(ci)
            name = column.path_in_schema
            if "." in name:  # nested columns: Delta stats for them are optional
                continue
            st = column.statistics
            if st is None or not st.has_null_count:
                complete[name] = False
                continue
            complete.setdefault(name, True)
            null_count[name] = null_count.get(name, 0) + st.null_count
            if st.has_min_max and isinstance(st.min, (int, float, str)) and not isinstance(st.min, bool):
                mins[name] = st.min if name not in mins else min(mins[name], st.min)
                maxs[name] = st.max if name not in maxs else max(maxs[name], st.max)
    stats: dict[str, Any] = {"numRecords": meta.num_rows}
    kept = {k: v for k, v in null_count.items() if complete.get(k)}
    if kept:
        stats["nullCount"] = kept
    # String min/max are left out: Delta truncates them by its own rules, and wrong bounds would prune data.
    numeric_min = {k: v for k, v in mins.items() if complete.get(k) and not isinstance(v, str)}
    if numeric_min:
        stats["minValues"] = numeric_min
        stats["maxValues"] = {k: maxs[k] for k in numeric_min}
    return stats


def schema_of(folder: str):
    """The Arrow schema of the first Parquet file under ``folder``."""
    import pyarrow.parquet as pq

    fs, _ = filesystem(folder)
    files = sorted((f for f in list_files(folder) if f.base_name.endswith(".parquet")), key=lambda f: f.path)
    if not files:
        raise LakehouseError(f"no Parquet files were written under {folder}")
    with fs.open_input_file(files[0].path) as handle:
        return pq.read_schema(handle)
