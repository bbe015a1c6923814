"""Which of MiniLM's layers the ``features`` surrogate should read: a classifier head's test accuracy on the
mean-pooled states of each layer (``boostaug.surrogate.features.layers``).

For SST-2 (``../shared/data/sst2``) and the Brown passages of ``benchmarks/classifiers/long_texts.py`` (made first when
``lakehouse-inputs/brown-passages`` is missing), every training and test text is embedded once by the packaged
all-MiniLM-L6-v2 in torch (texts cut at 128 word pieces, as the surrogate cuts them), keeping each layer's mean-pooled,
unit-length states; then a one-hidden-layer MLP of 256 ReLU units (scikit-learn, Adam, at most 200 epochs: the
shape of the surrogate's head) is trained on the training split per layer and seed, and its test accuracy printed,
mean ± std over ``--seeds``. A layer kept is a layer the embedding stage still runs for every candidate, so the
cost of a layer is the stage's time (``benchmarks/classifiers/candidate_embedding.py``).

Run: ``.venv/bin/python benchmarks/classifiers/surrogate_layers.py [--layers 1 2 3 4 6] [--seeds 3] [--data sst2
brown]``
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
DATA = {
    "sst2": (REPO.parent / "shared" / "data" / "sst2", "label_name"),
    "brown": (REPO / "lakehouse-inputs" / "brown-passages", "label"),
}


def read(path: Path, label: str) -> tuple[list[str], list[str]]:
    """(texts, labels) of the CSV file ``path``, labels from its ``label`` column."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    return [r["text"] for r in rows], [r[label] for r in rows]


def layer_features(texts: list[str], layers: list[int], max_tokens: int = 128, batch: int = 64) -> dict:
    """{layer: (len(texts), 384) unit-length mean of that layer's states} of MiniLM in torch (0: its embeddings)."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from common.models.generation.quality.scoring import minilm_path

    tokenizer, model = AutoTokenizer.from_pretrained(minilm_path()), AutoModel.from_pretrained(minilm_path()).eval()
    out: dict = {k: [] for k in layers}
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            tokens = tokenizer(
                texts[i : i + batch], padding=True, truncation=True, max_length=max_tokens, return_tensors="pt"
            )
            states = model(**tokens, output_hidden_states=True).hidden_states
            mask = tokens["attention_mask"].unsqueeze(-1).float()
            for k in layers:
                out[k].append(torch.nn.functional.normalize((states[k] * mask).sum(1) / mask.sum(1), dim=-1).numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 3, 4, 6])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--data", nargs="+", choices=sorted(DATA), default=["sst2", "brown"])
    args = parser.parse_args()

    import numpy as np
    import torch
    from sklearn.neural_network import MLPClassifier

    torch.manual_seed(0)
    if "brown" in args.data and not (DATA["brown"][0] / "train.csv").is_file():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "classifiers" / "long_texts.py")], check=True)
    print("| data | " + " | ".join(f"layer {k}" for k in args.layers) + " |")
    print("|---|" + "---|" * len(args.layers))
    for name in args.data:
        folder, label = DATA[name]
        (train, y_train), (test, y_test) = (read(folder / f"{split}.csv", label) for split in ("train", "test"))
        start = time.perf_counter()
        x_train, x_test = layer_features(train, args.layers), layer_features(test, args.layers)
        cells = []
        for k in args.layers:
            scores = [
                (
                    MLPClassifier(hidden_layer_sizes=(256,), max_iter=200, random_state=seed)
                    .fit(x_train[k], y_train)
                    .predict(x_test[k])
                    == np.array(y_test)
                ).mean()
                for seed in range(args.seeds)
            ]
            cells.append(f"{np.mean(scores):.3f} ± {np.std(scores):.3f}")
        print(
            f"| {name} ({len(train)} train, {len(test)} test, {time.perf_counter() - start:.0f} s) | "
            + " | ".join(cells)
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
