"""MiniLM's encoder on CTranslate2 int8 against ONNX Runtime int8, alone (no Ray), in texts per second against
text length, with the same batches (texts sorted by token count, 512 tokens a batch) and the same threads.

The ONNX model is all-MiniLM-L6-v2's BERT exported by ``torch.onnx`` (dynamic batch and sequence axes) and
quantized by ``onnxruntime.quantization.quantize_dynamic`` (int8 MatMul weights per channel, activations
quantized per batch: what ONNX Runtime offers for CPU BERT without calibration data); ONNX Runtime float32 is
shown too. All mean-pool the last hidden states over the attention mask and normalize. The texts are Brown
windows of 20, 40, 80 and 160 words (as ``benchmarks/classifiers/candidate_embedding.py``), cut at 128 word pieces (the
pipeline's ``max_tokens``); each runtime's embeddings are compared with torch float32's (the mean cosine), so a
faster runtime that changes the features shows it.

ONNX Runtime is not a dependency of the suite: ``pip install onnxruntime onnx`` into the venv first (without
it the script says so and stops, ``make bench`` going on).
Run: ``.venv/bin/python benchmarks/classifiers/encoder_runtimes.py [--rows 1024]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks" / "classifiers"))


def export_onnx(model_dir: str, out: str) -> tuple[str, str]:
    """``model_dir``'s BERT exported to ``out``/model.onnx and quantized to ``out``/model.int8.onnx; both paths."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    bert = AutoModel.from_pretrained(model_dir, attn_implementation="eager").eval()  # sdpa traces a fixed mask

    class Hidden(torch.nn.Module):
        """The last hidden states only, by keyword (BertModel's forward takes more than positional ids)."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    dummy = torch.ones(2, 16, dtype=torch.long)
    fp32, int8 = os.path.join(out, "model.onnx"), os.path.join(out, "model.int8.onnx")
    axes = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(
            Hidden(),
            (dummy, dummy, torch.zeros_like(dummy)),
            fp32,
            dynamo=False,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["hidden"],
            dynamic_axes={name: axes for name in ("input_ids", "attention_mask", "token_type_ids", "hidden")},
            opset_version=17,
        )
    # MatMul weights only, per channel: the most faithful of quantize_dynamic's settings here (mean-pooled
    # cosine to float32 0.98-0.99 on two test sentences; its defaults, which also quantize the embeddings' Gather,
    # 0.78-0.89)
    quantize_dynamic(fp32, int8, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"], per_channel=True)
    return fp32, int8


class OrtEncoder:
    """ONNX Runtime sessions over the exported BERT: ``encode`` as CT2SentenceEncoder's, same batching."""

    def __init__(self, onnx_path: str, model_dir: str, threads: int, max_length: int, parallel: bool) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        # parallel: ``threads`` batches at once on one thread each, as CT2SentenceEncoder runs on CPU
        options.intra_op_num_threads, options.inter_op_num_threads = (1 if parallel else threads), 1
        self.session = ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
        self.pool = ThreadPoolExecutor(threads) if parallel else None
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.no_padding()  # tokenizer.json pads to a fixed length
        self.tokenizer.enable_truncation(max_length)

    def encode(self, texts: list[str], max_batch_tokens: int = 512) -> np.ndarray:
        """Normalized mean-pooled embeddings of ``texts``, in their order."""
        from common.models.generation.quality.sentence_encoder import mean_pool, token_batches

        ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        out = np.zeros((len(texts), 384), dtype=np.float32)

        def pooled(batch: list[int]) -> np.ndarray:
            input_ids = np.zeros((len(batch), max(len(ids[i]) for i in batch)), dtype=np.int64)
            mask = np.zeros_like(input_ids)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])], mask[row, : len(ids[i])] = ids[i], 1
            hidden = self.session.run(
                None, {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
            )[0]
            vectors = mean_pool(hidden, [len(ids[i]) for i in batch])
            return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

        batches = token_batches([len(i) for i in ids], 512, max_batch_tokens)
        for batch, vectors in zip(batches, (self.pool.map if self.pool else map)(pooled, batches)):
            out[batch] = vectors
        return out


def rate(encode, texts: list[str]) -> float:
    """Texts per second of ``encode`` over ``texts`` after one warm-up call on a few of them."""
    encode(texts[:8])
    start = time.perf_counter()
    encode(texts)
    return len(texts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--words", type=int, nargs="+", default=[20, 40, 80, 160])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime")):
        print("skipped: ONNX Runtime is not installed (.venv/bin/pip install onnxruntime onnx)")  # make bench goes on
        return
    import onnxruntime
    from candidate_embedding import windows
    from sentence_transformers import SentenceTransformer

    from common.models.generation.quality.scoring import minilm_path
    from common.models.generation.quality.sentence_encoder import CT2SentenceEncoder

    path, max_length = minilm_path(), 128
    ct2 = CT2SentenceEncoder(path, "cpu", "int8", args.threads, max_length)
    reference = SentenceTransformer(path, device="cpu")
    reference.max_seq_length = max_length
    with tempfile.TemporaryDirectory() as tmp:
        fp32, int8 = export_onnx(path, tmp)
        encoders = {
            "ct2 int8": ct2,
            "ort fp32": OrtEncoder(fp32, path, args.threads, max_length, False),
            "ort int8": OrtEncoder(int8, path, args.threads, max_length, False),
            "ort int8 parallel": OrtEncoder(int8, path, args.threads, max_length, True),
        }
        print(
            f"MiniLM, {args.threads} threads, {args.rows} Brown windows per length, batches of 512 tokens, cut "
            f"at {max_length} word pieces; onnxruntime {onnxruntime.__version__}; texts/s (mean cosine to torch "
            "float32 over 256 texts)"
        )
        print("words  " + "  ".join(f"{name:>18}" for name in encoders))
        for words in args.words:
            texts = windows(words, args.rows)
            exact = reference.encode(texts[:256], normalize_embeddings=True)
            cells = [
                f"{rate(e.encode, texts):8.0f} ({float(np.mean(np.sum(e.encode(texts[:256]) * exact, 1))):.4f})"
                for e in encoders.values()
            ]
            print(f"{words:5d}  " + "  ".join(f"{c:>18}" for c in cells))


if __name__ == "__main__":
    main()
