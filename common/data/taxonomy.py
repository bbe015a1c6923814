"""Category paths and taxonomies (Google Product Taxonomy format: ``ID - A > B > C``).

Labels are category paths written ``"L1 > L2 > L3"``. Plain-Python helpers work on single labels;
the ``*_col`` helpers are the same rules as Spark Column expressions, for use inside transforms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional

from common.platform.errors import InputError

# The canonical path separator, " > ": defined in the code a registered model carries, which cuts labels by it.
from common.pyfunc.hft import SEPARATOR

if TYPE_CHECKING:
    from pyspark.sql import Column

_LINE = re.compile(r"^\s*(\d+)\s+-\s+(.+?)\s*$")


class TaxonomyError(InputError):
    """A taxonomy file line or a category path is malformed; the message says where."""


def split_path(label: str, sep: str = ">") -> list[str]:
    """``"A > B > C"`` -> ``["A", "B", "C"]``; raises :class:`TaxonomyError` on an empty level."""
    parts = [p.strip() for p in label.split(sep)]
    if not label.strip() or any(not p for p in parts):
        raise TaxonomyError(f"malformed category path {label!r}: empty level")
    return parts


def join_path(parts: Iterable[str]) -> str:
    """``["A", "B"]`` -> ``"A > B"`` (the suite's canonical form)."""
    return SEPARATOR.join(parts)


def truncate(label: str, level: int, sep: str = ">") -> str:
    """The first ``level`` levels of ``label`` (the whole path when it is shorter)."""
    if level < 1:
        raise TaxonomyError(f"level must be >= 1, got {level}")
    return join_path(split_path(label, sep)[:level])


def depth(label: str, sep: str = ">") -> int:
    """Number of levels in ``label``."""
    return len(split_path(label, sep))


@dataclass(frozen=True)
class Taxonomy:
    """A set of category paths (every prefix of a path is itself a category), with optional ids."""

    paths: frozenset[str]
    ids: dict[str, int] = field(default_factory=dict, compare=False)

    @classmethod
    def from_paths(cls, labels: Iterable[str]) -> "Taxonomy":
        """Build from labels; all their prefixes become categories too."""
        paths = set()
        for label in labels:
            parts = split_path(label)
            for level in range(1, len(parts) + 1):
                paths.add(join_path(parts[:level]))
        return cls(frozenset(paths))

    @classmethod
    def from_google_file(cls, path: str | Path) -> "Taxonomy":
        """Parse a Google Product Taxonomy ``taxonomy-with-ids`` file (``#`` lines are comments).

        Raises :class:`TaxonomyError` naming the file and line of the first malformed entry, or of a
        category whose parent is missing.
        """
        from common.platform.storage import read_text

        ids: dict[str, int] = {}
        # The file may sit on an object store: read whole (a taxonomy is a few hundred KB).
        for lineno, line in enumerate(read_text(str(path)).splitlines(), start=1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            match = _LINE.match(line)
            if not match:
                raise TaxonomyError(f"{path}:{lineno}: expected 'ID - A > B > C', got {line.strip()!r}")
            try:
                parts = split_path(match.group(2))
            except TaxonomyError as exc:
                raise TaxonomyError(f"{path}:{lineno}: {exc}") from exc
            label = join_path(parts)
            if len(parts) > 1 and join_path(parts[:-1]) not in ids:
                raise TaxonomyError(f"{path}:{lineno}: parent of {label!r} is not defined above it")
            ids[label] = int(match.group(1))
        if not ids:
            raise TaxonomyError(f"{path}: no categories found")
        return cls(frozenset(ids), ids)

    def __contains__(self, label: str) -> bool:
        try:
            return join_path(split_path(label)) in self.paths
        except TaxonomyError:
            return False

    def check(self, label: str) -> str:
        """Return the canonical form of ``label``; raise :class:`TaxonomyError` when it is not a category."""
        canonical = join_path(split_path(label))
        if canonical not in self.paths:
            raise TaxonomyError(f"{label!r} is not a category of this taxonomy")
        return canonical

    @property
    def max_depth(self) -> int:
        """The deepest level present."""
        return max(depth(p) for p in self.paths)

    def at_level(self, level: int) -> list[str]:
        """All categories with exactly ``level`` levels, sorted."""
        return sorted(p for p in self.paths if depth(p) == level)

    def leaves(self) -> list[str]:
        """Categories with no children, sorted."""
        parents = {join_path(split_path(p)[:-1]) for p in self.paths if depth(p) > 1}
        return sorted(p for p in self.paths if p not in parents)

    def id_of(self, label: str) -> Optional[int]:
        """The taxonomy id of ``label`` when the source file gave one."""
        return self.ids.get(join_path(split_path(label)))


# ---------------------------------------------------------------------------- Spark Column forms
def levels_col(label: "Column", sep: str = ">") -> "Column":
    """Column: the path split into trimmed levels (array<string>)."""
    from pyspark.sql import functions as F

    return F.transform(F.split(label, re.escape(sep)), lambda part: F.trim(part))


def canonical_col(label: "Column", sep: str = ">") -> "Column":
    """Column: the path re-joined in canonical ``"A > B"`` form."""
    from pyspark.sql import functions as F

    return F.array_join(levels_col(label, sep), SEPARATOR)


def depth_col(label: "Column", sep: str = ">") -> "Column":
    """Column: the number of levels of the path."""
    from pyspark.sql import functions as F

    return F.size(levels_col(label, sep))


def truncate_col(label: "Column", level: int, sep: str = ">") -> "Column":
    """Column: the first ``level`` levels of the path (the whole path when shorter)."""
    from pyspark.sql import functions as F

    if level < 1:
        raise TaxonomyError(f"level must be >= 1, got {level}")
    return F.array_join(F.slice(levels_col(label, sep), 1, level), SEPARATOR)


def malformed_col(label: "Column", sep: str = ">") -> "Column":
    """Column: true when the path is null, blank or has an empty level (``"A >  > B"``, ``"A >"``)."""
    from pyspark.sql import functions as F

    return label.isNull() | (F.trim(label) == "") | F.exists(levels_col(label, sep), lambda part: part == "")
