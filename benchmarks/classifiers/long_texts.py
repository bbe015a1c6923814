"""BoostAug's long-text check (issue 78): Brown passages of 40-60 words labelled with their document's genre,
written as ``train.csv``, ``dev.csv`` and ``test.csv`` (columns text, label) for ``conf/boostaug_brown.yaml``.

Each of Brown's 500 documents (``../shared/data/brown/documents.csv``, 15 genres) is cut into consecutive pieces
of 40 to 60 words (lengths drawn, seeded); ``--per-doc`` of them (20) are drawn per document, in document order.
The split is by document, stratified by genre (per genre, in seeded order: round(n x 0.2) documents to test,
round(n x 0.1) to dev, the rest to train), so no document has passages on both sides: a passage's neighbours
share its author and topic, and a per-passage split would score them as unseen text. With the defaults:
about 7,000 training passages of 50 words (2.6 times SST-2's 19), 15 labels of 4 to 56 training documents.

Run from the repository root (seconds), then the pipeline:
  .venv/bin/python benchmarks/classifiers/long_texts.py
  .venv/bin/augment run boostaug --conf conf/boostaug_brown.yaml
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BROWN = REPO.parent / "shared" / "data" / "brown" / "documents.csv"
TEST_FRACTION, DEV_FRACTION = 0.2, 0.1


def passages(text: str, rnd: random.Random, per_doc: int, low: int, high: int) -> list[str]:
    """``per_doc`` of ``text``'s consecutive pieces of ``low``..``high`` words (the last, shorter piece left
    out), drawn with ``rnd`` and kept in document order; all of them when there are fewer."""
    words, pieces, start = text.split(), [], 0
    while True:
        size = rnd.randint(low, high)
        if start + size > len(words):
            break
        pieces.append(" ".join(words[start : start + size]))
        start += size
    keep = sorted(rnd.sample(range(len(pieces)), min(per_doc, len(pieces))))
    return [pieces[i] for i in keep]


def document_splits(genre_of: dict[str, str], seed: int) -> dict[str, str]:
    """Document id -> train/dev/test: per genre, documents in seeded hash order, round(n x 0.2) to test, then
    round(n x 0.1) to dev, the rest to train."""
    by_genre: dict[str, list[str]] = defaultdict(list)
    for doc, genre in genre_of.items():
        by_genre[genre].append(doc)
    out = {}
    for docs in by_genre.values():
        docs.sort(key=lambda d: hashlib.sha256(f"{seed}:{d}".encode()).hexdigest())
        n_test, n_dev = round(len(docs) * TEST_FRACTION), round(len(docs) * DEV_FRACTION)
        for i, doc in enumerate(docs):
            out[doc] = "test" if i < n_test else "dev" if i < n_test + n_dev else "train"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "lakehouse-inputs" / "brown-passages")
    parser.add_argument("--per-doc", type=int, default=20)
    parser.add_argument("--words", type=int, nargs=2, default=[40, 60], metavar=("LOW", "HIGH"))
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    csv.field_size_limit(sys.maxsize)
    with open(BROWN, newline="", encoding="utf-8") as handle:
        documents = list(csv.DictReader(handle))
    split_of = document_splits({d["doc_id"]: d["genre"] for d in documents}, args.seed)
    rows: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for doc in documents:
        # One generator per document: its passages do not change when another document's do.
        rnd = random.Random(f"{args.seed}:{doc['doc_id']}")
        for text in passages(doc["text"], rnd, args.per_doc, *args.words):
            rows[split_of[doc["doc_id"]]].append((text, doc["genre"]))
    args.out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        with open(args.out / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(rows[split])
        words = sum(len(t.split()) for t, _ in rows[split]) / max(len(rows[split]), 1)
        labels = Counter(label for _, label in rows[split])
        print(
            f"{split}: {len(rows[split])} passages of {words:.1f} words on average, {len(labels)} genres "
            f"({min(labels.values())}..{max(labels.values())} passages each) -> {args.out / (split + '.csv')}"
        )


if __name__ == "__main__":
    main()
