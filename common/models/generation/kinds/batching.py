"""Batches for fine-tuning: the (source, target) pairs read from Parquet, texts tokenized once, right-padded
tensors, and each epoch's batches, at random or grouped by length (as transformers' ``group_by_length`` and
fairseq's length-sorted batches), so that a batch pads to about its own length instead of its longest random
member's."""

from __future__ import annotations

import random
from typing import Optional, Sequence


def token_ids(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """Each text's token ids, truncated to ``max_length``, special tokens added: tokenized once, before the
    epochs, in one batched call of the fast tokenizer."""
    return tokenizer(texts, max_length=max_length, truncation=True).input_ids


def padded(rows: list[list[int]], pad: int):
    """(ids, attention mask): ``rows`` right-padded with ``pad`` to the longest, as (batch, length) tensors."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return ids, mask


def epoch_batches(order: list[int], lengths: Sequence, batch_size: int, group_by_length: bool) -> list[list[int]]:
    """One epoch's batches of example indices: ``order`` (all indices, kept from epoch to epoch) is shuffled
    in place with the seeded global ``random`` and cut into batches; with ``group_by_length``, it is cut
    into mega-batches of 50 batches (transformers' factor), each sorted by ``lengths`` (a sortable length key
    per example) and cut into batches, and the batches are shuffled, so that length does not follow the
    step. Every example is in exactly one batch."""
    random.shuffle(order)
    if not group_by_length:
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    mega = batch_size * 50
    batches = []
    for m in range(0, len(order), mega):
        group = sorted(order[m : m + mega], key=lengths.__getitem__)
        batches.extend(group[i : i + batch_size] for i in range(0, len(group), batch_size))
    random.shuffle(batches)
    return batches


def read_pairs(
    files: Sequence[str], source_col: str, target_col: str, filters: Optional[list] = None
) -> list[tuple[str, str]]:
    """(source, target) pairs from Parquet ``files`` (the rows matching pyarrow ``filters``, when given),
    sorted (file row order follows the writer's partitioning; the model must not); rows with an empty side skipped."""
    from common.platform.storage import read_parquet_files

    table = read_parquet_files(files, [source_col, target_col], filters)
    return sorted(
        (s, t)
        for s, t in zip(table.column(source_col).to_pylist(), table.column(target_col).to_pylist())
        if s and t and s.strip() and t.strip()
    )
