"""A pretrained encoder fine-tuned for single-label classification, with an optional masked-LM head trained
alongside. With the head (``mlm_weight`` > 0) it is BoostAug's encoder surrogate (paper 3, sections 2.1 and
2.3): one model gives the three signals its filters use, class confidence, predicted label and
pseudo-perplexity. Without it, it is the suite's encoder text classifier (:func:`fit_and_evaluate`: BoostAug's
and genre transfer's ``eval.models: [encoder]``).

* Model: :class:`common.models.classifiers.encoder_surrogate.SurrogateModel`, an MLM model of ``name_or_path``
  plus a linear classification head on the mean-pooled last hidden state.
* Training (:func:`fit_surrogate`): loss = cross-entropy of the class + ``mlm_weight`` x masked-token
  cross-entropy on a copy with ``mlm_probability`` of the tokens masked; one epoch count per
  ``epochs``, model choice by validation accuracy (the cross-boosting validation fold).
* Pseudo-perplexity and classification of a saved model:
  :class:`common.models.classifiers.encoder_surrogate.EncoderScorer`.

Models are saved as ``<folder>/lm`` (``save_pretrained`` of the MLM model and its tokenizer),
``classifier.safetensors`` and ``labels.json``; loading never unpickles (safetensors only). An evaluation
classifier kept to ship (:func:`fit_and_evaluate`'s ``keep``) adds ``model.json``, the manifest of the registered
model's loader (:mod:`common.pyfunc.loader`, kind ``encoder``), whose classification is this module's.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Optional, Sequence

from common.models.classifier_config import EncoderConfig
from common.models.classifiers.encoder_surrogate import EncoderScorer, SurrogateModel
from common.models.classifiers.manifest import write_manifest
from common.models.classifiers.training_rows import Source, read_rows
from common.models.pretrained import encoder_checkpoint, masked_lm
from common.platform.storage import put_folder, worker_scratch
from common.pyfunc.encoder import device_name as _device

if TYPE_CHECKING:
    import torch

TEXT, LABEL = "text", "label"


def _mask_tokens(
    ids: "torch.Tensor", special: "torch.Tensor", probability: float, mask_id: int, generator: "torch.Generator"
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """A copy of ``ids`` with ``probability`` of the ordinary tokens (at least one per row) set to the mask
    token, and the boolean positions masked."""
    import torch

    ordinary = ~special
    chosen = (torch.rand(ids.shape, generator=generator) < probability) & ordinary
    # Rows where the draw chose nothing get their first ordinary token masked, so every row teaches the head.
    empty = ~chosen.any(1) & ordinary.any(1)
    if empty.any():
        first = ordinary.float().argmax(1)
        chosen[empty, first[empty]] = True
    masked = ids.clone()
    masked[chosen] = mask_id
    return masked, chosen


def _accuracy(
    surrogate: SurrogateModel,
    tokenizer,
    rows: Sequence[tuple[str, str]],
    index: dict[str, int],
    spec: EncoderConfig,
    device: str,
) -> float:
    import torch

    surrogate.train(False)
    correct = 0
    with torch.inference_mode():
        for start in range(0, len(rows), spec.batch_size * 4):
            chunk = rows[start : start + spec.batch_size * 4]
            enc = tokenizer(
                [t or "" for t, _ in chunk],
                padding=True,
                truncation=True,
                max_length=spec.max_length,
                return_tensors="pt",
            ).to(device)
            pred = (
                surrogate.class_logits(
                    surrogate.hidden(enc["input_ids"], enc["attention_mask"]), enc["attention_mask"]
                )
                .argmax(-1)
                .tolist()
            )
            correct += sum(p == index.get(label, -1) for p, (_, label) in zip(pred, chunk))
    return correct / len(rows)


def _save(
    surrogate: SurrogateModel, tokenizer, labels: list[str], spec: EncoderConfig, figures: dict, folder: str
) -> None:
    from safetensors.torch import save_file

    surrogate.lm.save_pretrained(os.path.join(folder, "lm"))
    tokenizer.save_pretrained(os.path.join(folder, "lm"))
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in surrogate.classifier.state_dict().items()},
        os.path.join(folder, "classifier.safetensors"),
    )
    _save_meta(labels, spec, figures, folder)


def _save_meta(
    labels: list[str], spec: EncoderConfig, figures: dict, folder: str, validation_perplexities: Sequence[float] = ()
) -> None:
    with open(os.path.join(folder, "labels.json"), "w", encoding="utf-8") as fh:
        json.dump(
            {
                "labels": labels,
                "spec": asdict(spec),
                "figures": figures,
                "validation_perplexities": sorted(validation_perplexities),
            },
            fh,
        )


def fit_surrogate(
    train: Sequence[Source], validation: Sequence[Source], spec: EncoderConfig, seed: int, out_dir: str
) -> dict[str, Any]:
    """Fine-tune the encoder on ``train`` rows (text, label) with the joint classification + MLM loss; after
    each epoch measure accuracy on ``validation`` and keep the best epoch (ties: the earlier; without
    validation rows, the last). Saves the chosen model under ``out_dir`` (local path or URI), with the
    pseudo-perplexities of the validation texts (the calibration of ``filter.perplexity_quantile``) when the
    MLM head was trained.

    Returns {rows, epoch, val_accuracy, seconds, device, final_loss, uri, val_perplexity_median};
    raises ValueError for no rows.
    """
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from common.models.optim import LinearWarmupAdamW

    rows, held_out = read_rows(train, TEXT, LABEL), read_rows(validation, TEXT, LABEL)
    if not rows:
        raise ValueError(f"no training rows for the encoder surrogate {out_dir}")
    torch.set_num_threads(spec.num_cpus)
    torch.manual_seed(seed)
    device = _device()
    start = time.perf_counter()
    labels = sorted({label for _, label in rows})
    index = {label: i for i, label in enumerate(labels)}
    path = encoder_checkpoint(spec.name_or_path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    surrogate = SurrogateModel(masked_lm(path, dtype=torch.float32), len(labels)).to(device)
    steps_per_epoch = math.ceil(len(rows) / spec.batch_size)
    optimizer = LinearWarmupAdamW(
        surrogate.parameters(),
        spec.learning_rate,
        int(spec.warmup_ratio * steps_per_epoch * spec.epochs),
        steps_per_epoch * spec.epochs,
    )
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    best: Optional[dict[str, Any]] = None
    loss_value = float("nan")
    with worker_scratch("encoder-classifier-") as tmp:
        for epoch in range(1, spec.epochs + 1):
            surrogate.train(True)
            order = rng.permutation(len(rows))
            for s in range(0, len(rows), spec.batch_size):
                batch = [rows[i] for i in order[s : s + spec.batch_size]]
                enc = tokenizer(
                    [t or "" for t, _ in batch],
                    padding=True,
                    truncation=True,
                    max_length=spec.max_length,
                    return_tensors="pt",
                    return_special_tokens_mask=True,
                )
                ids, mask = enc["input_ids"], enc["attention_mask"]
                target = torch.tensor([index[label] for _, label in batch])
                loss = torch.nn.functional.cross_entropy(
                    surrogate.class_logits(surrogate.hidden(ids.to(device), mask.to(device)), mask.to(device)),
                    target.to(device),
                )
                if spec.mlm_weight > 0:
                    special = enc["special_tokens_mask"].bool() | (mask == 0)
                    masked, chosen = _mask_tokens(
                        ids, special, spec.mlm_probability, tokenizer.mask_token_id, generator
                    )
                    hidden = surrogate.hidden(masked.to(device), mask.to(device))
                    chosen = chosen.to(device)
                    loss = loss + spec.mlm_weight * torch.nn.functional.cross_entropy(
                        surrogate.token_logits(hidden[chosen]), ids.to(device)[chosen]
                    )
                loss_value = optimizer.step(loss)
            accuracy = _accuracy(surrogate, tokenizer, held_out, index, spec, device) if held_out else float("nan")
            # Without validation rows the last epoch is the model: only it is written (each write is the whole
            # encoder, 90 MB for MiniLM).
            chosen = (best is None or accuracy > best["val_accuracy"]) if held_out else epoch == spec.epochs
            if chosen:
                best = {"epoch": epoch, "val_accuracy": accuracy, "final_loss": loss_value}
                _save(surrogate, tokenizer, labels, spec, best, tmp)
        assert best is not None
        perplexities: list[float] = []
        if spec.mlm_weight > 0 and held_out:
            scorer = EncoderScorer(tmp, device)
            perplexities = [p for p in scorer.pseudo_perplexity([t for t, _ in held_out]) if p is not None]
            _save_meta(labels, spec, best, tmp, perplexities)
        put_folder(tmp, out_dir)
    median = float(np.median(perplexities)) if perplexities else float("nan")
    return {
        **best,
        "rows": len(rows),
        "seconds": time.perf_counter() - start,
        "device": device,
        "uri": out_dir,
        "val_perplexity_median": median,
    }


def manifest(folder: str) -> dict[str, Any]:
    """The registered-model loader's manifest (:mod:`common.pyfunc.loader`, kind ``encoder``) of the classifier
    saved in ``folder`` (a local path)."""
    meta = json.loads(open(os.path.join(folder, "labels.json"), encoding="utf-8").read())
    return {
        "kind": "encoder",
        "labels": meta["labels"],
        "max_length": meta["spec"]["max_length"],
        "max_batch_tokens": meta["spec"]["max_batch_tokens"],
    }


def fit_and_evaluate(
    train: Sequence[Source],
    test: Sequence[Source],
    spec: EncoderConfig,
    seed: int,
    keep: Optional[str] = None,
    tag: Optional[dict[str, Any]] = None,
) -> Any:
    """Fine-tune an encoder classifier (``spec``) on ``train`` rows and evaluate it on ``test`` rows; it is saved in
    ``keep`` (a folder URI, with the loader's ``model.json``) when given, else discarded. Returns {rows, seconds,
    accuracy, macro_f1, n_test}; with ``tag``, (those figures, the test rows' predictions:
    :func:`~common.models.classifiers.label_metrics.scored`)."""
    with worker_scratch("encoder-eval-") as tmp:
        figures = fit_surrogate(train, [], spec, seed, tmp)
        found = evaluate_saved(tmp, test, tag)
        if keep:  # the manifest inside the folder before it is copied: its completion mark covers both
            write_manifest(tmp, manifest(tmp))
            put_folder(tmp, keep)
    kept = {k: figures[k] for k in ("rows", "seconds")}
    return kept | found if tag is None else (kept | found[0], found[1])


def evaluate_saved(model_dir: str, test: Sequence[Source], tag: Optional[dict[str, Any]] = None) -> Any:
    """{accuracy, macro_f1, n_test} of a saved encoder classifier (``model_dir``, a local path or URI) on ``test``
    rows; with ``tag``, (those figures, the predictions: :func:`~common.models.classifiers.label_metrics.scored`)."""
    from common.models.classifiers.label_metrics import scored

    rows = read_rows(test, TEXT, LABEL)
    predicted = [label for label, _ in EncoderScorer(model_dir).classify([t for t, _ in rows])]
    return scored(rows, predicted, tag)
