"""Sequence-to-sequence models: load a checkpoint, warm-start one from MiniLM, or build a tiny T5 from
scratch, and fine-tune it.

* ``checkpoint`` (production): ``model_name_or_path`` names a checkpoint (t5-small, t5-base, flan-t5-*, a
  BART, or a local path); its tokenizer and weights are loaded as they are.
* ``warm_minilm`` (the local default): a BART-shaped encoder-decoder warm-started from all-MiniLM-L6-v2,
  the one pretrained transformer available offline (:mod:`common.models.generation.kinds.warm_start`).
* ``scratch_t5`` (plumbing tests): a small ``T5Config`` model, a Unigram tokenizer trained on the pairs.
* ``smollm2`` / ``causal_checkpoint``: a causal LM (:mod:`common.models.generation.kinds.causal_lm`, its batches and
  loss in :mod:`common.models.generation.kinds.causal_training`), same loop.

Fine-tuning is a plain PyTorch loop (AdamW, gradient accumulation, bf16 autocast on a GPU that supports it,
fp16 with a scaler otherwise, fp32 on CPU), saved with ``save_pretrained``; with ``ModelSpec.prefix_labels``
a per-label prefix table (:mod:`common.models.generation.kinds.label_prefix`) trains with the model. Zero epochs
of a causal kind, or a served model (``endpoint``): no training (:mod:`common.models.generation.kinds.in_context`).
What it takes and gives (:class:`~common.models.generation.fine_tune_specs.ModelSpec`, ``TrainSpec``,
``FineTuneResult``) is in :mod:`common.models.generation.fine_tune_specs`; the Ray task that runs it and logs
to MLflow in :mod:`common.models.generation.on_ray.fine_tune_ray`.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any, Callable, Optional, Sequence

from common.models.generation.fine_tune_specs import FineTuneResult, ModelSpec, TrainSpec

log = logging.getLogger(__name__)


def build_model(spec: ModelSpec, pairs: Sequence[tuple[str, str]], seed: int = 0):
    """(tokenizer, model): the named checkpoint, the MiniLM warm start, or a scratch T5 (tokenizer from ``pairs``)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, T5Config, T5ForConditionalGeneration

    if spec.kind == "checkpoint" or (spec.model_name_or_path and spec.kind != "warm_minilm"):
        tokenizer = AutoTokenizer.from_pretrained(spec.model_name_or_path)
        from common.models.pretrained import load_for_training

        return tokenizer, load_for_training(AutoModelForSeq2SeqLM, spec.model_name_or_path)
    if spec.kind == "warm_minilm":
        from common.models.generation.kinds.warm_start import build_warm_minilm

        # All of MiniLM's 512 positions: generation may see longer inputs than training truncates to.
        return build_warm_minilm(512, seed)
    from common.models.generation.kinds.unigram import train_tokenizer

    tokenizer = train_tokenizer([t for pair in pairs for t in pair], spec.vocab_size)
    config = T5Config(
        vocab_size=len(tokenizer),
        d_model=spec.d_model,
        d_kv=spec.d_model // spec.num_heads,
        d_ff=spec.d_ff,
        num_layers=spec.num_layers,
        num_decoder_layers=spec.num_layers,
        num_heads=spec.num_heads,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        decoder_start_token_id=tokenizer.pad_token_id,
    )
    return tokenizer, T5ForConditionalGeneration(config)


def device_and_dtype() -> tuple[str, Any]:
    """("cuda", bf16 or fp16) when a GPU is visible, else ("cpu", fp32)."""
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return "cpu", torch.float32


def model_inputs(encoded, device: str) -> dict:
    """The encoder inputs a seq2seq model takes (ids and mask; BERT tokenizers also give token types)."""
    return {k: encoded[k].to(device) for k in ("input_ids", "attention_mask") if k in encoded}


EpochHook = Callable[[int, Any, Any, list[float]], None]


def fine_tune(
    pairs: Sequence[tuple[str, str]],
    out_dir: str,
    model: ModelSpec,
    train: TrainSpec,
    on_epoch_end: Optional[EpochHook] = None,
) -> FineTuneResult:
    """Fine-tune (or train from scratch) on (source, target) pairs; save to ``out_dir``; return the losses.

    Each optimiser step averages the loss over ``grad_accumulation`` micro-batches of ``batch_size``.
    ``on_epoch_end(epoch, model, tokenizer, step_losses)`` runs after every epoch (checkpoints, logging)."""
    import torch

    if not pairs:
        raise ValueError("no (source, target) pairs to fine-tune on")
    if model.kind == "endpoint" or (train.epochs == 0 and not train.max_steps):
        from common.models.generation.kinds.in_context import in_context_generator

        return FineTuneResult(path=out_dir, seconds=in_context_generator(pairs, out_dir, model, train.seed))
    random.seed(train.seed)
    torch.manual_seed(train.seed)
    device, dtype = device_and_dtype()
    from common.models.generation.kinds.batching import epoch_batches
    from common.models.optim import StepProgress

    tokenizer, net, prefix, sizes, batch_inputs = _model_and_batches(pairs, model, train.seed, device)
    if model.causal:
        from common.models.generation.kinds.causal_training import target_loss

    net.to(device).train()
    # A batch pads sources and targets each to its longest: grouping by the longer side, then the shorter,
    # fills WDC title-pair batches to 80% (43% at random, 66% by the sum of the two).
    keys = [(max(pair), min(pair)) for pair in sizes]
    weights = [w for w in net.parameters() if w.requires_grad] + (
        list(prefix.parameters()) if prefix is not None else []
    )
    optimiser = torch.optim.AdamW(weights, lr=train.learning_rate)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    result = FineTuneResult(path=out_dir, device=device, dtype=str(dtype).removeprefix("torch."))
    order = list(range(len(pairs)))
    start = time.perf_counter()
    epochs = train.planned_epochs(len(pairs))
    progress = StepProgress(log, train.max_steps or epochs * train.steps_per_epoch(len(pairs)))
    for epoch in range(1, epochs + 1):
        batches = epoch_batches(order, keys, train.batch_size, train.group_by_length)
        if train.max_steps:
            # Cut the pass where its optimiser steps reach the bound.
            left = train.max_steps - len(result.step_losses)
            batches = batches[: left * train.grad_accumulation]
        running, in_step = 0.0, 0
        for b, batch in enumerate(batches):
            inputs, n_padded = batch_inputs(batch)
            result.padded_tokens += n_padded
            result.tokens += sum(sum(sizes[i]) for i in batch)
            with torch.autocast(device_type=device, dtype=dtype, enabled=device == "cuda"):
                loss = target_loss(net, inputs) if model.causal else net(**inputs).loss
                loss = loss / train.grad_accumulation
            (scaler.scale(loss) if scaler else loss).backward()
            running += loss.item()
            in_step += 1
            if in_step == train.grad_accumulation or b == len(batches) - 1:
                if scaler:
                    scaler.step(optimiser)
                    scaler.update()
                else:
                    optimiser.step()
                optimiser.zero_grad(set_to_none=True)
                result.step_losses.append(running * train.grad_accumulation / in_step)
                running, in_step = 0.0, 0
                progress.step(result.step_losses)
        result.examples += sum(len(batch) for batch in batches)
        if on_epoch_end is not None:
            net.eval()
            on_epoch_end(epoch, net, tokenizer, result.step_losses)
            net.train()
    result.seconds = time.perf_counter() - start
    _save(net, tokenizer, prefix, out_dir, model)
    log.info(
        "fine-tuned %d pairs: %d examples in %d steps (%d epochs) on %s/%s in %.1f s; loss %.3f -> %.3f",
        len(pairs),
        result.examples,
        len(result.step_losses),
        epochs,
        device,
        result.dtype,
        result.seconds,
        result.step_losses[0],
        result.step_losses[-1],
    )
    return result


def _model_and_batches(pairs: Sequence[tuple[str, str]], model: ModelSpec, seed: int, device: str):
    """(tokenizer, net, prefix, sizes, batch_inputs) to train: the causal LM or seq2seq model of ``model``, its
    label-prefix table on ``device`` when ``model.prefix_labels`` (else None), each pair's (source, target) token
    counts, and the function of a batch's pair indices that returns (the model's keyword arguments, padded token
    count)."""
    if model.causal:
        from common.models.generation.kinds.causal_lm import build_causal

        tokenizer, net = build_causal(model.kind, model.model_name_or_path, model.lora_r, model.lora_alpha, seed)
    else:
        tokenizer, net = build_model(model, pairs, seed)
    prefix = None
    if model.prefix_labels:  # LS-PT; with a causal LM the label blocks go ahead of the text, as the paper's GPT-2
        from common.models.generation.kinds.label_prefix import LabelPrefix

        prefix = LabelPrefix.for_model(
            model.prefix_labels, model.prefix_length, net, tokenizer, model.prefix_separator, seed
        ).to(device)
    if not model.causal:
        sizes, batch_inputs = _seq2seq_batches(tokenizer, net, prefix, pairs, model, device)
    elif prefix is not None:
        from common.models.generation.kinds.causal_training import prefix_training_batches

        sizes, batch_inputs = prefix_training_batches(tokenizer, net, prefix, pairs, model.max_target_length, device)
    else:
        from common.models.generation.kinds.causal_training import training_batches

        sizes, batch_inputs = training_batches(
            tokenizer, pairs, model.prompt, model.max_source_length, model.max_target_length, device
        )
    return tokenizer, net, prefix, sizes, batch_inputs


def _seq2seq_batches(tokenizer, net, prefix, pairs: Sequence[tuple[str, str]], model: ModelSpec, device: str):
    """(sizes, batch_inputs) for a seq2seq model, as
    :func:`common.models.generation.kinds.causal_training.training_batches`
    for a causal LM: each pair's (source, target) token counts (source 0 when ``prefix``, a label-prefix table, feeds
    the encoder), and a function of a batch's pair indices returning (the encoder inputs and ``labels`` on
    ``device``, padded token count)."""
    from common.models.generation.kinds.batching import padded, token_ids

    sources = [s for s, _ in pairs]
    source_ids = None if prefix is not None else token_ids(tokenizer, sources, model.max_source_length)
    target_ids = token_ids(tokenizer, [t for _, t in pairs], model.max_target_length)
    start_token = getattr(net.config, "decoder_start_token_id", None)
    if start_token is not None and all(ids and ids[0] == start_token for ids in target_ids):
        # A BERT tokenizer opens every text with [CLS], the decoder's start token: the model prepends it
        # itself, so the labels begin after it.
        target_ids = [ids[1:] for ids in target_ids]
    source_sizes = [len(ids) for ids in source_ids] if source_ids is not None else [0] * len(target_ids)
    sizes = [(n, len(ids)) for n, ids in zip(source_sizes, target_ids)]

    def batch_inputs(batch: list[int]) -> tuple[dict, int]:
        n_padded = 0
        if prefix is not None:
            enc = prefix.encoder_inputs([sources[i] for i in batch], device)
        else:
            ids, mask = padded([source_ids[i] for i in batch], tokenizer.pad_token_id)
            enc = {"input_ids": ids.to(device), "attention_mask": mask.to(device)}
            n_padded += ids.numel()
        labels, _ = padded([target_ids[i] for i in batch], -100)  # padding not in the loss
        return {**enc, "labels": labels.to(device)}, n_padded + labels.numel()

    return sizes, batch_inputs


def _save(net, tokenizer, prefix, out_dir: str, model: ModelSpec) -> None:
    """Save the trained model to ``out_dir``: a causal LM as a generator (LoRA merged, its prompt beside it), a
    seq2seq model and its tokenizer with ``save_pretrained``; the label-prefix table beside either."""
    if model.causal:
        from common.models.generation.kinds.causal_lm import save_generator

        # The base by name: the packaged model's folder was found (and its file hashed) by build_causal.
        save_generator(net, tokenizer, out_dir, model.kind, model.prompt, model.model_name_or_path or model.kind)
    else:
        net.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    if prefix is not None:
        prefix.save(out_dir)
