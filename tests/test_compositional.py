"""Compositional multi-label augmentation (paper 4): ingest of multi-label inputs, the split invariants,
the four metrics on hand-computed examples, P(y), Concat, QC ranking and accounting, the label-prefix
model's independence, the multi-label classifier, and a tiny end-to-end run of the pipeline."""

from __future__ import annotations

import random

import pytest
from worlds import LABELS, PLANTED_REASONS, check_card
from worlds import multilabel_spec as _spec
from worlds import multilabel_tsv as _multilabel_tsv
from worlds import tweet as _tweet

from common.compositional.config import EvalConfig, QualityConfig, SplitConfig
from common.compositional.labels import MarkovLabelModel, sample_novel


# ----------------------------------------------------------------------------- ingest
def test_multilabel_ingest_folds_label_columns_and_quarantines_bad_rows(ctx, tmp_path):
    from jobs.foundation.ingest import multilabel_job

    path = tmp_path / "ml.tsv"
    rows = _multilabel_tsv(path, n=20)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("bad1\t\t1\t0\t0\t0\t0\n")  # empty text
        fh.write("bad2\tno feelings at all\t0\t0\t0\t0\t0\n")  # no labels
        fh.write("bad3\tmaybe angry\t2\t0\t0\t0\t0\n")  # not a 0/1 indicator
    ctx.cfg.inputs.multilabel = _spec(path)
    result = multilabel_job(ctx)
    assert result.metrics["multilabel.rows_in"] == len(rows) + 3
    kept = {r["example_id"]: r["labels"] for r in ctx.lakehouse.read("multilabel").collect()}
    assert len(kept) == len(rows)
    assert kept["t0005"] == ["anger", "fear"] and kept["t0000"] == ["anger"]  # sorted label arrays
    reasons = {r["example_id"]: r["reason"] for r in ctx.lakehouse.read("multilabel_quarantine").collect()}
    assert reasons == {"bad1": "empty text", "bad2": "no labels", "bad3": "label column anger is not 0/1"}


def test_labels_as_a_joined_string_and_an_unknown_label(ctx, tmp_path):
    from common.data.config import InputSpec
    from jobs.foundation.ingest import multilabel_job

    path = tmp_path / "ml.csv"
    path.write_text(
        "text,labels\nI am so happy,joy\nhappy and scared, joy | fear \nwho knows,boredom\nno id either,\n",
        encoding="utf-8",
    )
    ctx.cfg.inputs.multilabel = InputSpec(path=str(path))
    ctx.cfg.ingest.label_separator = "|"
    ctx.cfg.ingest.label_vocabulary = ["joy", "fear"]
    multilabel_job(ctx)
    kept = ctx.lakehouse.read("multilabel").toPandas()
    assert sorted(map(list, kept["labels"])) == [["fear", "joy"], ["joy"]]
    assert kept["example_id"].str.len().eq(16).all() and kept["example_id"].is_unique  # ids from the content
    reasons = sorted(r["reason"] for r in ctx.lakehouse.read("multilabel_quarantine").collect())
    assert reasons == ["no labels", "unknown label (not in ingest.label_vocabulary)"]


# ----------------------------------------------------------------------------- split
def _rows(spark, rows):
    return spark.createDataFrame(
        [(i, f"text {i}", sorted(ls)) for i, ls in rows], "example_id string, text string, labels array<string>"
    )


def test_cg_split_shares_no_composition_and_has_exact_sizes(spark):
    from common.compositional.split import cg_split, iid_split, test_compositions

    sets = [["a"], ["b"], ["c"], ["a", "b"], ["a", "c"], ["b", "c"], ["a", "b", "c"]]
    rows = [(f"e{i:03d}", sets[i % len(sets)]) for i in range(140)]  # 20 examples per label set
    df = _rows(spark, rows)
    cfg = SplitConfig(compositions=2, support=5, min_labels=2, min_examples=20)
    chosen = test_compositions(df, cfg, seed=3)
    picked = {r["composition"] for r in chosen.collect()}
    assert len(picked) == 2 and all("," in c for c in picked)  # only label sets of >= 2 labels
    split = {k: v.toPandas() for k, v in cg_split(df, chosen, cfg.support, seed=3).items()}
    train_sets = set(split["train"]["composition"])
    assert not train_sets & picked  # train and test share no label set
    assert set(split["support"]["composition"]) <= picked and set(split["test"]["composition"]) <= picked
    assert len(split["support"]) == 5 and len(split["test"]) == 2 * 20 - 5  # exact sizes
    assert not set(split["support"]["example_id"]) & set(split["test"]["example_id"])
    assert len(split["train"]) + 40 == 140
    again = {r["example_id"] for r in cg_split(df, test_compositions(df, cfg, seed=3), 5, seed=3)["support"].collect()}
    assert again == set(split["support"]["example_id"])  # seeded
    iid = {k: v.toPandas() for k, v in iid_split(df, 105, 35, seed=3).items()}
    assert len(iid["train"]) == 105 and len(iid["test"]) == 35
    assert not set(iid["train"]["example_id"]) & set(iid["test"]["example_id"])
    assert set(iid["train"]["composition"]) & set(iid["test"]["composition"])  # iid: compositions shared
    capped = SplitConfig(compositions=7, support=5, min_labels=2, min_examples=1, max_examples=19)
    assert test_compositions(df, capped, seed=3).count() == 0  # every label set holds 20 examples


# ----------------------------------------------------------------------------- metrics
def test_the_four_set_metrics_on_hand_computed_examples(spark):
    from pyspark.sql import functions as F

    from common.compositional.evaluation import set_metrics

    cases = [  # predicted, gold -> jaccard, accuracy, correctness (P ⊆ G), completeness (G ⊆ P)
        (["a", "b"], ["a", "b"], (1.0, 1.0, 1.0, 1.0)),
        (["a"], ["a", "b"], (0.5, 0.0, 1.0, 0.0)),
        (["a", "b", "c"], ["a", "b"], (2 / 3, 0.0, 0.0, 1.0)),
        (["c"], ["a", "b"], (0.0, 0.0, 0.0, 0.0)),
        (["b", "a"], ["a", "b"], (1.0, 1.0, 1.0, 1.0)),  # order does not matter
        ([], [], (1.0, 1.0, 1.0, 1.0)),
    ]
    df = spark.createDataFrame([(p, g) for p, g, _ in cases], "p array<string>, g array<string>")
    metrics = set_metrics(F.col("p"), F.col("g"))
    got = df.select(*[metrics[m].alias(m) for m in ("jaccard", "accuracy", "correctness", "completeness")]).collect()
    for row, (_, _, expected) in zip(got, cases):
        assert tuple(row) == pytest.approx(expected)
    from common.models.classifiers.label_metrics import jaccard

    assert [jaccard(p, g) for p, g, _ in cases] == pytest.approx([c[2][0] for c in cases])


# ----------------------------------------------------------------------------- P(y)
def test_markov_label_model_is_a_distribution_and_sampling_skips_seen_sets():
    model = MarkovLabelModel(["a", "b", "c"], smoothing=0.1).fit([["a", "b"], ["a", "b"], ["b", "c"]])
    p = model.transitions
    assert p.sum(axis=1) == pytest.approx([1.0] * 4)
    import itertools

    every = [s for k in (1, 2, 3) for s in itertools.combinations("abc", k)]
    assert sum(model.probability(s) for s in every) == pytest.approx(1.0)  # sets sum to one, no empty set
    assert model.probability(("a", "b")) > model.probability(("a", "c"))  # fit on the support's sets
    seen = {("a",), ("b",), ("c",), ("a", "b")}
    accepted, draws = sample_novel(model, seen, target=200, max_labels=3, max_draws=10_000, seed=1)
    assert sum(accepted.values()) == 200 and draws >= 200
    assert not set(accepted) & seen and ("b", "c") in accepted
    assert sample_novel(model, seen, 200, 3, 10_000, seed=1) == (accepted, draws)  # seeded
    unsmoothed = MarkovLabelModel(["a", "b", "c"], smoothing=0.0).fit([["a", "b"]])
    assert set(sample_novel(unsmoothed, set(), 50, 3, 1000, seed=0)[0]) == {("a", "b")}


# ----------------------------------------------------------------------------- Concat and QC
def test_concat_joins_one_single_label_text_per_label(spark):
    from common.compositional.generation import concat_texts, prompts

    train = spark.createDataFrame(
        [
            ("s1", "so angry", ["anger"]),
            ("s2", "very happy", ["joy"]),
            ("s3", "so glad", ["joy"]),
            ("m1", "angry and happy", ["anger", "joy"]),
        ],
        "example_id string, text string, labels array<string>",
    )
    sets = spark.createDataFrame(
        [("anger,joy", ["anger", "joy"], 3), ("fear,joy", ["fear", "joy"], 1)],
        "composition string, labels array<string>, draws long",
    )
    p = prompts(sets, ["concat", "t5_labels"])
    assert p.count() == 2 * 4 and p.filter("method = 'concat'").count() == 4
    assert {r["source_text"] for r in p.collect()} == {"anger, joy", "fear, joy"}
    out = {
        r["example_id"]: (r["text"], r["reason"])
        for r in concat_texts(p.filter("method = 'concat'"), train, 7).collect()
    }
    assert len(out) == 4
    for k in (1, 2, 3):
        text, reason = out[f"concat/anger,joy/{k}"]
        assert reason is None and text.startswith("so angry ") and text.split(" ", 2)[2] in ("very happy", "so glad")
    assert out["concat/fear,joy/1"] == (None, "no single-label text for fear")


def test_qc_keeps_the_top_k_by_jaccard_and_accounts_for_every_candidate(spark):
    from pyspark.sql import functions as F

    from common.compositional.evaluation import qc_cut

    cands = spark.createDataFrame(
        [("m", f"m/{i}", "a,b", ["a", "b"], f"t{i}", 3, None) for i in range(5)]
        + [
            ("m", "m/bad", "a,b", ["a", "b"], None, 0, "empty generation"),
            ("n", "n/0", "a,b", ["a", "b"], "x", 3, None),
        ],
        "method string, example_id string, composition string, labels array<string>, text string, "
        "generated_tokens long, reason string",
    )
    preds = spark.createDataFrame(
        [
            ("m/0", ["a"]),
            ("m/1", ["a", "b"]),
            ("m/2", ["c"]),
            ("m/3", ["a", "b", "c"]),
            ("m/4", ["a", "b"]),
            ("m/bad", ["a"]),
            ("n/0", ["c"]),
        ],
        "example_id string, predicted array<string>",
    )
    cut = qc_cut(cands, preds, target=2, seed=0).toPandas().set_index("example_id")
    assert len(cut) == 7  # candidates = kept + rejected
    kept = cut[cut["reason"].isna()]
    assert set(kept.index) == {"m/1", "m/4", "n/0"}  # per method: the two highest Jaccards (n has one)
    assert cut.loc["m/3", "jaccard"] == pytest.approx(2 / 3) and cut.loc["m/3", "rank"] == 3
    assert cut.loc["m/3", "reason"] == "below the QC cut" and cut.loc["m/2", "rank"] == 5
    assert cut.loc["m/bad", "reason"] == "empty generation" and cut.loc["m/bad", "rank"] != cut.loc["m/bad", "rank"]
    ranks = qc_cut(cands, preds, 2, 0).filter(F.col("method") == "m").select("rank").toPandas()["rank"].dropna()
    assert sorted(ranks) == [1, 2, 3, 4, 5]


# ----------------------------------------------------------------------------- torch and fastText (Ray tasks)
def _prefix_independence() -> dict:
    import torch
    from transformers import T5Config, T5ForConditionalGeneration

    from common.models.generation.kinds.label_prefix import LabelPrefix, UnknownLabelError
    from common.models.generation.kinds.unigram import train_tokenizer

    tokenizer = train_tokenizer(["anger fear joy love sadness"] * 20 + ["some words to learn"] * 20, 60)
    net = T5ForConditionalGeneration(
        T5Config(
            vocab_size=len(tokenizer),
            d_model=16,
            d_kv=8,
            d_ff=32,
            num_layers=1,
            num_heads=2,
            pad_token_id=0,
            eos_token_id=1,
            decoder_start_token_id=0,
        )
    )
    prefix = LabelPrefix.for_model(LABELS, 3, net, tokenizer, ",", seed=0)
    a = prefix.encoder_inputs(["anger, joy", "joy,anger", "anger, fear, sadness", "anger"])
    embeds, mask = a["inputs_embeds"], a["attention_mask"]
    anger = prefix.block("anger")
    out = {
        "shape": list(embeds.shape),
        "mask": mask.sum(dim=1).tolist(),
        # anger's block is the same whatever its co-labels, and first (vocabulary order) in every set
        "anger_same": all(torch.equal(embeds[i, :3], anger) for i in range(4)),
        "joy_after_anger": torch.equal(embeds[0, 3:6], prefix.block("joy")) and torch.equal(embeds[0], embeds[1]),
        "padding_zero": bool((embeds[3, 3:] == 0).all()),
    }
    try:
        prefix.encoder_inputs(["anger, boredom"])
    except UnknownLabelError as exc:
        out["unknown"] = str(exc)
    # gradients reach only the blocks of the labels in the batch
    loss = net(**prefix.encoder_inputs(["anger, joy"]), labels=torch.tensor([[5, 6, 1]])).loss
    loss.backward()
    touched = (prefix.table.grad.abs().sum(dim=(1, 2)) > 0).tolist()
    out["touched"] = [label for label, t in zip(LABELS, touched) if t]
    return out


def test_label_prefix_blocks_do_not_depend_on_co_labels(ray_runtime):
    import sys

    import ray
    from ray import cloudpickle

    # torch stays out of the test process (it shapes the heap fastText trains on); Ray workers cannot
    # import a test module: the function goes by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    out = ray.get(ray.remote(num_cpus=1, max_calls=1)(_prefix_independence).remote())
    assert out["shape"] == [4, 9, 16] and out["mask"] == [6, 6, 9, 3]
    assert out["anger_same"] and out["joy_after_anger"] and out["padding_zero"]
    assert "unknown label 'boredom'" in out["unknown"]
    assert out["touched"] == ["anger", "joy"]


def test_multilabel_fasttext_learns_a_separable_toy_task(ray_runtime, tmp_path):
    import ray

    from common.models.classifier_config import FastTextConfig
    from common.models.classifiers.fasttext_training import FASTTEXT_TASK_ENV, fasttext_params
    from common.models.classifiers.multilabel import fit_and_predict

    _toy_parquet(tmp_path, 400, 100)
    task = ray.remote(num_cpus=1, runtime_env=FASTTEXT_TASK_ENV)(fit_and_predict)
    table = ray.get(
        task.remote(
            [([str(tmp_path / "train.parquet")], None)],
            [([str(tmp_path / "test.parquet")], None)],
            fasttext_params(FastTextConfig(loss="ova", epoch=25, lr=0.2, dim=20, bucket=10000)),
            3,
            0.1,
            {"method": "no_aug", "repeat": 0},
        )
    )
    assert table.num_rows == 100 and set(table.column("method").to_pylist()) == {"no_aug"}
    assert _exact(table) >= 90  # label words carry the labels: a working one-vs-all model gets nearly all sets
    assert table.column("n_train").to_pylist()[0] == 400 and 0 < table.column("threshold").to_pylist()[0] < 1


def _toy_parquet(folder, n_train: int, n_test: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(0)
    sets = [["anger"], ["joy"], ["anger", "joy"], ["fear"], ["fear", "joy"]]
    rows = [(f"e{i}", _tweet(rng, sets[i % 5]), sets[i % 5]) for i in range(n_train + n_test)]
    for name, part in (("train", rows[:n_train]), ("test", rows[n_train:])):
        pq.write_table(
            pa.table(
                {"example_id": [r[0] for r in part], "text": [r[1] for r in part], "labels": [r[2] for r in part]}
            ),
            folder / f"{name}.parquet",
        )


def _exact(table) -> int:
    return sum(
        sorted(p) == sorted(g) for p, g in zip(table.column("predicted").to_pylist(), table.column("gold").to_pylist())
    )


def test_multilabel_encoder_learns_a_separable_toy_task_and_ships_as_a_pyfunc_model(ray_runtime, tmp_path):
    import json
    import sys
    from dataclasses import asdict

    import mlflow
    import pyarrow.parquet as pq
    import ray
    from ray import cloudpickle
    from shipped_models import fresh_predictions

    from common.models.classifier_config import EncoderConfig
    from common.models.classifiers.multilabel import fit_and_predict
    from common.registry.mlflow_model import model_arguments

    _toy_parquet(tmp_path, 180, 60)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # One epoch at a high rate keeps this CPU test short; the toy task is learnt all the same.
    spec = EncoderConfig(
        max_length=16, epochs=1, batch_size=16, learning_rate=1e-3, mlm_weight=0.0, max_batch_tokens=512, num_cpus=2
    )
    # MiniLM fine-tuned with a sigmoid per label, in a worker of its own (torch stays out of pytest).
    task = ray.remote(num_cpus=1, max_calls=1)(fit_and_predict)
    table = ray.get(
        task.remote(
            [([str(tmp_path / "train.parquet")], None)],
            [([str(tmp_path / "test.parquet")], None)],
            asdict(spec),
            3,
            0.1,
            {"method": "no_aug", "model": "encoder"},
            kind="encoder",
            keep=str(tmp_path / "kept"),
        )
    )
    assert table.num_rows == 60 and set(table.column("model").to_pylist()) == {"encoder"}
    assert _exact(table) >= 50  # label words carry the labels: a working sigmoid head gets nearly all sets
    assert table.column("n_train").to_pylist()[0] == 180 and 0 < table.column("threshold").to_pylist()[0] < 1

    # the kept classifier as a pyfunc model, in a process without the suite: the label sets the suite decided
    manifest = json.loads((tmp_path / "kept" / "model.json").read_text())
    assert manifest["kind"] == "multilabel_encoder" and manifest["threshold"] == table.column("threshold")[0].as_py()
    test = pq.read_table(tmp_path / "test.parquet").to_pydict()
    texts = test["text"][:12] + ["", "Ünïcode — joy?"]
    mlflow.pyfunc.save_model(
        str(tmp_path / "model"), **model_arguments(str(tmp_path / "kept"), manifest, texts, tmp_path / "parts")
    )
    got = fresh_predictions("sqlite:///" + str(tmp_path / "none.db"), [str(tmp_path / "model")], texts, tmp_path)
    got = got[str(tmp_path / "model")]["predictions"]
    suite = dict(zip(table.column("example_id").to_pylist(), table.column("predicted").to_pylist()))
    assert got["labels"][:12] == [suite[i] for i in test["example_id"][:12]]
    assert all(len(labels) >= 1 for labels in got["labels"])  # every text gets a label, the empty one too
    assert all(len(scores) == len(manifest["labels"]) and 0 <= min(scores) for scores in got["scores"])
    with pytest.raises(ValueError, match="unknown multi-label classifier kind 'svm'"):
        fit_and_predict([([str(tmp_path / "train.parquet")], None)], [], {}, 0, 0.1, {}, kind="svm")


def test_summary_and_curve_tables_keep_classifier_models_apart():
    import pandas as pd

    from common.compositional.evaluation import curve_table, summary_table

    rows = []
    for model, base, aug in (("fasttext", 0.10, 0.20), ("encoder", 0.30, 0.25)):
        for seed in (0, 1):
            for kind, method, size, acc in (
                ("cg", "no_aug", 0, base),
                ("cg", "concat", 4, aug),
                ("cg", "concat", 8, aug + 0.01),
                ("iid", "no_aug", 0, 0.5),
            ):
                rows.append(
                    {
                        "model": model,
                        "split_kind": kind,
                        "method": method,
                        "size": size,
                        "n_augmented": size,
                        "seed": seed,
                        "accuracy": acc,
                        "jaccard": acc,
                        "correctness": acc,
                        "completeness": acc,
                    }
                )
    table = summary_table(pd.DataFrame(rows))
    assert list(zip(table["model"], table["split"], table["method"])) == [
        ("encoder", "cg", "no_aug"),
        ("encoder", "cg", "concat"),
        ("encoder", "iid", "no_aug"),
        ("fasttext", "cg", "no_aug"),
        ("fasttext", "cg", "concat"),
        ("fasttext", "iid", "no_aug"),
    ]
    gains = dict(zip(zip(table["model"], table["method"]), table["accuracy gain"]))
    assert gains[("fasttext", "concat")] == "+11.00" and gains[("encoder", "concat")] == "-4.00"
    curve = curve_table(pd.DataFrame(rows)).set_index(["model", "method"])
    assert curve.loc[("encoder", "concat"), 0] == 30.0 and curve.loc[("fasttext", "concat"), 8] == 21.0


# ----------------------------------------------------------------------------- end to end
def test_pipeline_end_to_end_on_a_tiny_corpus(small_world):
    # The world's settings (tests/worlds.py): 330 tweets over 5 labels, 2 held-out compositions, a support of
    # 10, tiny scratch-T5 generators, QC by a tiny encoder to 15 per method, fastText evaluation with R = 2.
    results = small_world.run("compositional")
    ctx, rows = small_world.ctx, small_world.multilabel_rows
    card = check_card(small_world, results["compositional-qc"], "cg_synthetic")
    assert "| QC classifier | `encoder` |" in card and "| kept per method | `15` |" in card
    lake = ctx.lakehouse
    # the planted repeats are quarantined with their reasons, the rest kept
    reasons = lake.read("multilabel_quarantine").groupBy("reason").count().collect()
    assert {r["reason"]: r["count"] for r in reasons} == PLANTED_REASONS
    n_kept = len(rows) + 2 - sum(PLANTED_REASONS.values())
    assert lake.read("multilabel").count() == n_kept
    train, support, test = (lake.read(t).toPandas() for t in ("cg_train", "cg_support", "cg_test"))
    assert len(support) == 10 and len(train) + len(support) + len(test) == n_kept
    assert not set(train["composition"]) & (set(test["composition"]) | set(support["composition"]))
    assert len(lake.read("iid_train").toPandas()) == len(train) + 10 and lake.read("iid_test").count() == len(test)

    sets = lake.read("cg_label_sets").toPandas()
    assert sets["draws"].sum() == 30 and not set(sets["composition"]) & set(train["composition"])
    prompts = lake.read("cg_prompts").count()
    assert prompts == 3 * 30  # accepted draws x generators
    candidates = lake.read("cg_candidates").toPandas()
    assert len(candidates) == prompts and candidates["example_id"].is_unique
    synthetic = lake.read("cg_synthetic").toPandas()
    assert len(synthetic) + lake.read("cg_rejects").count() == prompts
    assert synthetic.groupby("method").size().le(15).all() and synthetic["rank"].le(15).all()
    assert results["compositional-qc"].metrics["rejects"] == prompts - len(synthetic)
    # no synthetic text copies a test text, CG or iid (case-folded), and no split shares a text
    tests = set(test["text"].str.lower()) | set(lake.read("iid_test").toPandas()["text"].str.lower())
    assert not set(synthetic["text"].str.lower()) & tests
    assert not set(train["text"].str.lower()) & set(test["text"].str.lower())
    assert set(lake.read("cg_qc_predictions").toPandas()["model"]) == {"encoder"}
    # the label-prefix generator's model folder holds its prefix table
    import os

    models = os.listdir(ctx.cfg.lakehouse.root + "/models")
    prefix_model = [m for m in models if m.startswith("cg_label_prefix-")]
    assert prefix_model and os.path.isfile(f"{ctx.cfg.lakehouse.root}/models/{prefix_model[0]}/label_prefix.json")

    res = lake.read("compositional_results").toPandas()
    methods = set(synthetic["method"])
    assert set(res[res["split_kind"] == "cg"]["method"]) == {"no_aug"} | methods
    assert set(res[res["split_kind"] == "iid"]["method"]) == {"no_aug"}
    for metric in ("jaccard", "accuracy", "correctness", "completeness"):
        assert res[metric].between(0, 1).all()
    assert (res[res["split_kind"] == "cg"]["n_test"] == len(test)).all()
    aug = res[(res["method"] != "no_aug")]
    base_train = res[(res["split_kind"] == "cg") & (res["method"] == "no_aug")]["n_train"].iloc[0]
    assert (aug["n_train"] == base_train + aug["n_augmented"]).all()
    assert res.groupby(["split_kind", "method", "size"]).size().eq(2).all()  # R seeds each
    report = open(ctx.cfg.lakehouse.root + "/reports/compositional/report.md", encoding="utf-8").read()
    assert "no_aug" in report and "Accuracy vs synthetic size" in report

    again = small_world.rerun("compositional")
    assert all(out.skipped for r in again for out in r.outputs.values())
    # Each job found its tables written before computing anything: the QC job trained no classifier (it
    # returns metrics only after judging the candidates) and logged no metrics.
    qc = next(r for r in again if r.job == "compositional-qc")
    assert set(qc.outputs) == {"cg_synthetic", "cg_rejects"} and not qc.metrics


def test_config_hashes_count_only_the_classifiers_that_run():
    from common.models.classifier_config import EncoderConfig, used_settings

    base = EvalConfig(models=["fasttext"])
    other_encoder = EvalConfig(models=["fasttext"], encoder=EncoderConfig(epochs=9))
    assert used_settings(base, base.models) == used_settings(other_encoder, other_encoder.models)
    both = EvalConfig(models=["fasttext", "encoder"])
    assert "encoder" in used_settings(both, both.models) and "fasttext" in used_settings(both, both.models)
    qc = QualityConfig(model="encoder")
    assert "fasttext" not in used_settings(qc, [qc.model]) and used_settings(qc, [qc.model])["target"] == 1000
