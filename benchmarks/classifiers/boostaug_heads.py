"""Benchmark: how sharp is each head the ``features`` surrogate could put on frozen MiniLM embeddings?

Reads a BoostAug lakehouse's ``boostaug_texts`` and the candidates (with delta-rs): every candidate's stored
embedding from ``boostaug_candidate_embeddings`` where a ``features`` run wrote it (``--sources 0``: all
sources), else the candidates of ``--sources`` sampled training texts, embedded here. Embeds the training
texts, fits each head on every boosting fold's own training folds (:func:`common.boostaug.surrogate.fold_plans`),
and applies the paper's filter to those candidates: the Ñ most confident of a source's 2·Ñ per backend,
confidence > ``--threshold``, predicted label = the source's. Prints per head: mean validation accuracy, the
share of candidates above the threshold and the share kept per backend. The paper's filter assumes an
over-confident fine-tuned classifier; this shows which head's confidences live on that scale.

Run: .venv/bin/python benchmarks/classifiers/boostaug_heads.py LAKEHOUSE [--sources 400] [--n-aug 8] [--threshold 0.99]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def heads(x, y, x_val, y_val, seed: int) -> dict:
    """name -> (predict(x) -> (labels, confidences), validation accuracy) for each head kind."""
    from common.boostaug.feature_surrogate import fit_head, fit_mlp_head, predict

    out = {}
    for c in (1.0, 100.0):
        head, figures = fit_head(x, y, x_val, y_val, [c], seed)
        out[f"logistic C={c:g}"] = (lambda v, h=head: predict(h, v), figures["val_accuracy"])
    for hidden in (64, 256):
        head, figures = fit_mlp_head(x, y, x_val, y_val, hidden, 200, seed)
        out[f"mlp {hidden}"] = (lambda v, h=head: predict(h, v), figures["val_accuracy"])
    return out


def main(argv=None) -> None:
    import numpy as np
    import pandas as pd
    from deltalake import DeltaTable

    from common.boostaug.config import FeatureSurrogateConfig
    from common.boostaug.feature_surrogate import embed, embeddings_of, sentence_encoder
    from common.boostaug.surrogate import fold_plans

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lakehouse")
    parser.add_argument("--sources", type=int, default=400, help="training texts sampled; 0: all")
    parser.add_argument("--n-aug", type=int, default=8)
    parser.add_argument("--threshold", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    texts = DeltaTable(f"{args.lakehouse}/boostaug_texts").to_pandas()
    train = texts[texts.split == "train"]
    columns = ["source_id", "fold", "label", "backend", "aug_idx", "text"]
    stored = f"{args.lakehouse}/boostaug_candidate_embeddings"
    encoder = sentence_encoder(FeatureSurrogateConfig())
    start = time.perf_counter()
    if DeltaTable.is_deltatable(stored):
        table = DeltaTable(stored).to_pyarrow_table(columns=[*columns, "embedding"])
        cands, x_cand = table.drop_columns(["embedding"]).to_pandas(), embeddings_of(table.column("embedding"))
        print(f"read {len(cands):,} stored candidate embeddings in {time.perf_counter() - start:.0f} s")
    else:
        cands = DeltaTable(f"{args.lakehouse}/boostaug_candidates").to_pandas(columns=columns)
        x_cand = None
    if args.sources:
        sources = np.random.default_rng(args.seed).choice(train.source_id.unique(), args.sources, replace=False)
        rows = cands.source_id.isin(sources).to_numpy()
        cands, x_cand = cands[rows].reset_index(drop=True), None if x_cand is None else x_cand[rows]
    x = embed(encoder, train.text.tolist())
    if x_cand is None:
        x_cand = embed(encoder, cands.text.tolist())
    print(f"{len(cands):,} candidates; embeddings ready in {time.perf_counter() - start:.0f} s")
    y, folds = train.label.to_numpy(), train.fold.to_numpy()
    judged: dict = {}
    for plan in fold_plans(int(folds.max()) + 1):
        fit, val = np.isin(folds, plan.train), folds == plan.validation
        rows = (cands.fold == plan.boost).to_numpy()
        for name, (predict, accuracy) in heads(x[fit], y[fit], x[val], y[val], args.seed).items():
            labels, confidence = predict(x_cand[rows])
            judged.setdefault(name, []).append((cands[rows].assign(pred=labels, conf=confidence), accuracy))
    for name, parts in judged.items():
        frame = pd.concat([p for p, _ in parts])
        frame["rank"] = frame.groupby(["source_id", "backend"]).conf.rank(ascending=False, method="first")
        kept = frame[(frame["rank"] <= args.n_aug) & (frame.conf > args.threshold) & (frame.pred == frame.label)]
        share = (kept.groupby("backend").size() / frame.groupby("backend").size()).fillna(0).round(3).to_dict()
        print(
            f"{name:<14} validation {np.mean([a for _, a in parts]):.4f}  above {args.threshold:g}: "
            f"{np.mean(frame.conf > args.threshold):.3f}  kept {len(kept) / len(frame):.3f} {share}"
        )


if __name__ == "__main__":
    main()
