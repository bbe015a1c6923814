"""Benchmark: BoostAug's per-worker throughput on SST-2 (../shared/data/sst2/train.csv).

Measures, in one process (what one Spark Python worker or one Ray task does):
* candidates generated per second by each backend (EDA, spelling, split), 2·Ñ = 16 per text;
* the fastText surrogate's training time on 3 of 5 folds (the cross-boosting training set);
* candidates scored per second by that surrogate (confidence + predicted label, batches of 10k).

The fastText surrogate runs on CPU only (there is no GPU path for it); the encoder surrogate, when it
lands, gets its GPU figures here. Run: .venv/bin/python benchmarks/boostaug_scoring.py [--texts N] [--json PATH]
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst2" / "train.csv"


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=2000, help="source texts to augment and score")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)

    from common.boostaug.backends import augment_text, synonym_table
    from common.models.config import FastTextConfig
    from common.models.hft import HFTModel, fasttext_params, fit_fasttext, predict_texts

    with open(DATA, newline="", encoding="utf-8") as fh:
        rows = [(r["text"], r["label_name"]) for r in csv.DictReader(fh)]
    start = time.perf_counter()
    synonyms = synonym_table()
    figures: dict = {"synonym_table_s": time.perf_counter() - start, "texts": args.texts}
    sources = rows[:args.texts]
    candidates = []
    for backend in ("eda", "spelling", "split"):
        start = time.perf_counter()
        out = [c for i, (text, _) in enumerate(sources) for c in augment_text(text, str(i), backend, 16, 42, 0.1,
                                                                               synonyms)]
        figures[f"{backend}_candidates_per_s"] = len(out) / (time.perf_counter() - start)
        candidates += out
    train = [r for i, r in enumerate(rows) if i % 5 in (2, 3, 4)]  # 3 of 5 folds
    with tempfile.TemporaryDirectory() as tmp:
        _, _, seconds = fit_fasttext([t for t, _ in train], [lab for _, lab in train],
                                     {**fasttext_params(FastTextConfig()), "epoch": 10}, 42, tmp, "level_1")
        figures.update({"surrogate_train_rows": len(train), "surrogate_train_s": seconds})
        model = HFTModel(tmp, 1)
        predict_texts(model, candidates[:10])  # load once, as a worker does
        start = time.perf_counter()
        for i in range(0, len(candidates), 10_000):
            predict_texts(model, candidates[i:i + 10_000])
        figures["candidates_scored_per_s"] = len(candidates) / (time.perf_counter() - start)
        figures["candidates_scored"] = len(candidates)
    for key, value in figures.items():
        print(f"{key:<28} {value:,.1f}" if isinstance(value, float) else f"{key:<28} {value:,}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
