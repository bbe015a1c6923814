"""Check and time the compositional pipeline's multi-label encoder
(:mod:`common.models.classifiers.multilabel_encoder`, MiniLM with a sigmoid head) on whatever device torch sees;
needs no Spark or Ray.

Data: SemEval-2018 E-c (``--data``): trained on the train file, the best epoch and the decision threshold
chosen on the first ``--val`` dev tweets, scored on the rest of dev (an iid split: the paper's iid column,
not its compositional one). Prints training examples/s, prediction tweets/s, and per-example Jaccard and
exact-set accuracy (:mod:`common.models.classifiers.multilabel`'s metrics).

With ``--splits DIR`` (Parquet exports of the pipeline's ``cg_train``, ``cg_support``, ``cg_test``,
``iid_train``, ``iid_test``: example_id, text, labels), the ``no_aug`` rows instead: per split kind and seed,
trained on the training side (CG: train + support) less a seeded 5% validation slice (epoch and threshold),
scored on the test side, ``--repeats`` seeds.

Run: python3 benchmarks/classifiers/multilabel_encoder_check.py [--epochs 3] [--val 400] [--splits DIR] [--json PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "semeval2018_ec"


def read(path: Path) -> list[tuple[str, str, list[str]]]:
    """(id, tweet, emotions) rows of one SemEval E-c file (tab-separated, a 0/1 column per emotion)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = rows[0]
    return [(r[0], r[1], [header[j] for j in range(2, len(header)) if r[j] == "1"]) for r in rows[1:]]


def _metrics(model, validation, test) -> dict:
    from common.models.classifiers.label_metrics import best_threshold, decide, jaccard

    threshold, _ = best_threshold(model.probabilities([t for _, t, _ in validation]), [g for _, _, g in validation])
    start = time.perf_counter()
    probabilities = model.probabilities([t for _, t, _ in test])
    predict_s = time.perf_counter() - start
    predicted = [decide(p, threshold) for p in probabilities]
    return {
        "threshold": threshold,
        "predict_per_s": len(test) / predict_s,
        "jaccard": sum(jaccard(p, g) for p, (_, _, g) in zip(predicted, test)) / len(test),
        "exact_accuracy": sum(sorted(p) == sorted(g) for p, (_, _, g) in zip(predicted, test)) / len(test),
    }


def no_aug_rows(args) -> dict:
    """The encoder's no_aug rows on the CG and iid splits, ``args.repeats`` seeds each."""
    import random
    import statistics

    import pyarrow.parquet as pq
    import torch

    from common.models.classifier_config import EncoderConfig
    from common.models.classifiers.multilabel_encoder import fit

    def rows(*names):
        out = []
        for name in names:
            t = pq.read_table(Path(args.splits, f"{name}.parquet"), columns=["example_id", "text", "labels"])
            out += list(zip(*(t.column(c).to_pylist() for c in ("example_id", "text", "labels"))))
        return out

    spec = EncoderConfig(
        learning_rate=2e-5, epochs=args.epochs, max_length=64, batch_size=32, num_cpus=torch.get_num_threads()
    )
    results: list[dict] = []
    for repeat in range(args.repeats):
        for kind, train_tables in (("cg", ("cg_train", "cg_support")), ("iid", ("iid_train",))):
            train = sorted(rows(*train_tables))
            random.Random(42 + repeat).shuffle(train)
            cut = max(1, round(0.05 * len(train)))
            start = time.perf_counter()
            model, figures = fit(train[cut:], train[:cut], spec, 42 + repeat)
            results.append(
                {
                    "split": kind,
                    "seed": 42 + repeat,
                    "train": len(train) - cut,
                    **figures,
                    "seconds": time.perf_counter() - start,
                    **_metrics(model, train[:cut], rows(f"{kind}_test")),
                }
            )
            print(json.dumps(results[-1]), flush=True)
            if args.json_path:
                Path(args.json_path).write_text(json.dumps(results, indent=2))
    for kind in ("cg", "iid"):
        for metric in ("exact_accuracy", "jaccard"):
            values = [100 * r[metric] for r in results if r["split"] == kind]
            std = statistics.stdev(values) if len(values) > 1 else float("nan")
            print(f"{kind} no_aug {metric}: {statistics.mean(values):.2f} +- {std:.2f} over {len(values)} seeds")
    return {"runs": results}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--val", type=int, default=400)
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="train on the first N tweets only (default: all on a GPU, 400 on a CPU)",
    )
    parser.add_argument("--splits", help="folder of the split tables as Parquet: the no_aug rows, CG and iid")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    if args.splits:
        return no_aug_rows(args)

    import torch

    from common.models.classifier_config import EncoderConfig
    from common.models.classifiers.multilabel_encoder import fit

    train = read(Path(args.data, "2018-E-c-En-train.txt"))
    limit = args.limit if args.limit is not None else 0 if torch.cuda.is_available() else 400
    train = train[:limit] if limit else train
    dev = read(Path(args.data, "2018-E-c-En-dev.txt"))
    validation, test = dev[: args.val], dev[args.val :]
    # compositional.eval.encoder's defaults
    spec = EncoderConfig(
        learning_rate=2e-5, epochs=args.epochs, max_length=64, batch_size=32, num_cpus=torch.get_num_threads()
    )
    start = time.perf_counter()
    model, figures = fit(train, validation, spec, 42)
    fit_s = time.perf_counter() - start
    out = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "train": len(train),
        "test": len(test),
        **figures,
        "train_examples_per_s": len(train) * args.epochs / fit_s,
        **_metrics(model, validation, test),
    }
    print(json.dumps(out, indent=2))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
