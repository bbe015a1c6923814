"""T5 sequence-to-sequence models: load a checkpoint, or build a tiny one from scratch, and fine-tune it.

* Production: ``model_name_or_path`` names a checkpoint (t5-small, t5-base, flan-t5-*, or a local path);
  its tokenizer and weights are loaded as they are.
* Scratch (the local default and the tests): no weights can be downloaded here, so a Unigram tokenizer is
  trained on the pairs themselves and wrapped as a fast tokenizer, and a small ``T5Config`` model is built.

Fine-tuning is a plain PyTorch loop (AdamW, gradient accumulation, bf16 autocast on a GPU that supports it,
fp16 with a scaler otherwise, fp32 on CPU); the model and tokenizer are saved with ``save_pretrained``.
Callers run it inside a Ray actor or task so that it gets the cluster's GPU.
"""
from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

log = logging.getLogger(__name__)

PAD, EOS, UNK = "<pad>", "</s>", "<unk>"


@dataclass(frozen=True)
class ModelSpec:
    """Which model to fine-tune, and the shape of a scratch model."""

    model_name_or_path: Optional[str] = None
    vocab_size: int = 2000
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    max_source_length: int = 48
    max_target_length: int = 48


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation: epochs, learning rate, per-step batch and gradient accumulation (effective batch =
    ``batch_size * grad_accumulation``), seed."""

    epochs: int = 3
    learning_rate: float = 3e-4
    batch_size: int = 32
    grad_accumulation: int = 1
    seed: int = 42


@dataclass
class FineTuneResult:
    """Where the model went, the mean loss of each optimiser step, and throughput."""

    path: str
    step_losses: list[float] = field(default_factory=list)
    examples: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"


def train_tokenizer(texts: Sequence[str], vocab_size: int):
    """A Unigram tokenizer trained on ``texts``, wrapped as a ``PreTrainedTokenizerFast`` with T5's
    special tokens (pad = 0, eos = 1, unk = 2) and ``</s>`` appended to every encoded text."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.Unigram())
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=[PAD, EOS, UNK], unk_token=UNK,
                                      show_progress=False)
    tokenizer.train_from_iterator(list(texts), trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(single=f"$A {EOS}", special_tokens=[
        (EOS, tokenizer.token_to_id(EOS))])
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, eos_token=EOS, unk_token=UNK)


def build_model(spec: ModelSpec, pairs: Sequence[tuple[str, str]]):
    """(tokenizer, model): the named checkpoint, or a scratch T5 with a tokenizer trained on ``pairs``."""
    from transformers import AutoTokenizer, T5Config, T5ForConditionalGeneration

    if spec.model_name_or_path:
        tokenizer = AutoTokenizer.from_pretrained(spec.model_name_or_path)
        return tokenizer, T5ForConditionalGeneration.from_pretrained(spec.model_name_or_path)
    tokenizer = train_tokenizer([t for pair in pairs for t in pair], spec.vocab_size)
    config = T5Config(vocab_size=len(tokenizer), d_model=spec.d_model, d_kv=spec.d_model // spec.num_heads,
                      d_ff=spec.d_ff, num_layers=spec.num_layers, num_decoder_layers=spec.num_layers,
                      num_heads=spec.num_heads, pad_token_id=tokenizer.pad_token_id,
                      eos_token_id=tokenizer.eos_token_id, decoder_start_token_id=tokenizer.pad_token_id)
    return tokenizer, T5ForConditionalGeneration(config)


def device_and_dtype() -> tuple[str, Any]:
    """("cuda", bf16 or fp16) when a GPU is visible, else ("cpu", fp32)."""
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return "cpu", torch.float32


def fine_tune(pairs: Sequence[tuple[str, str]], out_dir: str, model: ModelSpec, train: TrainSpec) -> FineTuneResult:
    """Fine-tune (or train from scratch) on (source, target) pairs; save to ``out_dir``; return the losses.

    Each optimiser step averages the loss over ``grad_accumulation`` micro-batches of ``batch_size``.
    """
    import torch

    if not pairs:
        raise ValueError("no (source, target) pairs to fine-tune on")
    random.seed(train.seed)
    torch.manual_seed(train.seed)
    tokenizer, net = build_model(model, pairs)
    device, dtype = device_and_dtype()
    net.to(device).train()
    optimiser = torch.optim.AdamW(net.parameters(), lr=train.learning_rate)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    order = list(range(len(pairs)))
    result = FineTuneResult(path=out_dir, device=device, dtype=str(dtype).removeprefix("torch."))
    start = time.perf_counter()
    micro_batches = math.ceil(len(pairs) / train.batch_size)
    for _ in range(train.epochs):
        random.shuffle(order)
        running, in_step = 0.0, 0
        for b in range(micro_batches):
            batch = [pairs[i] for i in order[b * train.batch_size:(b + 1) * train.batch_size]]
            enc = tokenizer([s for s, _ in batch], max_length=model.max_source_length, truncation=True,
                            padding=True, return_tensors="pt").to(device)
            labels = tokenizer([t for _, t in batch], max_length=model.max_target_length, truncation=True,
                               padding=True, return_tensors="pt").input_ids.to(device)
            labels[labels == tokenizer.pad_token_id] = -100  # padding does not count in the loss
            with torch.autocast(device_type=device, dtype=dtype, enabled=device == "cuda"):
                loss = net(**enc, labels=labels).loss / train.grad_accumulation
            (scaler.scale(loss) if scaler else loss).backward()
            running += float(loss)
            in_step += 1
            if in_step == train.grad_accumulation or b == micro_batches - 1:
                if scaler:
                    scaler.step(optimiser)
                    scaler.update()
                else:
                    optimiser.step()
                optimiser.zero_grad(set_to_none=True)
                result.step_losses.append(running * train.grad_accumulation / in_step)
                running, in_step = 0.0, 0
        result.examples += len(pairs)
    result.seconds = time.perf_counter() - start
    net.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    log.info("fine-tuned %d examples x %d epochs on %s/%s in %.1f s; loss %.3f -> %.3f", len(pairs), train.epochs,
             device, result.dtype, result.seconds, result.step_losses[0], result.step_losses[-1])
    return result
