"""Sentence embeddings on CTranslate2: the MiniLM scorer's fast path.

A sentence-transformers model laid out as Transformer -> mean Pooling (-> Normalize), as all-MiniLM-L6-v2
is, has its BERT encoder converted once by CTranslate2 (float32 on CPU, float16 on GPU) into a cache folder and
run by ``ctranslate2.Encoder``; texts are tokenized by the ``tokenizers`` library from the model's
``tokenizer.json``, truncated at its ``max_seq_length`` as sentence-transformers does, and mean-pooled over
their tokens. :class:`CT2SentenceEncoder` answers ``encode`` as ``SentenceTransformer.encode`` does, so the
scorer takes either; a model of any other layout is left to sentence-transformers (:func:`ct2_reason`).
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

import numpy as np

from common.platform.storage import cache_root, read_json

# Tokens (rows x longest) per encoder batch on CPU. MiniLM int8 on 2 cores, Brown windows of 20/40/80/160 words:
# the encoder alone runs 407/204/100/47 texts a second at a budget of 512 (1024: the same; 4096: 2/3 of it), and
# 167/76/35/18 in batches of 512 rows, whose activations leave the cache (benchmarks/classifiers/candidate_embedding.py
# measures the pipeline's pool). A GPU wants large batches: there the default is no limit.
CPU_BATCH_TOKENS = 512

TRANSFORMER, POOLING, NORMALIZE = (
    f"sentence_transformers.models.{name}" for name in ("Transformer", "Pooling", "Normalize")
)


def ct2_reason(path: str) -> Optional[str]:
    """Why the sentence-transformers model folder ``path`` cannot run on CTranslate2 here (None when it can):
    the package does not import, or the model is not Transformer -> mean Pooling (-> Normalize) with a
    ``tokenizer.json``."""
    from common.models.generation.engines.ct2_conversion import available

    if not available():
        return "the ctranslate2 package does not import here"
    modules = read_json(os.path.join(path, "modules.json"))
    kinds = [m.get("type") for m in modules] if isinstance(modules, list) else []
    if kinds not in ([TRANSFORMER, POOLING], [TRANSFORMER, POOLING, NORMALIZE]) or modules[0].get("path"):
        return f"its modules are {kinds or 'not listed'}, not Transformer -> Pooling (-> Normalize)"
    pooling = read_json(os.path.join(path, modules[1]["path"], "config.json"))
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    if modes != {"pooling_mode_mean_tokens"}:
        return f"its pooling is {sorted(modes)}, not mean tokens"
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        return "it has no tokenizer.json"
    return None


def converted_folder(path: str, quantization: str, layers: Optional[int] = None) -> str:
    """The CTranslate2 conversion of the encoder in ``path`` (its first ``layers`` layers; None: all), made once
    per model file, quantization and layer count in the suite's cache
    (:func:`~common.platform.storage.cache_root`: the packaged model lives in site-packages, which need not be
    writable), keyed by the folder, the weights' size and time, so new weights convert anew."""
    from common.models.generation.engines.ct2_conversion import convert

    weights = next(
        (
            os.path.join(path, name)
            for name in ("model.safetensors", "pytorch_model.bin")
            if os.path.isfile(os.path.join(path, name))
        ),
        path,
    )
    stat = os.stat(weights)
    key = hashlib.sha256(f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    name = os.path.basename(os.path.normpath(path)) or "encoder"
    depth = f"-L{layers}" if layers else ""
    target = os.path.join(cache_root(), "ct2-encoders", f"{name}-{key}{depth}-{quantization}")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return convert(path, quantization, target, layers)


class CT2SentenceEncoder:
    """A sentence-transformers mean-pooling model on CTranslate2; ``device`` None: GPU when CTranslate2 sees
    one. ``compute_type`` auto: float32 on CPU, float16 on GPU. Threads: ``threads`` when given, else
    ``OMP_NUM_THREADS`` (Ray sets it to a task's CPUs), else CTranslate2's default; on CPU, n > 1 threads encode
    n batches at once, one thread each (``parallel`` False: one batch at a time on n threads). Texts are truncated
    at ``max_length`` word pieces (None: the model's ``max_seq_length``). ``layers``: embeddings are the mean of
    the encoder's ``layers``-th layer's states, the later layers dropped (None: all layers)."""

    def __init__(
        self,
        path: str,
        device: Optional[str] = None,
        compute_type: str = "auto",
        threads: Optional[int] = None,
        max_length: Optional[int] = None,
        parallel: bool = True,
        layers: Optional[int] = None,
    ):
        import ctranslate2
        from tokenizers import Tokenizer

        from common.models.generation.engines.ct2_conversion import stored_type

        if device is None:
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        # float32 on CPU: 1.8x sentence-transformers' speed with the same scores, where int8 (2.4x) moved 1%
        # of the CGA filter's keep decisions at T = 0.7 on WDC title pairs
        # (benchmarks/generation/scorer_throughput.py).
        kind = compute_type if compute_type != "auto" else "float16" if device == "cuda" else "float32"
        folder = converted_folder(path, stored_type(kind, device), layers)
        self.device, self._ct2 = device, ctranslate2
        n = threads or int(os.environ.get("OMP_NUM_THREADS") or 0)
        # On CPU, n batches at once on one thread each (CTranslate2's inter_threads, fed by n Python threads):
        # 1.5-1.8x the texts a second of one batch at a time on n threads (2 cores, Brown windows of 20-80 words:
        # 655/328/147 against 357/212/92), the same embeddings to the bit; a lone batch cannot keep both threads
        # busy between the per-batch Python work (tokens in, pooling out) and its small matrix products.
        self.workers = n if parallel and device == "cpu" and n > 1 else 1
        self.encoder = ctranslate2.Encoder(
            folder,
            device=device,
            compute_type=kind,
            intra_threads=1 if self.workers > 1 else n,
            inter_threads=self.workers,
        )
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="ct2-encode") if self.workers > 1 else None
        settings = read_json(os.path.join(path, "sentence_bert_config.json"))
        self.lower_case = bool(settings.get("do_lower_case"))
        self.tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(max_length or settings.get("max_seq_length") or 512))

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int = 256,
        normalize_embeddings: bool = True,
        convert_to_numpy: bool = True,
        max_batch_tokens: Optional[int] = None,
    ) -> np.ndarray:
        """(len(texts), dim) float32 mean-pooled embeddings, unit length unless ``normalize_embeddings`` is
        False. Texts are sorted by token count and encoded in batches of at most ``batch_size`` rows and
        ``max_batch_tokens`` tokens (rows x the batch's longest text; None: :data:`CPU_BATCH_TOKENS` on CPU, no
        limit on GPU; 0: no limit), so a batch carries little padding and, on CPU, stays in cache."""
        texts = [t.lower() if self.lower_case else t for t in texts]
        tokens = [e.tokens for e in self.tokenizer.encode_batch(texts)] if texts else []
        if max_batch_tokens is None:
            max_batch_tokens = CPU_BATCH_TOKENS if self.device == "cpu" else 0
        batches = token_batches([len(t) for t in tokens], batch_size, max_batch_tokens)
        if not batches:
            return np.zeros((0, 0), dtype=np.float32)
        pooled = (self._pool.map if self._pool else map)(lambda rows: self._pooled([tokens[i] for i in rows]), batches)
        out: Optional[np.ndarray] = None
        for rows, vectors in zip(batches, pooled):
            if out is None:
                out = np.zeros((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = vectors
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def _pooled(self, batch: list[list[str]]) -> np.ndarray:
        """(len(batch), dim) float32 mean of each token list's last hidden states (one encoder call)."""
        hidden = self.encoder.forward_batch(batch).last_hidden_state
        if self.device == "cuda":
            hidden = hidden.to_device(self._ct2.Device.cpu)
        return mean_pool(np.asarray(hidden).astype(np.float32, copy=False), [len(t) for t in batch])


def mean_pool(hidden: np.ndarray, lengths: Sequence[int]) -> np.ndarray:
    """(rows, dim) mean of ``hidden`` (rows, width, dim) over each row's first ``lengths[row]`` positions: the
    padding after them stays out of the mean."""
    mask = np.zeros(hidden.shape[:2], dtype=np.float32)
    for j, n in enumerate(lengths):
        mask[j, :n] = 1.0
    return (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)


def token_batches(lengths: Sequence[int], max_rows: int, max_tokens: int = 0) -> list[list[int]]:
    """Indexes of ``lengths`` (token counts) in ascending length, cut into batches of at most ``max_rows`` rows
    whose rows x longest length stays within ``max_tokens`` (0: no limit; a longer text is a batch alone)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    batch: list[int] = []
    for i in order:  # ascending, so lengths[i] is the longest of the batch it joins
        if batch and (len(batch) >= max_rows or max_tokens and (len(batch) + 1) * lengths[i] > max_tokens):
            batches.append(batch)
            batch = []
        batch.append(i)
    return batches + [batch] if batch else batches
