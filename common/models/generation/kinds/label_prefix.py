"""Label-specific prefixes (LS-PT, paper 4): one learned block of ``length`` vectors per label, the encoder's
whole input for a label set.

A label set's encoder input is its labels' blocks concatenated in vocabulary order, so each label is
represented by its own parameters whatever its co-labels are (the disentanglement the paper's LS-PT
relies on). The paper prefix-tunes a frozen GPT2: with a causal LM (:mod:`common.models.generation.kinds.causal_lm`)
the blocks stand, left-padded, ahead of the text the LM writes, as there; with a seq2seq model they are the encoder's
input. Either way the model trains with the table (LoRA adapters on a causal LM). Saved beside the model as
``label_prefix.safetensors`` and ``label_prefix.json``; a model folder holding them is generated from label sets
(:class:`common.models.generation.on_ray.pool.T5Generator`).
"""

from __future__ import annotations

import json
import os
from typing import Sequence

import torch

from common.models.generation.kinds.prefix_files import META_FILE, PREFIX_FILE, has_prefix

__all__ = ["META_FILE", "PREFIX_FILE", "LabelPrefix", "UnknownLabelError", "has_prefix"]


class UnknownLabelError(ValueError):
    """A label set names a label the prefix table was not trained with."""


class LabelPrefix(torch.nn.Module):
    """``table[label]``: a (length, d_model) block per label; :meth:`encoder_inputs` turns label-set strings
    (label names joined by ``separator``) into ``inputs_embeds`` and ``attention_mask``."""

    def __init__(
        self,
        labels: Sequence[str],
        length: int,
        d_model: int,
        separator: str = ",",
        init: "torch.Tensor | None" = None,
    ):
        super().__init__()
        self.labels = list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}
        self.length = length
        self.separator = separator
        self.table = torch.nn.Parameter(
            init.clone() if init is not None else torch.randn(len(self.labels), length, d_model) * 0.02
        )

    @classmethod
    def for_model(
        cls, labels: Sequence[str], length: int, net, tokenizer, separator: str = ",", seed: int = 0
    ) -> "LabelPrefix":
        """A prefix table for ``net``: each label's block starts as the mean input embedding of its name's
        tokens, repeated ``length`` times, plus a little seeded noise (so the copies can differ)."""
        embeddings = net.get_input_embeddings().weight.detach()
        generator = torch.Generator().manual_seed(seed)
        blocks = []
        for label in labels:
            ids = tokenizer(label.replace("_", " "), add_special_tokens=False).input_ids or [tokenizer.unk_token_id]
            mean = embeddings[ids].float().mean(dim=0)
            noise = torch.randn(length, mean.shape[0], generator=generator) * 0.1 * float(embeddings.float().std())
            blocks.append(mean.expand(length, -1) + noise)
        return cls(labels, length, embeddings.shape[1], separator, torch.stack(blocks))

    def parse(self, text: str) -> list[int]:
        """The label indices of one label-set string, sorted and distinct; raises UnknownLabelError."""
        names = [name.strip() for name in text.split(self.separator) if name.strip()]
        unknown = [name for name in names if name not in self.index]
        if unknown:
            raise UnknownLabelError(f"unknown label {unknown[0]!r} (trained with: {', '.join(self.labels)})")
        if not names:
            raise UnknownLabelError("empty label set")
        return sorted({self.index[name] for name in names})

    def block(self, label: str) -> "torch.Tensor":
        """The (length, d_model) block of one label."""
        return self.table[self.index[label]]

    def encoder_inputs(self, texts: Sequence[str], device: str = "cpu", left: bool = False) -> dict:
        """``inputs_embeds`` (batch, max labels x length, d_model), zero-padded on the right (``left``: on the
        left, for a causal LM whose text follows the blocks), and its ``attention_mask``."""
        sets = [self.parse(t) for t in texts]
        width = max(len(s) for s in sets) * self.length
        d_model = self.table.shape[-1]
        embeds, masks = [], []
        for s in sets:
            blocks = self.table[s].reshape(-1, d_model)
            pad = width - blocks.shape[0]
            parts, mask = [blocks, blocks.new_zeros(pad, d_model)], [1] * blocks.shape[0] + [0] * pad
            embeds.append(torch.cat(parts[::-1] if left else parts))
            masks.append(torch.tensor(mask[::-1] if left else mask))
        return {"inputs_embeds": torch.stack(embeds).to(device), "attention_mask": torch.stack(masks).to(device)}

    def save(self, folder: str) -> None:
        """Write the table and its labels into ``folder`` (beside ``save_pretrained``'s files)."""
        from safetensors.torch import save_file

        save_file({"table": self.table.detach().cpu().contiguous()}, os.path.join(folder, PREFIX_FILE))
        with open(os.path.join(folder, META_FILE), "w", encoding="utf-8") as fh:
            json.dump({"labels": self.labels, "length": self.length, "separator": self.separator}, fh)

    @classmethod
    def load(cls, folder: str, dtype: "torch.dtype" = torch.float32) -> "LabelPrefix":
        """The prefix table saved in ``folder``."""
        with open(os.path.join(folder, META_FILE), encoding="utf-8") as fh:
            meta = json.load(fh)
        from safetensors.torch import load_file

        table = load_file(os.path.join(folder, PREFIX_FILE))["table"]  # safetensors: loading runs no pickle
        return cls(meta["labels"], meta["length"], table.shape[-1], meta["separator"], table.to(dtype))
