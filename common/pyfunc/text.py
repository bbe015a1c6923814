"""Title text: the normalisation every classifier trains and predicts on (the suite imports it as
:func:`common.data.text.normalize_title`; a registered model carries this file). Standard library only."""

from __future__ import annotations

import re
import unicodedata

# Punctuation that separates tokens; '-', "'", '+', '.', '_' stay inside tokens (model numbers,
# "men's", "3+", "1.5l", the blinding tokens).
_SEPARATORS = re.compile(r"[^\w\s\-'+._]", re.UNICODE)
_SPACES = re.compile(r"\s+")


def normalize_title(text: str | None) -> str:
    """NFKC, lower case, punctuation split off, single spaces: the text fastText trains and predicts on."""
    if not text:
        return ""
    text = unicodedata.normalize("NFKC", text).lower()
    return _SPACES.sub(" ", _SEPARATORS.sub(" ", text)).strip()
