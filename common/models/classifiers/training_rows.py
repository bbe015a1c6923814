"""A classifier's training rows: where they come from (:data:`Source`: a table version's Parquet files and the
pyarrow filters that pick a fold), read in an order that never depends on the files' (:func:`read_rows`), and the
error for rows a classifier cannot learn from (:class:`TrainingDataError`). Shared by every classifier of
:mod:`common.models.classifiers` and by BoostAug's surrogates."""

from __future__ import annotations

from typing import Optional, Sequence

from common.platform.errors import InputError
from common.platform.storage import read_parquet_files


class TrainingDataError(InputError):
    """Training data a classifier cannot learn from (no rows, a single class)."""


# (Parquet files, pyarrow filters or None), e.g. (files, [("fold", "in", [0, 1, 2])]): one table version can
# hold many folds or training sets, and a Ray task reads just its own rows.
Source = tuple[Sequence[str], Optional[list]]


def read_rows(sources: Sequence[Source], text_col: str, label_col: str) -> list[tuple[str, str]]:
    """(text, label) rows of every source, sorted, so their order never depends on the files' order."""
    rows: list[tuple[str, str]] = []
    for files, filters in sources:
        if not files:
            continue
        table = read_parquet_files(files, [text_col, label_col], filters)
        rows += zip(table.column(text_col).to_pylist(), table.column(label_col).to_pylist())
    return sorted(rows, key=lambda r: (r[0] or "", r[1] or ""))
