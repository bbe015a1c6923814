"""Text cutting for genre transfer: passages (generator pairs) and seeded random windows (the classifier's
input). Pure Python, used inside Spark UDFs; the cleaning is a Column expression
(:func:`common.genre.evaluation.clean_col`)."""

from __future__ import annotations

import hashlib


def passages(text: str, chars: int) -> list[str]:
    """``text`` cut into consecutive passages of at most ``chars`` characters at whitespace (a single word
    longer than ``chars`` is a passage of its own); whitespace inside a passage collapses to one space."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for word in (text or "").split():
        if current and size + 1 + len(word) > chars:
            out.append(" ".join(current))
            current, size = [], 0
        size += len(word) + (1 if current else 0)
        current.append(word)
    if current:
        out.append(" ".join(current))
    return out


def _offset(key: str, seed: int, span: int) -> int:
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % span


def window(text: str, key: str, seed: int, chars: int) -> str:
    """A window of about ``chars`` characters at a position drawn from (``seed``, ``key``): the same key
    and seed always give the same window. Cut to whole words (a word the cut split is dropped); a text no
    longer than ``chars`` is returned whole (whitespace collapsed)."""
    text = " ".join((text or "").split())
    if len(text) <= chars:
        return text
    start = _offset(key, seed, len(text) - chars + 1)
    end = start + chars
    if start > 0 and not text[start - 1].isspace():
        nxt = text.find(" ", start)
        start = end if nxt < 0 else nxt + 1
    if end < len(text) and not text[end].isspace():
        end = max(start, text.rfind(" ", start, end))
    return text[start:end].strip()
