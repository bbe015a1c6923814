"""Top-k/top-p sampling whose draws depend on each row alone: the Gumbel-max trick with counter-based noise.

transformers' sampling draws every row of a batch from one torch generator, so a row's samples depend on
which rows share its batch and in what order: on the input's physical layout (how many files, which Ray
Data blocks met in one batch), not only on its content and the seed. Here each sequence has a key (the
seed, its source id and its sample index), and the noise of token ``t`` at decoding step ``s`` is a hash of
(key, s, t): a row draws the same tokens in any batch. Sampling stays exact: after the top-k and top-p
filters, ``argmax(logit + Gumbel noise)`` is a draw from the filtered softmax. The draw is made a one-hot
score and transformers' greedy search takes it, so the rest of ``generate`` (end tokens, padding of
finished rows, the model's own logits processors, applied first) is unchanged.
"""

from __future__ import annotations

import hashlib

from transformers import LogitsProcessor

_MASK32 = 0xFFFF_FFFF


def row_keys(seed: int, ids: list[str], n_samples: int) -> list[tuple[int, int]]:
    """Two 32-bit halves of a key per (id, sample index), in ``generate``'s row order: id 0's samples
    0..n-1, then id 1's."""
    keys = []
    for source_id in ids:
        for k in range(n_samples):
            digest = hashlib.sha256(f"{seed}\x1f{source_id}\x1f{k}".encode()).digest()
            keys.append((int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:8], "little")))
    return keys


def _mul32(x, c: int):
    """``x * c mod 2**32`` for int64 tensors ``x`` in [0, 2**32): multiplied in 16-bit halves of ``c`` so no
    product leaves int64's range (signed overflow is not something to lean on, on CPU or GPU)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + ((x * hi) & 0xFFFF) * 65536) & _MASK32


def _hash32(x):
    """A 32-bit integer finaliser (Wellons' lowbias32) over int64 tensors holding values in [0, 2**32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def gumbel_noise(keys, step: int, tokens):
    """Gumbel(0, 1) noise, float64, shaped like ``tokens`` (rows x candidates, int64 token ids), a pure
    function of each row's key (``keys``: rows x 2 int64), ``step`` and the token id."""
    import torch

    h = _hash32(tokens & _MASK32)
    h = _hash32(h ^ (step & _MASK32))
    h = _hash32(h ^ keys[:, :1])
    h = _hash32(h ^ keys[:, 1:2])
    u = (h.to(torch.float64) + 0.5) / 2.0**32  # in (0, 1): both logs stay finite
    return -torch.log(-torch.log(u))


class RowKeyedSampler(LogitsProcessor):
    """A transformers logits processor for greedy search that makes it top-k/top-p sampling with per-row
    noise (:func:`gumbel_noise`). ``keys`` (rows x 2 int64 tensor) follows the batch's row order."""

    def __init__(self, keys, top_k: int, top_p: float, offset: int = 0):
        from transformers import TopKLogitsWarper, TopPLogitsWarper

        self.keys = keys
        # The decoding step is the sequence length less ``offset``: a causal LM's rows hold the (left-padded)
        # prompt first, whose width depends on the batch; the step must not.
        self.offset = offset
        self.top_k = top_k
        self.warpers = [TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)] if top_p < 1 else [TopKLogitsWarper(top_k)]

    def __call__(self, input_ids, scores):
        import torch

        for warper in self.warpers:
            scores = warper(input_ids, scores)
        # Only the top-k survive the filters: noise for those candidates, not the whole vocabulary.
        values, tokens = scores.float().topk(min(self.top_k, scores.shape[-1]), dim=-1)
        noisy = values.to(torch.float64) + gumbel_noise(self.keys, input_ids.shape[1] - self.offset, tokens)
        choice = tokens.gather(1, noisy.argmax(dim=1, keepdim=True))
        return torch.full_like(scores, float("-inf")).scatter_(1, choice, 0.0)
