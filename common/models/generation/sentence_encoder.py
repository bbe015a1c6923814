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
from typing import Optional, Sequence

import numpy as np

from common.platform.storage import cache_root, read_json

TRANSFORMER, POOLING, NORMALIZE = (f"sentence_transformers.models.{name}"
                                   for name in ("Transformer", "Pooling", "Normalize"))


def ct2_reason(path: str) -> Optional[str]:
    """Why the sentence-transformers model folder ``path`` cannot run on CTranslate2 here (None when it can):
    the package does not import, or the model is not Transformer -> mean Pooling (-> Normalize) with a
    ``tokenizer.json``."""
    from common.models.generation.ct2 import available

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


def converted_folder(path: str, quantization: str) -> str:
    """The CTranslate2 conversion of the encoder in ``path``, made once per model file and quantization in
    the suite's cache (:func:`~common.platform.storage.cache_root`: the packaged model lives in site-packages,
    which need not be writable), keyed by the folder, the weights' size and time, so new weights convert anew."""
    from common.models.generation.ct2 import convert

    weights = next((os.path.join(path, name) for name in ("model.safetensors", "pytorch_model.bin")
                    if os.path.isfile(os.path.join(path, name))), path)
    stat = os.stat(weights)
    key = hashlib.sha256(f"{os.path.realpath(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    name = os.path.basename(os.path.normpath(path)) or "encoder"
    target = os.path.join(cache_root(), "ct2-encoders", f"{name}-{key}-{quantization}")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return convert(path, quantization, target)


class CT2SentenceEncoder:
    """A sentence-transformers mean-pooling model on CTranslate2; ``device`` None: GPU when CTranslate2 sees
    one. ``compute_type`` auto: float32 on CPU, float16 on GPU. Threads: ``threads`` when given, else
    ``OMP_NUM_THREADS`` (Ray sets it to a task's CPUs), else CTranslate2's default."""

    def __init__(self, path: str, device: Optional[str] = None, compute_type: str = "auto",
                 threads: Optional[int] = None):
        import ctranslate2
        from tokenizers import Tokenizer

        from common.models.generation.ct2 import stored_type

        if device is None:
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        # float32 on CPU: 1.8x sentence-transformers' speed with the same scores, where int8 (2.4x) moved 1%
        # of the CGA filter's keep decisions at T = 0.7 on WDC title pairs (benchmarks/scorer_throughput.py).
        kind = compute_type if compute_type != "auto" else "float16" if device == "cuda" else "float32"
        folder = converted_folder(path, stored_type(kind, device))
        self.device, self._ct2 = device, ctranslate2
        self.encoder = ctranslate2.Encoder(folder, device=device, compute_type=kind,
                                           intra_threads=threads or int(os.environ.get("OMP_NUM_THREADS") or 0))
        settings = read_json(os.path.join(path, "sentence_bert_config.json"))
        self.lower_case = bool(settings.get("do_lower_case"))
        self.tokenizer = Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(settings.get("max_seq_length") or 512))

    def encode(self, texts: Sequence[str], batch_size: int = 256, normalize_embeddings: bool = True,
               convert_to_numpy: bool = True) -> np.ndarray:
        """(len(texts), dim) float32 mean-pooled embeddings, unit length unless ``normalize_embeddings`` is
        False. Texts are encoded in batches of similar length, as sentence-transformers does."""
        texts = [t.lower() if self.lower_case else t for t in texts]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: Optional[np.ndarray] = None
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            tokens = [e.tokens for e in self.tokenizer.encode_batch([texts[i] for i in rows])]
            hidden = self.encoder.forward_batch(tokens).last_hidden_state
            if self.device == "cuda":
                hidden = hidden.to_device(self._ct2.Device.cpu)
            hidden = np.asarray(hidden).astype(np.float32, copy=False)
            mask = np.zeros(hidden.shape[:2], dtype=np.float32)
            for j, t in enumerate(tokens):
                mask[j, :len(t)] = 1.0  # padding positions stay out of the mean
            pooled = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)
            if out is None:
                out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
        if out is None:
            return np.zeros((0, 0), dtype=np.float32)
        if normalize_embeddings:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out
