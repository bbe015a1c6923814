"""Hierarchical fastText: the paper's inference order by hand, and real models trained in Ray actors."""

from __future__ import annotations

import pytest

from common.models.classifier_config import FastTextConfig
from common.models.classifiers.hft import HFTTrainerPool, predict, predict_texts, train_hft
from common.pyfunc.hft import hft_decide


def test_inference_stops_at_the_first_disagreement():
    levels = [
        [("A", 0.9), ("A", 0.9), ("A", 0.9), ("A", 0.9)],
        [("A > B", 0.8), ("A > B", 0.8), ("Z > B", 0.8), ("A > B", 0.8)],
        [("A > B > C", 0.7), ("A > X > C", 0.7), ("A > B > C", 0.7), ("A > B > C", 0.7)],
        [("A > B > C > D", 0.6), ("A > B > C > D", 0.6), ("A > B > C > D", 0.6), ("A > B > Y > D", 0.6)],
    ]
    assert hft_decide(levels) == [
        ("A > B > C > D", 0.6, 4),  # every level agrees with the one before: f4's prediction
        ("A > B", 0.8, 2),  # f3 disagrees with f2 on L1..L2: f2's prediction, even though f4 agrees with f2
        ("A", 0.9, 1),  # f2 disagrees with f1 on L1
        ("A > B > C", 0.7, 3),  # f4 disagrees with f3 on L3
    ]


def test_shallow_labels_and_flat_taxonomies():
    # A label with fewer levels than the model depth stays itself at deeper levels and agrees.
    assert hft_decide([[("Toys", 0.9)], [("Toys", 0.8)], [("Toys", 0.7)]]) == [("Toys", 0.7, 3)]
    assert hft_decide([[("Toys", 0.9), ("Home", 0.4)]]) == [("Toys", 0.9, 1), ("Home", 0.4, 1)]


@pytest.fixture
def tiny_training_table(spark, lakehouse):
    words = {
        "Home > Kitchen > Mugs": "mug cup coffee",
        "Home > Kitchen > Pans": "pan skillet frying",
        "Toys > Dolls > Baby Dolls": "doll baby newborn",
        "Toys > Blocks": "bricks blocks building",
    }
    rows = []
    for i in range(160):
        category = list(words)[i % 4]
        vocab = words[category].split()
        rows.append((f"i{i}", f"brand{i % 7} {vocab[i % 3]} {vocab[(i + 1) % 3]} model{i}", category))
    version = lakehouse.write(
        spark.createDataFrame(rows, "item_id string, title string, category string"), "train"
    ).version
    return lakehouse, version


def test_real_hft_trains_in_ray_tasks_and_predicts_in_spark(spark, ray_runtime, tiny_training_table, tmp_path):
    lakehouse, version = tiny_training_table
    model, stats = train_hft(
        HFTTrainerPool(ray_runtime),
        lakehouse.file_uris("train", version),
        3,
        FastTextConfig(epoch=30, bucket=10000),
        seed=1,
        out_dir=str(tmp_path / "hft"),
    )
    assert [s.level for s in stats] == [1, 2, 3]
    assert [s.labels for s in stats] == [2, 3, 4]  # L1: Home/Toys; L2: Kitchen/Dolls/Blocks; L3: 4 leaves
    assert all(s.rows == 160 and s.words_per_second_per_thread > 0 for s in stats)
    out = predict_texts(model, ["new coffee mug", "skillet pan", "baby doll", "building bricks"])
    assert [o[0] for o in out] == [
        "Home > Kitchen > Mugs",
        "Home > Kitchen > Pans",
        "Toys > Dolls > Baby Dolls",
        "Toys > Blocks",
    ]
    assert out[3][2] == 3 and 0 < out[3][1] <= 1  # "Toys > Blocks" is 2 deep but f3 still agrees
    titles = spark.createDataFrame(
        [("a", "new coffee mug"), ("b", "baby doll"), ("c", None)], "id string, title string"
    )
    scored = {r.id: r for r in predict(titles, model).collect()}
    assert scored["a"].pred_label == "Home > Kitchen > Mugs" and scored["b"].pred_label == "Toys > Dolls > Baby Dolls"
    assert scored["c"].pred_label is not None  # an empty title still gets a (low-confidence) label


def test_training_depends_on_rows_and_seed_not_on_file_order(spark, tiny_training_table, tmp_path):
    import hashlib

    import pyarrow.parquet as pq

    from common.models.classifiers.hft import train_level

    lakehouse, version = tiny_training_table
    table = pq.ParquetDataset(lakehouse.file_uris("train", version)).read()
    forward, backward = tmp_path / "forward.parquet", tmp_path / "backward.parquet"
    pq.write_table(table, forward)
    pq.write_table(table.take(list(range(table.num_rows - 1, -1, -1))), backward)
    params = {
        "epoch": 5,
        "lr": 0.5,
        "wordNgrams": 2,
        "dim": 16,
        "minCount": 1,
        "bucket": 5000,
        "loss": "softmax",
        "thread": 1,
        "minn": 0,
        "maxn": 0,
    }
    for name, path in (("a", forward), ("b", backward)):
        train_level([str(path)], 3, params, 7, str(tmp_path / name))
    # Digests, not bytes: pytest's diff of two differing multi-megabyte byte strings runs for hours.
    digest = {name: hashlib.sha256((tmp_path / name / "level_3.bin").read_bytes()).hexdigest() for name in "ab"}
    assert digest["a"] == digest["b"]


HEAP_GARBAGE_SCRIPT = """
import hashlib, sys
from common.models.classifiers.fasttext_training import train_file_to_model

train_file, out = sys.argv[1], sys.argv[2]
params = {"epoch": 3, "lr": 0.5, "wordNgrams": 2, "dim": 16, "minCount": 1, "bucket": 5000, "loss": "softmax",
          "thread": 1, "minn": 0, "maxn": 0}

def digest(name):
    train_file_to_model(train_file, params, 7, out + name)
    return hashlib.sha256(open(out + name, "rb").read()).hexdigest()

first = digest("first.bin")
# Heap chunks under the mmap threshold, filled with 0x3f bytes (floats of about 0.75) and freed next to each
# other, coalesce into a free region that fastText's input matrix is then carved from.
chunks = [b"\\x3f" * 60_000 for _ in range(40)]
keep = b"x" * 60_000  # keeps the freed region off the top of the heap, where glibc would trim it
del chunks
print(first, digest("second.bin"))
"""


def test_training_ignores_what_the_heap_held_before(tmp_path):
    """fasttext-numpy2 leaves most of its input matrix unwritten at init: recycled heap memory full of
    non-zero bytes must not reach the model (it made two trainings of one file in one process differ).
    A fresh interpreter, so the heap's history is the script's own."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    rows = [f"__label__{i % 3} brand{i % 7} word{i % 11} model{i}" for i in range(120)]
    train_file = tmp_path / "train.txt"
    train_file.write_text("\n".join(rows) + "\n", encoding="utf-8")
    # No fixed mmap threshold (SAFE_MALLOC_ENV): a driver or Spark worker that trains in-process has only
    # M_PERTURB (zeroed_allocations) to guard it.
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    done = subprocess.run(
        [sys.executable, "-c", HEAP_GARBAGE_SCRIPT, str(train_file), f"{tmp_path}/"],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    first, second = done.stdout.split()
    assert first == second


def test_a_trainer_removes_the_scratch_folders_its_killed_predecessors_left(tmp_path, monkeypatch):
    import os
    import subprocess
    import tempfile

    from common.models.classifiers.fasttext_training import fit_rows

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    finished = subprocess.Popen(["true"])
    finished.wait()  # reaped: its pid stands for a killed worker's
    gone, kept = tmp_path / f"hft-{finished.pid}-abc", tmp_path / f"hft-{os.getppid()}-xyz"
    for folder in (gone, kept):
        folder.mkdir()
        (folder / "level_1.train.txt").write_text("__label__0 a killed trainer's copy of its rows\n")
    other = tmp_path / "hft-notapid"  # a name of another shape: not the trainers'
    other.mkdir()
    rows = [(f"mug cup {i}", "Mugs") if i % 2 else (f"pan wok {i}", "Pans") for i in range(40)]
    fit_rows(sorted(rows), {"epoch": 2, "dim": 8, "bucket": 1000, "thread": 1}, 3, str(tmp_path / "model"))
    assert not gone.exists() and kept.exists() and other.exists()  # a live process's folder stays
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([kept.name, other.name, "model"])  # its own went
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["labels_1.json", "level_1.bin"]
