"""CS-Blind, the consistency paper's blinding baseline: colours and sizes replaced by constant tokens."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from pyspark.sql import Column

COLOUR_TOKEN = "__colour__"
SIZE_TOKEN = "__size__"
# The dictionaries shipped with the suite: package data, so they travel inside `make dist`'s archive too.
SHIPPED = ("colours", "sizes")


def dictionary_text(path: Optional[str], shipped: str) -> str:
    """The text of the dictionary file ``path`` (on the driver's disk), or of the suite's own ``shipped`` one
    (``colours`` or ``sizes``, read from the package: from a checkout, an install or a zip on ``--py-files``) when
    ``path`` is None."""
    if path is None:
        if shipped not in SHIPPED:
            raise ValueError(f"no shipped dictionary {shipped!r}; shipped: {', '.join(SHIPPED)}")
        from importlib.resources import files

        return files("common.catalog").joinpath("dictionaries", f"{shipped}.txt").read_text(encoding="utf-8")
    candidate = Path(path)
    if not candidate.is_file():
        raise FileNotFoundError(
            f"dictionary not found: {path} (set it to a file on the driver, or to null for the "
            f"suite's own {shipped} list)"
        )
    return candidate.read_text(encoding="utf-8")


def load_dictionary(path: Optional[str], shipped: str) -> list[str]:
    """Regex alternatives from a dictionary (:func:`dictionary_text`): plain lines are literal words, ``re:`` lines
    regexes. Longer entries come first, so "super king" wins over "king"."""
    entries = []
    for line in dictionary_text(path, shipped).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entries.append(line[3:] if line.startswith("re:") else re.escape(line).replace(r"\ ", r"\s+"))
    return sorted(set(entries), key=lambda e: (-len(e), e))


def dictionary_pattern(entries: list[str]) -> str:
    """A case-insensitive whole-token regex (Java and Python compatible) for the entries."""
    return r"(?i)(?<![\w'])(?:" + "|".join(entries) + r")(?![\w'])"


def substitute_col(text: "Column", substitutions: list[list[str]]) -> "Column":
    """Column: ``text`` with each (pattern, token) substitution applied in order (a match becomes `` token ``),
    spaces collapsed and trimmed: what a registered model's loader does to its input
    (``common.pyfunc.loader.substitute``, the manifest's ``substitute``), in Spark."""
    from pyspark.sql import functions as F

    for pattern, token in substitutions:
        text = F.regexp_replace(text, pattern, f" {token} ")
    return F.trim(F.regexp_replace(text, r"\s+", " "))


def blind_col(title: "Column", colours: list[str], sizes: list[str]) -> "Column":
    """Column: the title with every colour replaced by ``__colour__`` and every size by ``__size__``."""
    from pyspark.sql import functions as F

    blinded = F.regexp_replace(title, dictionary_pattern(sizes), f" {SIZE_TOKEN} ")
    blinded = F.regexp_replace(blinded, dictionary_pattern(colours), f" {COLOUR_TOKEN} ")
    return F.trim(F.regexp_replace(blinded, r"\s+", " "))
