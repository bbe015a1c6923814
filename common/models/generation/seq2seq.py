"""Sequence-to-sequence models: load a checkpoint, warm-start one from MiniLM, or build a tiny T5 from
scratch, and fine-tune it.

* ``checkpoint`` (production): ``model_name_or_path`` names a checkpoint (t5-small, t5-base, flan-t5-*, a
  BART, or a local path); its tokenizer and weights are loaded as they are.
* ``warm_minilm`` (the local default): a BART-shaped encoder-decoder warm-started from all-MiniLM-L6-v2,
  the one pretrained transformer available offline (:mod:`common.models.generation.warm_start`).
* ``scratch_t5`` (plumbing tests): a small ``T5Config`` model, a Unigram tokenizer trained on the pairs.
* ``smollm2`` / ``causal_checkpoint``: a causal LM (:mod:`common.models.generation.causal_lm`), same loop.

Fine-tuning is a plain PyTorch loop (AdamW, gradient accumulation, bf16 autocast on a GPU that supports it,
fp16 with a scaler otherwise, fp32 on CPU), saved with ``save_pretrained``; with ``ModelSpec.prefix_labels``
a per-label prefix table (:mod:`common.models.generation.label_prefix`) trains with the model. Zero epochs
of a causal kind, or a served model (``endpoint``): no training (:mod:`common.models.generation.in_context`).
:func:`fine_tune_on_ray` runs
it as one Ray task (``num_gpus`` from config) that reads the pairs' Parquet files, logs the loss, a
checkpoint per epoch and the final model to the MLflow run, and copies the model to the models folder.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from common.models.generation.batching import read_pairs  # noqa: F401  (the fine-tune task reads with it; tests import it here)
from common.platform.ray_stages import TORCH_TASK_ENV, fit_cpus

if TYPE_CHECKING:
    from common.models.config import FineTuneConfig, T5ModelConfig
    from common.platform.ray_runtime import RayRuntime

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelSpec:
    """Which model to fine-tune (``kind``), and the shape of a scratch model."""

    kind: str = "scratch_t5"
    model_name_or_path: Optional[str] = None
    vocab_size: int = 2000
    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    num_heads: int = 4
    max_source_length: int = 48
    max_target_length: int = 48
    # Label-specific prefixes (:mod:`common.models.generation.label_prefix`): with labels, a source text is a label
    # set (names joined by ``prefix_separator``) and the encoder reads its labels' learned blocks.
    prefix_labels: tuple[str, ...] = ()
    prefix_length: int = 0
    prefix_separator: str = ","
    # Causal kinds (common.models.generation.causal_lm): the prompt template ({source} is filled in), LoRA's rank
    # (0: every weight trains), and the examples an in-context generator's prompt holds.
    prompt: str = "{source}\n"
    lora_r: int = 16
    lora_alpha: int = 32
    in_context: int = 4
    endpoint: Optional[dict] = None  # kind endpoint: EndpointConfig's fields (the key's variable, never the key)

    @classmethod
    def from_config(cls, cfg: "T5ModelConfig") -> "ModelSpec":
        """The spec of a ``*.model`` config section (a checkpoint when ``name_or_path`` is set)."""
        shape = (
            {}
            if cfg.kind != "scratch_t5"
            else {
                "vocab_size": cfg.scratch.vocab_size,
                "d_model": cfg.scratch.d_model,
                "d_ff": cfg.scratch.d_ff,
                "num_layers": cfg.scratch.num_layers,
                "num_heads": cfg.scratch.num_heads,
            }
        )
        return cls(
            kind=cfg.kind,
            model_name_or_path=cfg.name_or_path,
            max_source_length=cfg.max_source_length,
            max_target_length=cfg.max_target_length,
            prompt=cfg.prompt,
            lora_r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            in_context=cfg.in_context_examples,
            endpoint=asdict(cfg.endpoint) if cfg.served else None,
            **shape,
        )

    @property
    def causal(self) -> bool:
        """True for a decoder-only language model (``smollm2``, ``causal_checkpoint``)."""
        from common.models.generation.causal_lm import is_causal

        return is_causal(self.kind)


@dataclass(frozen=True)
class TrainSpec:
    """Optimisation: epochs, learning rate, per-step batch and gradient accumulation (effective batch =
    ``batch_size * grad_accumulation``), seed."""

    epochs: int = 3
    learning_rate: float = 3e-4
    batch_size: int = 32
    grad_accumulation: int = 1
    seed: int = 42
    # Length-grouped batches (common.models.generation.batching): about 2x the steps/s on title pairs, at a slightly
    # higher loss per step; off by default, as the papers' epochs and rates assume random batches.
    group_by_length: bool = False
    # A bound on optimiser steps (transformers' ``max_steps``): > 0 replaces ``epochs`` by as many passes
    # over the pairs as the steps need, the last one cut short; 0 trains ``epochs`` epochs.
    max_steps: int = 0

    @classmethod
    def from_config(cls, cfg: "FineTuneConfig", seed: int) -> "TrainSpec":
        """The spec of a ``*.fine_tune`` config section."""
        return cls(
            epochs=cfg.epochs,
            learning_rate=cfg.learning_rate,
            batch_size=cfg.batch_size,
            grad_accumulation=cfg.grad_accumulation,
            seed=seed,
            group_by_length=cfg.group_by_length,
            max_steps=cfg.max_steps,
        )

    def steps_per_epoch(self, n_pairs: int) -> int:
        """Optimiser steps in one pass over ``n_pairs`` pairs (the last step may take fewer micro-batches)."""
        return math.ceil(math.ceil(n_pairs / self.batch_size) / self.grad_accumulation)

    def planned_epochs(self, n_pairs: int) -> int:
        """How many passes over ``n_pairs`` pairs the run makes: ``epochs``, or with ``max_steps`` the passes
        that hold that many optimiser steps (the last pass may stop early)."""
        return math.ceil(self.max_steps / self.steps_per_epoch(n_pairs)) if self.max_steps else self.epochs


@dataclass
class FineTuneResult:
    """Where the model went, the mean loss of each optimiser step, and throughput."""

    path: str
    step_losses: list[float] = field(default_factory=list)
    examples: int = 0
    seconds: float = 0.0
    device: str = "cpu"
    dtype: str = "float32"
    tokens: int = 0  # source and target tokens trained on, padding not counted (tokens/s = tokens / seconds)
    padded_tokens: int = 0  # the same with padding: tokens / padded_tokens is the batches' fill rate


def build_model(spec: ModelSpec, pairs: Sequence[tuple[str, str]], seed: int = 0):
    """(tokenizer, model): the named checkpoint, the MiniLM warm start, or a scratch T5 (tokenizer from ``pairs``)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, T5Config, T5ForConditionalGeneration

    if spec.kind == "checkpoint" or (spec.model_name_or_path and spec.kind != "warm_minilm"):
        tokenizer = AutoTokenizer.from_pretrained(spec.model_name_or_path)
        from common.models.pretrained import load_for_training

        return tokenizer, load_for_training(AutoModelForSeq2SeqLM, spec.model_name_or_path)
    if spec.kind == "warm_minilm":
        from common.models.generation.warm_start import build_warm_minilm

        # All of MiniLM's 512 positions: generation may see longer inputs than training truncates to.
        return build_warm_minilm(512, seed)
    from common.models.generation.unigram import train_tokenizer

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
        from common.models.generation.in_context import in_context_generator

        return FineTuneResult(path=out_dir, seconds=in_context_generator(pairs, out_dir, model, train.seed))
    random.seed(train.seed)
    torch.manual_seed(train.seed)
    device, dtype = device_and_dtype()
    from common.models.generation.batching import epoch_batches, padded, token_ids
    from common.models.optim import StepProgress

    prefix = None
    if model.causal:
        from common.models.generation import causal_lm

        tokenizer, net = causal_lm.build_causal(
            model.kind, model.model_name_or_path, model.lora_r, model.lora_alpha, train.seed
        )
        if model.prefix_labels:  # LS-PT: the label blocks ahead of the text, as the paper's prefix-tuned GPT-2
            from common.models.generation.label_prefix import LabelPrefix

            prefix = LabelPrefix.for_model(
                model.prefix_labels, model.prefix_length, net, tokenizer, model.prefix_separator, train.seed
            ).to(device)
            sizes, batch_inputs = causal_lm.prefix_training_batches(
                tokenizer, net, prefix, pairs, model.max_target_length, device
            )
        else:
            sizes, batch_inputs = causal_lm.training_batches(
                tokenizer, pairs, model.prompt, model.max_source_length, model.max_target_length, device
            )
    else:
        tokenizer, net = build_model(model, pairs, train.seed)
        if model.prefix_labels:
            from common.models.generation.label_prefix import LabelPrefix

            prefix = LabelPrefix.for_model(
                model.prefix_labels, model.prefix_length, net, tokenizer, model.prefix_separator, train.seed
            ).to(device)
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
                loss = causal_lm.target_loss(net, inputs) if model.causal else net(**inputs).loss
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
    if model.causal:
        from common.models.generation.causal_lm import save_generator

        # The base by name: the packaged model's folder was found (and its file hashed) by build_causal.
        save_generator(net, tokenizer, out_dir, model.kind, model.prompt, model.model_name_or_path or model.kind)
    else:
        net.save_pretrained(out_dir)
        tokenizer.save_pretrained(out_dir)
    if prefix is not None:
        prefix.save(out_dir)
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


MODEL_MARKER = "config.json"  # a folder holding this file is a saved model


def _fine_tune_task(
    files: Sequence[str],
    source_col: str,
    target_col: str,
    out_uri: str,
    model: ModelSpec,
    train: TrainSpec,
    num_cpus: int,
    tracking_uri: Optional[str],
    run_id: Optional[str],
    checkpoint_every: int,
    filters: Optional[list] = None,
) -> FineTuneResult:
    """The body of the Ray task: read, train, log to MLflow, copy the final model to ``out_uri``."""
    import shutil
    import tempfile

    import torch

    from common.platform.storage import put_folder

    torch.set_num_threads(max(1, num_cpus))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pairs = read_pairs(files, source_col, target_col, filters)
    if not pairs:
        raise ValueError(
            f"no (source, target) pairs in {len(files)} files matching {filters}: nothing to fine-tune {out_uri} on"
        )
    client = None
    if tracking_uri and run_id:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri)
    work = tempfile.mkdtemp(prefix="t5-")
    state = {"logged_steps": 0, "start": time.perf_counter()}
    epochs = train.planned_epochs(len(pairs))

    def on_epoch_end(epoch: int, net, tokenizer, losses: list[float]) -> None:
        seconds = time.perf_counter() - state["start"]
        epoch_losses = losses[state["logged_steps"] :]
        log.info(
            "epoch %d/%d: %d steps, mean loss %.4f, %.1f steps/s",
            epoch,
            epochs,
            len(epoch_losses),
            sum(epoch_losses) / max(1, len(epoch_losses)),
            len(losses) / max(seconds, 1e-9),
        )
        if client is None:
            state["logged_steps"] = len(losses)
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric("train_loss", v, now, step) for step, v in enumerate(losses) if step >= state["logged_steps"]
        ]
        metrics.append(Metric("epoch_loss", sum(epoch_losses) / max(1, len(epoch_losses)), now, epoch))
        for start in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        state["logged_steps"] = len(losses)
        # The last epoch's weights are the final model, logged once as model/.
        if checkpoint_every and epoch % checkpoint_every == 0 and epoch < epochs:
            folder = f"{work}/checkpoint-epoch-{epoch}"
            net.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            client.log_artifacts(run_id, folder, f"checkpoints/epoch-{epoch}")
            shutil.rmtree(folder, ignore_errors=True)

    try:
        local_model = f"{work}/model"
        result = fine_tune(pairs, local_model, model, train, on_epoch_end)
        if client is not None:
            client.log_artifacts(run_id, local_model, "model")
        put_folder(local_model, out_uri)
        result.path = out_uri
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fine_tune_on_ray(
    runtime: "RayRuntime",
    files: Sequence[str],
    out_uri: str,
    model: ModelSpec,
    train: TrainSpec,
    source_col: str = "source_text",
    target_col: str = "target_text",
    num_cpus: int = 1,
    num_gpus: float = 0.0,
    tracking_uri: Optional[str] = None,
    run_id: Optional[str] = None,
    checkpoint_every: int = 1,
) -> FineTuneResult:
    """Fine-tune on the pairs in Parquet ``files`` as one Ray task with ``num_cpus``/``num_gpus``.

    The model lands in ``out_uri`` (a path or URI); with ``run_id`` the task logs ``train_loss`` per step,
    ``epoch_loss``, a checkpoint every ``checkpoint_every`` epochs (``checkpoints/epoch-<k>``) and the final
    model (``model/``) to that MLflow run. Returns the :class:`FineTuneResult` (losses, device, seconds).
    """
    task = _fine_tune_remote(runtime, num_cpus, num_gpus)
    ref = task.remote(
        list(files), source_col, target_col, out_uri, model, train, num_cpus, tracking_uri, run_id, checkpoint_every
    )
    return runtime.wait([ref], "the fine-tune task", {"CPU": fit_cpus(num_cpus, "fine-tune"), "GPU": num_gpus})[0]


def _fine_tune_remote(runtime: "RayRuntime", num_cpus: int, num_gpus: float, **options):
    """:func:`_fine_tune_task` as a Ray remote function of ``num_cpus`` (fitted to the largest node; the task's
    threads stay ``num_cpus``: the weights depend on them) and ``num_gpus`` (plus Ray ``options``), Ray started."""
    import ray

    runtime.start()
    return ray.remote(_fine_tune_task).options(
        num_cpus=fit_cpus(num_cpus, "fine-tune"), num_gpus=num_gpus or 0, runtime_env=TORCH_TASK_ENV, **options
    )


def fine_tune_many_on_ray(
    runtime: "RayRuntime",
    files: Sequence[str],
    models: Sequence[tuple[list, str]],
    model: "ModelSpec | Sequence[ModelSpec]",
    train: TrainSpec,
    source_col: str = "source_text",
    target_col: str = "target_text",
    num_cpus: int = 1,
    num_gpus: float = 0.0,
) -> list[FineTuneResult]:
    """Fine-tune one model per (pyarrow filters, out_uri) of ``models`` on the matching pairs of the Parquet
    ``files``, as concurrent Ray tasks of ``num_cpus``/``num_gpus`` each (Ray runs as many at once as the
    cluster holds); ``model`` is one spec for all, or one per model. Returns the results in ``models`` order;
    a task's error is raised here."""
    specs = [model] * len(models) if isinstance(model, ModelSpec) else list(model)
    task = _fine_tune_remote(runtime, num_cpus, num_gpus, max_retries=1)
    refs = [
        task.remote(list(files), source_col, target_col, out_uri, spec, train, num_cpus, None, None, 0, filters)
        for (filters, out_uri), spec in zip(models, specs)
    ]
    return runtime.wait(refs, "fine-tune tasks", {"CPU": fit_cpus(num_cpus, "fine-tune"), "GPU": num_gpus})
