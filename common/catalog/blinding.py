"""CS-Blind, the consistency paper's blinding baseline: colours and sizes replaced by constant tokens."""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

COLOUR_TOKEN = "__colour__"
SIZE_TOKEN = "__size__"
# The repository root: config-relative dictionaries (conf/dictionaries/...) resolve against it too.
REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_resource(path: str) -> Path:
    """A config-relative resource (e.g. ``conf/dictionaries/colours.txt``): as given, else under the repo."""
    candidate = Path(path)
    if candidate.is_file():
        return candidate
    bundled = REPO_ROOT / path
    if bundled.is_file():
        return bundled
    raise FileNotFoundError(f"dictionary not found: {path} (looked in the working directory and {REPO_ROOT})")


def load_dictionary(path: str) -> list[str]:
    """Regex alternatives from a dictionary file: plain lines are literal words, ``re:`` lines regexes.

    Longer entries come first, so "super king" wins over "king".
    """
    entries = []
    for line in resolve_resource(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entries.append(line[3:] if line.startswith("re:") else re.escape(line).replace(r"\ ", r"\s+"))
    return sorted(set(entries), key=lambda e: (-len(e), e))


def dictionary_pattern(entries: list[str]) -> str:
    """A case-insensitive whole-token regex (Java and Python compatible) for the entries."""
    return r"(?i)(?<![\w'])(?:" + "|".join(entries) + r")(?![\w'])"


def blind_col(title: "Column", colours: list[str], sizes: list[str]) -> "Column":
    """Column: the title with every colour replaced by ``__colour__`` and every size by ``__size__``."""
    from pyspark.sql import functions as F

    blinded = F.regexp_replace(title, dictionary_pattern(sizes), f" {SIZE_TOKEN} ")
    blinded = F.regexp_replace(blinded, dictionary_pattern(colours), f" {COLOUR_TOKEN} ")
    return F.trim(F.regexp_replace(blinded, r"\s+", " "))
