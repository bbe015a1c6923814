"""Encoder classifier inference: a transformer encoder, the mean of its last hidden state over a text's tokens, and
a linear head; softmax over the head's logits for one label per text, a sigmoid per label for label sets.

The suite's encoder classifiers (:mod:`common.models.classifiers.encoder_classifier`, BoostAug's and genre's;
:mod:`common.models.classifiers.multilabel_encoder`, compositional's) and a registered model of them score with
these functions, so the two give the same predictions. Texts run in batches of ``max_batch_tokens //
max_length`` rows, each cut at ``max_length`` word pieces.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

if TYPE_CHECKING:
    import torch


def device_name() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def mean_pooled(hidden: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
    """The mean of ``hidden`` (batch, tokens, dim) over each row's unmasked tokens (``mask`` 1)."""
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)


def batch_logits(
    tokenizer,
    logits: Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"],
    texts: Sequence[str],
    max_length: int,
    max_batch_tokens: int,
    device: str,
) -> Iterator["torch.Tensor"]:
    """``logits(input_ids, attention_mask)`` as float32 for each batch of ``texts`` (None as the empty text), in
    order, under ``torch.inference_mode``: batches of ``max(1, max_batch_tokens // max_length)`` texts."""
    import torch

    step = max(1, max_batch_tokens // max_length)
    with torch.inference_mode():
        for s in range(0, len(texts), step):
            enc = tokenizer(
                [t or "" for t in texts[s : s + step]],
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            ).to(device)
            yield logits(enc["input_ids"], enc["attention_mask"]).float()


def top_labels(labels: Sequence[str], batches: Iterator["torch.Tensor"]) -> list[tuple[str, float]]:
    """(most probable label, its softmax probability) per row of the logit ``batches``."""
    out: list[tuple[str, float]] = []
    for logits in batches:
        conf, idx = logits.softmax(-1).max(-1)
        out += [(labels[i], float(c)) for i, c in zip(idx.tolist(), conf.tolist())]
    return out


def label_probabilities(labels: Sequence[str], batches: Iterator["torch.Tensor"]) -> list[dict[str, float]]:
    """Each row's probability per label (independent sigmoids) of the logit ``batches``."""
    out: list[dict[str, float]] = []
    for logits in batches:
        out += [dict(zip(labels, row)) for row in logits.sigmoid().tolist()]
    return out


def linear_head(path: str, device: str) -> "torch.nn.Linear":
    """The linear layer saved (safetensors: ``weight`` and ``bias``) at ``path``, in inference mode on ``device``."""
    import torch
    from safetensors.torch import load_file

    state = load_file(path)
    out_features, in_features = state["weight"].shape
    head = torch.nn.Linear(in_features, out_features)
    head.load_state_dict(state)
    return head.to(device).eval()


class _PooledHead:
    """An encoder checkpoint and its tokenizer (``folder``/``subfolder``), a linear head (``folder``/``head_file``)
    over its mean-pooled last hidden state, and the manifest's ``labels``, ``max_length`` and ``max_batch_tokens``;
    :meth:`batches` gives the head's logits for texts, batch by batch."""

    def __init__(
        self,
        folder: str,
        manifest: dict[str, Any],
        device: Optional[str],
        subfolder: str,
        head_file: str,
        masked_lm: bool,
    ):
        from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

        self.device = device or device_name()
        self.labels = list(manifest["labels"])
        self.max_length, self.max_batch_tokens = int(manifest["max_length"]), int(manifest["max_batch_tokens"])
        path = os.path.join(folder, subfolder)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        # A masked-LM checkpoint's encoder runs without its MLM head (which the classifier never uses).
        encoder = (
            AutoModelForMaskedLM.from_pretrained(path, use_safetensors=True).base_model
            if masked_lm
            else AutoModel.from_pretrained(path, use_safetensors=True)
        )
        self.encoder = encoder.to(self.device).eval()
        self.head = linear_head(os.path.join(folder, head_file), self.device)

    def logits(self, ids: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
        return self.head(mean_pooled(self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state, mask))

    def batches(self, texts: Sequence[str]) -> Iterator["torch.Tensor"]:
        return batch_logits(self.tokenizer, self.logits, texts, self.max_length, self.max_batch_tokens, self.device)


class EncoderClassifier(_PooledHead):
    """A single-label encoder classifier folder (the suite's :func:`~common.models.classifiers.encoder_classifier.
    fit_surrogate` layout): ``lm/`` (a masked-LM checkpoint and its tokenizer; the encoder under its MLM head
    runs), ``classifier.safetensors``; the manifest names ``labels``, ``max_length`` and ``max_batch_tokens``.
    ``classify`` gives label and confidence per text."""

    def __init__(self, folder: str, manifest: dict[str, Any], device: Optional[str] = None):
        super().__init__(folder, manifest, device, "lm", "classifier.safetensors", masked_lm=True)

    def classify(self, texts: Sequence[str]) -> list[tuple[str, float]]:
        """(label, confidence) per text."""
        return top_labels(self.labels, self.batches(texts))


class EncoderMultiLabelClassifier(_PooledHead):
    """A multi-label encoder classifier folder (:meth:`common.models.classifiers.multilabel_encoder.
    EncoderMultiLabelModel.save`): ``encoder/`` (the encoder and its tokenizer), ``head.safetensors``; the manifest
    names ``labels``, ``threshold``, ``max_length`` and ``max_batch_tokens``. ``probabilities`` gives each label's
    sigmoid per text."""

    def __init__(self, folder: str, manifest: dict[str, Any], device: Optional[str] = None):
        super().__init__(folder, manifest, device, "encoder", "head.safetensors", masked_lm=False)
        self.threshold = float(manifest["threshold"])

    def probabilities(self, texts: Sequence[str]) -> list[dict[str, float]]:
        """Each text's probability per label."""
        return label_probabilities(self.labels, self.batches(texts))
