"""What an input is before it is read: its format (configured, or told from a table name, a file suffix, or a
folder's Delta log or file suffixes) and its version (a fingerprint of its files' sizes and times, or a catalog
table's Delta version).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING

from common.data.config import FILE_FORMATS, InputSpec, looks_like_table_name
from common.data.raw_input import InputSchemaError
from common.platform.lakehouse.lakehouse import fingerprint_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def resolve_format(spec: InputSpec) -> str:
    """The concrete format of ``spec``: the configured one, or detected from the path.

    Raises :class:`InputSchemaError` when the path does not exist or its format cannot be told.
    """
    if spec.format != "auto":
        return spec.format
    if looks_like_table_name(spec.path):
        return "table"
    if "://" in spec.path:
        if spec.path.rstrip("/").endswith(tuple(FILE_FORMATS)):
            return FILE_FORMATS[Path(spec.path).suffix.lower()]
        return _folder_format(spec.path)
    if any(ch in spec.path for ch in "*?["):
        matches = sorted(glob.glob(spec.path))
        if not matches:
            raise InputSchemaError(f"input not found: no file matches {spec.path}")
        formats = {FILE_FORMATS.get(Path(m).suffix.lower()) for m in matches}
        if len(formats) != 1 or None in formats:
            raise InputSchemaError(f"{spec.path}: matches files of several or unknown formats; set format")
        return formats.pop()
    path = Path(spec.path)
    if not path.exists():
        raise InputSchemaError(f"input not found: {spec.path}")
    if path.is_dir():
        return _folder_format(spec.path)
    fmt = FILE_FORMATS.get(path.suffix.lower())
    if not fmt:
        raise InputSchemaError(f"{spec.path}: unknown file suffix {path.suffix!r}; set format: csv|parquet|json|delta")
    return fmt


def _folder_format(folder: str) -> str:
    """The format of a folder of input files, on a local disk or an object store: ``delta`` when it holds a Delta
    log, else the one format its files' suffixes name (hidden and ``_`` files aside, as Spark skips them). Raises
    :class:`InputSchemaError` when it holds no file, or files of no or several known formats."""
    from common.platform.storage import filesystem, list_files

    base = filesystem(folder)[1].rstrip("/") + "/"
    names = [info.path[len(base) :] if info.path.startswith(base) else info.base_name for info in list_files(folder)]
    if not names:
        raise InputSchemaError(f"input not found: {folder} (no files)")
    if any(name.startswith("_delta_log/") for name in names):
        return "delta"
    suffixes = {
        Path(name).suffix.lower() for name in names if not any(part.startswith((".", "_")) for part in name.split("/"))
    }
    formats = {FILE_FORMATS[s] for s in suffixes if s in FILE_FORMATS}
    if len(formats) == 1:
        return formats.pop()
    raise InputSchemaError(
        f"{folder}: cannot tell the format of this folder (found {sorted(suffixes)}); "
        "set format: csv|parquet|json|delta"
    )


def file_version(path: str) -> str:
    """Fingerprint of the files under ``path`` (size and mtime): re-reading unchanged files gives the same."""
    return fingerprint(file_entries(path))


def file_entries(path: str) -> list:
    """The files under ``path`` (a file, folder or local glob) with their sizes and times."""
    from common.platform.storage import list_files

    paths = sorted(glob.glob(path)) if any(ch in path for ch in "*?[") and "://" not in path else [path]
    return [e for p in paths for e in list_files(p)]


def fingerprint(entries: list) -> str:
    """One fingerprint of ``entries`` (:func:`file_entries`): their paths, sizes and modification times."""
    return fingerprint_files((e.path, e.size, e.mtime.timestamp() if e.mtime else 0.0) for e in entries)


def table_version(spark: "SparkSession", name: str) -> str:
    """A catalog table's latest Delta version, ``unversioned`` for a table without a Delta history."""
    try:
        return str(spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").first()["version"])
    except Exception:
        return "unversioned"  # a non-Delta catalog table (e.g. a Hive table)
