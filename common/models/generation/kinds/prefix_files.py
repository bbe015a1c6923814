"""The files a label-prefix (LS-PT) model folder holds beside its seq2seq weights, and the test for them.

Torch-free, so a CTranslate2 actor can tell such a model apart without importing torch
(:mod:`common.models.generation.kinds.label_prefix` holds the prefix itself).
"""

from __future__ import annotations

import os

PREFIX_FILE, META_FILE = "label_prefix.safetensors", "label_prefix.json"


def has_prefix(folder: str) -> bool:
    """True when the model saved in ``folder`` is generated from label sets."""
    return os.path.isfile(os.path.join(folder, META_FILE))
