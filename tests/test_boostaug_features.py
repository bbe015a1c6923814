"""BoostAug's ``features`` surrogate (a head per fold on frozen MiniLM sentence embeddings): the logistic
head's choice of C and its softmax, and the MLP head's probabilities, against scikit-learn's; the fold heads
fitted in one Ray task and judging embedded candidates in the scoring actor; the filter job embedding the
candidates once and re-scoring them with a new head without embedding again.

The encoder work runs in a Ray task of torch's workers, never in the test process (see test_boostaug_encoder:
fastText trains on uninitialised memory, and in-process fastText tests must not inherit torch's heap).
"""

from __future__ import annotations

import numpy as np
import pytest
from worlds import NEGATIVE_REVIEWS, POSITIVE_REVIEWS, write_reviews_csv

from common.boostaug.config import FeatureSurrogateConfig, SurrogateConfig
from common.boostaug.feature_surrogate import fit_head, fit_mlp_head, predict

POSITIVE, NEGATIVE = POSITIVE_REVIEWS, NEGATIVE_REVIEWS


def _clusters(n: int, classes: int, scale: float, seed: int) -> tuple[np.ndarray, list[str]]:
    """``n`` points per class around orthogonal centres of length ``scale`` in 8 dimensions, with noise."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([scale * np.eye(8)[k] + 0.3 * rng.standard_normal((n, 8)) for k in range(classes)])
    return x.astype(np.float32), [f"c{k}" for k in range(classes) for _ in range(n)]


@pytest.mark.parametrize("classes", [2, 3])
def test_head_predicts_scikit_learns_softmax(classes):
    from sklearn.linear_model import LogisticRegression

    x, y = _clusters(30, classes, 1.0, 0)
    x_val, y_val = _clusters(10, classes, 1.0, 1)
    head, figures = fit_head(x, y, x_val, y_val, [1.0], seed=0)
    labels, confidence = predict(head, x_val)
    reference = LogisticRegression(C=1.0, max_iter=1000, random_state=0).fit(x, y)
    assert labels == list(reference.predict(x_val))
    np.testing.assert_allclose(confidence, reference.predict_proba(x_val).max(axis=1), rtol=1e-4)
    assert head["coef"].shape == (classes, 8)  # two classes too: one row per label
    assert figures["classes"] == classes and figures["rows"] == 30 * classes
    assert figures["val_accuracy"] == pytest.approx(float(np.mean(np.asarray(labels) == np.asarray(y_val))))


def test_head_takes_the_c_that_validates_best():
    # A strong penalty (C = 1e-4) flattens the weights, so the unpenalised intercepts decide: every validation
    # point goes to the majority class of an unbalanced training set, a third right; C = 100 separates them.
    x, y = _clusters(60, 3, 1.5, 0)
    keep = [i for i, label in enumerate(y) if label == "c0" or i % 4 == 0]
    x, y = x[keep], [y[i] for i in keep]
    x_val, y_val = _clusters(20, 3, 1.5, 1)
    head, figures = fit_head(x, y, x_val, y_val, [100.0, 1e-4], seed=0)
    assert figures["C"] == 100.0 and figures["val_accuracy"] > 0.9
    weak, weak_figures = fit_head(x, y, x_val, y_val, [1e-4], seed=0)
    assert set(predict(weak, x_val)[0]) == {"c0"} and weak_figures["val_accuracy"] == pytest.approx(1 / 3)
    # equal validation accuracy: the smaller C, whatever the grid's order
    _, tie = fit_head(x, y, x_val, y_val, [1000.0, 100.0], seed=0)
    assert tie["C"] == 100.0
    with pytest.raises(ValueError, match="two classes"):
        fit_head(x[:60], y[:60], x_val, y_val, [1.0], seed=0)


@pytest.mark.parametrize("classes", [2, 3])
def test_mlp_head_predicts_scikit_learns_probabilities(classes):
    from sklearn.neural_network import MLPClassifier

    x, y = _clusters(30, classes, 1.0, 0)
    x_val, y_val = _clusters(10, classes, 1.0, 1)
    head, figures = fit_mlp_head(x, y, x_val, y_val, hidden=16, max_iter=1000, seed=3)
    labels, confidence = predict(head, x_val)
    reference = MLPClassifier(hidden_layer_sizes=(16,), max_iter=1000, random_state=3).fit(x, y)
    assert labels == list(reference.predict(x_val))
    np.testing.assert_allclose(confidence, reference.predict_proba(x_val).max(axis=1), rtol=1e-4)
    assert head["w2"].shape == (16, classes)  # two classes too: one column per label
    assert figures["hidden"] == 16 and 1 <= figures["epochs"] < 1000 and figures["rows"] == 30 * classes
    assert figures["val_accuracy"] == pytest.approx(float(np.mean(np.asarray(labels) == np.asarray(y_val))))
    # trained until its loss stops falling (before the 1,000-epoch budget), it is surer of separable points
    # than the C = 1 logistic head
    logistic, _ = fit_head(x, y, x_val, y_val, [1.0], seed=0)
    assert np.mean(confidence) > np.mean(predict(logistic, x_val)[1])
    assert predict(head, np.zeros((0, 0), np.float32)) == ([], [])  # an empty block of the scoring pool
    with pytest.raises(ValueError, match="two classes"):
        fit_mlp_head(x[:30], y[:30], x_val, y_val, hidden=16, max_iter=10, seed=0)


def test_config_checks():
    with pytest.raises(ValueError, match="c_grid"):
        FeatureSurrogateConfig(c_grid=[])
    with pytest.raises(ValueError, match="c_grid"):
        FeatureSurrogateConfig(c_grid=[0.0, 1.0])
    with pytest.raises(ValueError, match="hidden"):
        FeatureSurrogateConfig(hidden=0)
    # the head and its pool's resources do not change a candidate's embedding; the encoder does
    base = FeatureSurrogateConfig()
    assert (
        FeatureSurrogateConfig(head="mlp", concurrency=2, calls_per_actor=1).encoder_settings()
        == base.encoder_settings()
    )
    assert FeatureSurrogateConfig(compute_type="float32").encoder_settings() != base.encoder_settings()
    # the layer the embedding is read from is the encoder's; all layers (the default) keep the key of before it
    assert FeatureSurrogateConfig(layers=3).encoder_settings() != base.encoder_settings()
    assert "layers" not in base.encoder_settings()
    with pytest.raises(ValueError, match="layers"):
        FeatureSurrogateConfig(layers=-1)
    with pytest.raises(ValueError, match="calls_per_actor"):
        FeatureSurrogateConfig(calls_per_actor=0)
    assert (
        SurrogateConfig(kind="features", features=FeatureSurrogateConfig(concurrency=2)).scoring_settings()
        == SurrogateConfig(kind="features").scoring_settings()
        != SurrogateConfig(kind="features", features=FeatureSurrogateConfig(head="logistic")).scoring_settings()
    )
    assert SurrogateConfig(kind="features").features.encoder is None  # the packaged MiniLM
    # the local default: an MLP head on frozen features (SST-2 measured; docs/pipelines/boostaug.md)
    assert (SurrogateConfig().kind, SurrogateConfig().features.head) == ("features", "mlp")


def _fit_and_judge(folder: str, head: str) -> dict:
    """Three folds of the sentences above: fit the fold heads and the MonoAug head in one call, then embed
    a batch of candidates (one per fold, and a clear one of each class) in the embedding actor's class and
    judge them in the scoring actor's class."""
    from pathlib import Path

    import pandas as pd
    import pyarrow as pa

    from common.boostaug.feature_surrogate import (
        CandidateEmbedder,
        FeatureHeadScorer,
        embeddings_of,
        fit_surrogates,
        load_head,
    )
    from common.boostaug.surrogate import fold_plans, mono_plan, surrogate_sources

    rows = [
        (t, label, "train", i % 3)
        for texts, label in ((POSITIVE, "pos"), (NEGATIVE, "neg"))
        for i, t in enumerate(texts)
    ]
    rows += [("a fine film", "pos", "dev", -1), ("a poor film", "neg", "dev", -1)]
    path = Path(folder, "texts.parquet")
    pd.DataFrame(rows, columns=["text", "label", "split", "fold"]).to_parquet(path)
    spec = FeatureSurrogateConfig(head=head, c_grid=[1.0, 10.0, 100.0], hidden=32, batch_size=4)
    plans = fold_plans(3) + [mono_plan(3)]
    jobs = []
    for plan in plans:
        train, validation = surrogate_sources([str(path)], plan)
        jobs.append({"train": train, "validation": validation, "out_dir": f"{folder}/{plan.boost}"})
    figures = fit_surrogates(jobs, spec, seed=7)
    folds = {p.boost: f["uri"] for p, f in zip(plans, figures) if p.boost is not None}
    texts = [
        "a great and moving film",
        "a dull and tedious mess",
        "truly wonderful acting , a delight",
        None,
        "a dull and tedious mess",
    ]
    embedded = CandidateEmbedder(spec)(pa.table({"fold": [0, 1, 2, 0, 2], "text": texts}))
    x = embeddings_of(embedded.column("embedding"))
    judged = FeatureHeadScorer(folds, figures[-1]["uri"])(embedded).to_pydict()
    return {
        "figures": figures,
        "judged": judged,
        "labels": [list(load_head(f["uri"])["labels"]) for f in figures],
        "norms": np.linalg.norm(x, axis=1).tolist(),
        "repeat_equal": bool(np.array_equal(x[1], x[4])),
        "distinct": bool(not np.allclose(x[0], x[1])),
    }


@pytest.mark.parametrize("head", ["logistic", "mlp"])
def test_fold_heads_fit_in_one_pass_and_judge_candidates(ray_runtime, tmp_path, head):
    import sys

    from ray import cloudpickle

    from common.models.classifiers.text_classifier import run_tasks

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import a test module
    out = run_tasks(ray_runtime, _fit_and_judge, [{"folder": str(tmp_path), "head": head}], torch=True)[0]
    figures = out["figures"]
    # 18 training sentences in 3 folds of 6: a fold surrogate trains on the one fold that is neither its
    # boosting nor its validation fold; MonoAug on all three
    assert [f["rows"] for f in figures] == [6, 6, 6, 18]
    assert len({f["embed_seconds"] for f in figures}) == 1  # one embedding pass served every head
    if head == "logistic":
        assert all(f["C"] in (1.0, 10.0, 100.0) for f in figures)
    else:
        assert all(f["hidden"] == 32 and f["epochs"] >= 1 for f in figures)
    assert all(0 <= f["val_accuracy"] <= 1 for f in figures)
    assert all(labels == ["neg", "pos"] for labels in out["labels"])
    # unit-length embeddings; a repeated text gets its first copy's embedding
    assert out["norms"] == pytest.approx([1.0] * 5, abs=1e-5) and out["repeat_equal"] and out["distinct"]
    judged = out["judged"]
    assert "embedding" not in judged  # the scored rows do not carry the vectors
    assert judged["text"][3] is None and len(judged["confidence"]) == 5
    assert all(0.5 <= c <= 1.0 for c in judged["confidence"] + judged["mono_confidence"])
    assert judged["pred_label"][:3] == ["pos", "neg", "pos"] and judged["mono_label"][:3] == ["pos", "neg", "pos"]
    # no language model: the perplexity columns are null, and the perplexity filter passes every candidate
    assert judged["perplexity"] == [None] * 5 and judged["mono_perplexity_limit"] == [None] * 5


def _embed_alone(texts: list, spec: FeatureSurrogateConfig) -> np.ndarray:
    """``texts``' embeddings by ``spec``'s encoder in one call, outside any pool."""
    from common.boostaug.feature_surrogate import embed, sentence_encoder

    return embed(sentence_encoder(spec), texts, spec.batch_size)


def test_filter_job_scores_on_the_feature_pool_and_refilters_without_rescoring(ctx, tmp_path):
    import sys

    from pyspark.sql import functions as F
    from ray import cloudpickle

    from common.boostaug.config import BoostAugConfig, EvalConfig, FilterConfig
    from common.data.config import InputSpec
    from common.models.classifiers.text_classifier import run_tasks
    from jobs import run_pipeline

    write_reviews_csv(tmp_path / "texts.csv", per_label=9, n_train=7)
    ctx.cfg.inputs.texts = InputSpec(path=str(tmp_path / "texts.csv"))
    ctx.cfg.boostaug = BoostAugConfig(
        backends=["eda"],
        n_aug=1,
        folds=3,
        surrogate=SurrogateConfig(
            kind="features", features=FeatureSurrogateConfig(head="logistic", c_grid=[10.0], batch_size=8)
        ),
        filter=FilterConfig(confidence_threshold=0.0),
        eval=EvalConfig(curve=[0, 1]),
    )
    jobs = ["ingest-texts", "boostaug-splits", "boostaug-augment", "boostaug-filter"]
    by_job = {r.job: r for r in run_pipeline(ctx, "boostaug", jobs)}
    lake = ctx.lakehouse
    scored = lake.read("boostaug_scored")
    assert scored.count() == lake.read("boostaug_candidates").count() == 14 * 2  # 14 train texts x 2·Ñ
    row = scored.agg(
        F.min("confidence"),
        F.max("confidence"),
        F.count("perplexity"),
        F.count("mono_confidence"),
        F.countDistinct("fold"),
    ).first()
    assert 0.5 <= row[0] <= row[1] <= 1.0 and row[2] == 0 and row[3] == 28 and row[4] == 3
    kept, rejects = lake.read("boostaug_kept"), lake.read("boostaug_rejects")
    assert kept.count() + rejects.count() == 28 and kept.count() > 0
    assert kept.filter(F.col("pred_label") != F.col("label")).count() == 0
    assert by_job["boostaug-filter"].metrics["candidates"] == 28

    # every candidate embedded once, with its candidate's columns; the scored rows drop the vectors
    embedded = lake.read("boostaug_candidate_embeddings")
    assert embedded.count() == 28 and embedded.filter(F.size("embedding") != 384).count() == 0
    # 4 blocks of 8, two at once on the actor (calls_per_actor): each row holds its own text's vector
    spec = ctx.cfg.boostaug.surrogate.features
    assert spec.calls_per_actor == 2
    rows = embedded.select("text", "embedding").toPandas()
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import a test module
    alone = run_tasks(ctx.ray(), _embed_alone, [{"texts": list(rows["text"]), "spec": spec}], torch=True)[0]
    np.testing.assert_allclose(np.stack(rows["embedding"]), alone, atol=1e-5)
    assert "embedding" not in scored.columns

    # a new confidence threshold re-filters the scored version: no head is fitted or candidate embedded again
    ctx.cfg.boostaug.filter.confidence_threshold = 0.7
    again = {r.job: r for r in run_pipeline(ctx, "boostaug", ["boostaug-filter"])}
    assert again["boostaug-filter"].outputs["boostaug_scored"].skipped
    assert lake.read("boostaug_kept").filter(F.col("confidence") <= 0.7).count() == 0

    # a new head re-scores the stored embeddings: a new scored version, the embeddings version unchanged
    embeddings_version = lake.version("boostaug_candidate_embeddings")
    ctx.cfg.boostaug.surrogate.features.head = "mlp"
    mlp = {r.job: r for r in run_pipeline(ctx, "boostaug", ["boostaug-filter"])}["boostaug-filter"].outputs
    assert mlp["boostaug_candidate_embeddings"].skipped and not mlp["boostaug_scored"].skipped
    assert lake.version("boostaug_candidate_embeddings") == embeddings_version
    assert lake.read("boostaug_scored").count() == 28
