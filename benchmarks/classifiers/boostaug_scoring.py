"""Benchmark: BoostAug's per-worker throughput on SST-2 (../shared/data/sst2/train.csv).

Measures, in one process (what one Spark Python worker or one Ray task does):
* candidates generated per second by each backend (EDA, spelling, split), 2·Ñ = 16 per text;
* the fastText surrogate's training time on 3 of 5 folds (the cross-boosting training set);
* candidates scored per second by that surrogate (confidence + predicted label, batches of 10k).

With ``--encoder``, the encoder surrogate too (MiniLM, or ``--model`` any HF encoder; on the GPU when one is
visible): fine-tuning rate on ``--encoder-train`` rows (one epoch, joint classification + MLM loss), then one
scoring actor's rate (:class:`common.boostaug.surrogate.EncoderPoolScorer`, the Ray Data pool's actor) on
``--encoder-candidates`` candidates, with and without pseudo-perplexity.

With ``--features``, the ``features`` surrogate (:mod:`common.boostaug.feature_surrogate`: frozen MiniLM
embeddings, a head per fold) for each CTranslate2 compute type in ``--compute-types`` and head in ``--heads``:
the time to embed the training texts and fit the 5 fold heads and the MonoAug head (one Ray task's work); one
embedding actor's rate (:class:`~common.boostaug.feature_surrogate.CandidateEmbedder`) on
``--features-candidates`` candidates, on ``--threads`` threads; and the scoring actor's rate on those
embeddings (:class:`~common.boostaug.feature_surrogate.FeatureHeadScorer`, its fold's head and the MonoAug
head).

Run: .venv/bin/python benchmarks/classifiers/boostaug_scoring.py [--texts N] [--encoder] [--features] [--json PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "sst2" / "train.csv"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000, help="source texts to augment and score")
    parser.add_argument("--json", dest="json_path")
    parser.add_argument("--encoder", action="store_true", help="also measure the encoder surrogate")
    parser.add_argument("--model", default=None, help="encoder checkpoint (default: MiniLM)")
    parser.add_argument("--encoder-train", type=int, default=512, help="rows the encoder fine-tunes on")
    parser.add_argument("--encoder-candidates", type=int, default=256, help="candidates the encoder scores")
    parser.add_argument("--features", action="store_true", help="also measure the features surrogate")
    parser.add_argument("--features-candidates", type=int, default=8000, help="candidates the features actor scores")
    parser.add_argument("--compute-types", nargs="+", default=["float32", "int8"])
    parser.add_argument("--heads", nargs="+", default=["logistic", "mlp"], help="the features surrogate's heads")
    parser.add_argument("--threads", type=int, default=2, help="the features actor's CPUs (OMP_NUM_THREADS)")
    args = parser.parse_args(argv)

    from common.boostaug.backends import augment_text, synonym_table
    from common.models.classifier_config import FastTextConfig
    from common.models.classifiers.fasttext_training import fasttext_params, fit_fasttext
    from common.models.classifiers.hft import HFTModel, predict_texts

    with open(DATA, newline="", encoding="utf-8") as fh:
        rows = [(r["text"], r["label_name"]) for r in csv.DictReader(fh)]
    start = time.perf_counter()
    synonyms = synonym_table()
    figures: dict = {"synonym_table_s": time.perf_counter() - start, "texts": args.texts}
    sources = rows[: args.texts]
    candidates = []
    for backend in ("eda", "spelling", "split"):
        start = time.perf_counter()
        out = [
            c
            for i, (text, _) in enumerate(sources)
            for c in augment_text(text, str(i), backend, 16, 42, 0.1, synonyms)
        ]
        figures[f"{backend}_candidates_per_s"] = len(out) / (time.perf_counter() - start)
        candidates += out
    train = [r for i, r in enumerate(rows) if i % 5 in (2, 3, 4)]  # 3 of 5 folds
    with tempfile.TemporaryDirectory() as tmp:
        _, _, seconds = fit_fasttext(
            [t for t, _ in train],
            [lab for _, lab in train],
            {**fasttext_params(FastTextConfig()), "epoch": 10},
            42,
            tmp,
            "level_1",
        )
        figures.update({"surrogate_train_rows": len(train), "surrogate_train_s": seconds})
        model = HFTModel(tmp, 1)
        predict_texts(model, candidates[:10])  # load once, as a worker does
        start = time.perf_counter()
        for i in range(0, len(candidates), 10_000):
            predict_texts(model, candidates[i : i + 10_000])
        figures["candidates_scored_per_s"] = len(candidates) / (time.perf_counter() - start)
        figures["candidates_scored"] = len(candidates)
    if args.encoder:
        figures.update(encoder_figures(train[: args.encoder_train], candidates[: args.encoder_candidates], args.model))
    if args.features:
        figures.update(
            features_figures(
                rows, candidates[: args.features_candidates], args.compute_types, args.heads, args.threads
            )
        )
    for key, value in figures.items():
        shown = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else value
        print(f"{key:<42} {shown}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2))
    return figures


def encoder_figures(train, candidates, model) -> dict:
    """Fine-tune one encoder surrogate on ``train`` for one epoch; time one scoring actor on ``candidates``."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch

    from common.boostaug.surrogate import EncoderPoolScorer
    from common.models.classifier_config import EncoderConfig
    from common.models.classifiers.encoder_classifier import _device, fit_surrogate

    out: dict = {"encoder_device": _device()}
    with tempfile.TemporaryDirectory() as tmp:
        pq.write_table(
            pa.table({"text": [t for t, _ in train], "label": [lab for _, lab in train]}), f"{tmp}/t.parquet"
        )
        # torch's own thread count (every core), as before the actor pool divides them
        spec = EncoderConfig(name_or_path=model, epochs=1, num_cpus=torch.get_num_threads())
        start = time.perf_counter()
        fit_surrogate([([f"{tmp}/t.parquet"], None)], [], spec, 42, f"{tmp}/model")
        out["encoder_fit_rows_per_s"] = len(train) / (time.perf_counter() - start)
        batch = pa.table({"fold": [0] * len(candidates), "text": candidates})
        for name, perplexity in (("classify", False), ("with_perplexity", True)):
            actor = EncoderPoolScorer({0: f"{tmp}/model"}, None, perplexity, None)
            actor(batch.slice(0, 8))  # warm up, as the pool's first batch does
            start = time.perf_counter()
            actor(batch)
            out[f"encoder_{name}_candidates_per_s"] = len(candidates) / (time.perf_counter() - start)
    return out


def features_figures(rows, candidates, compute_types, heads, threads: int) -> dict:
    """Per compute type: embed ``candidates`` in the embedding actor; per head: embed ``rows`` and fit the 5
    fold heads and the MonoAug head, then time the scoring actor (the fold-0 head and the MonoAug head) on
    the candidates' embeddings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from common.boostaug.config import FeatureSurrogateConfig
    from common.boostaug.feature_surrogate import CandidateEmbedder, FeatureHeadScorer, fit_surrogates
    from common.boostaug.surrogate import fold_plans, mono_plan, surrogate_sources

    out: dict = {"features_threads": threads}
    with tempfile.TemporaryDirectory() as tmp:
        table = pa.table(
            {
                "text": [t for t, _ in rows],
                "label": [lab for _, lab in rows],
                "split": ["train" if i % 10 else "dev" for i in range(len(rows))],
                "fold": [i % 5 for i in range(len(rows))],
            }
        )
        pq.write_table(table, f"{tmp}/texts.parquet")
        plans = fold_plans(5) + [mono_plan(5)]
        batch = pa.table({"fold": [0] * len(candidates), "text": candidates})
        for kind in compute_types:
            embedder = CandidateEmbedder(FeatureSurrogateConfig(compute_type=kind, threads=threads))
            embedder(batch.slice(0, 8))  # warm up, as the pool's first batch does
            start = time.perf_counter()
            embedded = embedder(batch)
            out[f"features_{kind}_candidates_per_s"] = len(candidates) / (time.perf_counter() - start)
            for head in heads:
                spec = FeatureSurrogateConfig(compute_type=kind, threads=threads, head=head)
                jobs = [
                    dict(
                        zip(("train", "validation"), surrogate_sources([f"{tmp}/texts.parquet"], p)),
                        out_dir=f"{tmp}/{kind}/{head}/{p.boost}",
                    )
                    for p in plans
                ]
                start = time.perf_counter()
                fitted = fit_surrogates(jobs, spec, 42)
                out[f"features_{kind}_{head}_fit_s"] = time.perf_counter() - start
                out[f"features_{kind}_{head}_embed_s"] = fitted[0]["embed_seconds"]
                out[f"features_{kind}_{head}_val_accuracy"] = ", ".join(f"{f['val_accuracy']:.3f}" for f in fitted)
                actor = FeatureHeadScorer({0: fitted[0]["uri"]}, fitted[-1]["uri"])
                start = time.perf_counter()
                actor(embedded)
                out[f"features_{kind}_{head}_judged_per_s"] = len(candidates) / (time.perf_counter() - start)
    return out


if __name__ == "__main__":
    main()
