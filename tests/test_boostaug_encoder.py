"""BoostAug's encoder surrogate (MiniLM fine-tuned with a masked-LM head alongside): pseudo-perplexity against
a one-mask-at-a-time computation, masking, model choice and calibration, and a tiny pipeline run that trains
the fold surrogates in Ray tasks and scores on the Ray Data actor pool."""
from __future__ import annotations

import math

import pytest

from common.boostaug.config import BoostAugConfig, EncoderConfig, EvalConfig, FilterConfig, SurrogateConfig
from common.boostaug.encoder import EncoderScorer, EncoderSpec, _mask_tokens, fit_surrogate

POSITIVE = ["a great and moving film", "truly wonderful acting", "funny , warm and smart", "a delightful story",
            "brilliant and beautiful", "the best film this year", "charming , witty fun", "an excellent cast"]
NEGATIVE = ["a dull and tedious mess", "truly awful acting", "boring , cold and stupid", "a dreadful story",
            "ugly and pointless", "the worst film this year", "lifeless , witless junk", "a terrible cast"]

TINY = EncoderSpec(max_length=16, epochs=2, batch_size=8, learning_rate=3e-4, max_batch_tokens=64, threads=2)


def _parquet(path, rows):
    import pandas as pd

    pd.DataFrame(rows, columns=["text", "label"]).to_parquet(path)
    return [([str(path)], None)]


@pytest.fixture(scope="module")
def surrogate(tmp_path_factory):
    """One tiny surrogate: 12 training sentences, 4 validation sentences, 2 epochs."""
    folder = tmp_path_factory.mktemp("encoder")
    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    train = _parquet(folder / "train.parquet", rows[:6] + rows[8:14])
    validation = _parquet(folder / "val.parquet", rows[6:8] + rows[14:])
    figures = fit_surrogate(train, validation, TINY, 7, str(folder / "model"))
    return figures, EncoderScorer(str(folder / "model"))


def test_masking_covers_ordinary_tokens_only_and_every_row():
    import torch

    ids = torch.tensor([[101, 5, 6, 7, 102, 0], [101, 8, 102, 0, 0, 0]])
    special = torch.tensor([[1, 0, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1]]).bool()
    masked, chosen = _mask_tokens(ids, special, 0.01, 103, torch.Generator().manual_seed(0))
    assert chosen.any(1).all()  # a draw of nothing still masks one token per row
    assert not (chosen & special).any()
    assert (masked[chosen] == 103).all() and (masked[~chosen] == ids[~chosen]).all()


def test_surrogate_learns_and_saves_its_choice_and_calibration(surrogate):
    figures, scorer = surrogate
    assert 1 <= figures["epoch"] <= TINY.epochs and 0.0 <= figures["val_accuracy"] <= 1.0
    assert figures["rows"] == 12 and figures["device"] in ("cpu", "cuda")
    assert scorer.labels == ["neg", "pos"] and scorer.has_mlm
    # the validation texts' pseudo-perplexities, sorted: the calibration of filter.perplexity_quantile
    ppl = scorer.validation_perplexities
    assert len(ppl) == 4 and ppl == sorted(ppl) and all(p > 1 for p in ppl)
    assert scorer.perplexity_limit(None) is None
    assert scorer.perplexity_limit(1.0) == pytest.approx(ppl[-1])
    assert figures["val_perplexity_median"] == pytest.approx((ppl[1] + ppl[2]) / 2)
    out = scorer.classify(["a great and moving film", "a dull and tedious mess"])
    assert [label for label, _ in out] == ["pos", "neg"]  # its own training sentences
    assert all(0.5 <= c <= 1.0 for _, c in out)


def test_pseudo_perplexity_equals_masking_each_token_in_turn(surrogate):
    import torch

    _, scorer = surrogate
    texts = ["a great and moving film", "boring", "", "the worst film this year , truly"]
    # max_batch_tokens 64 with widths up to 10 cuts the 20-odd masked copies into several batches
    fast = scorer.pseudo_perplexity(texts)
    assert fast[2] is None  # no ordinary token, no perplexity
    lm, tok = scorer.model.lm, scorer.tokenizer
    for text, value in zip(texts, fast):
        if not text:
            continue
        ids = tok(text, truncation=True, max_length=TINY.max_length, return_tensors="pt")["input_ids"]
        nll = []
        with torch.inference_mode():
            for i in range(1, ids.shape[1] - 1):
                masked = ids.clone()
                masked[0, i] = tok.mask_token_id
                logp = lm(input_ids=masked).logits[0, i].log_softmax(-1)
                nll.append(-float(logp[ids[0, i]]))
        assert value == pytest.approx(math.exp(sum(nll) / len(nll)), rel=1e-4)


def test_plain_classifier_has_no_perplexity(tmp_path):
    rows = [(t, "pos") for t in POSITIVE[:3]] + [(t, "neg") for t in NEGATIVE[:3]]
    train = _parquet(tmp_path / "train.parquet", rows)
    spec = EncoderSpec(max_length=16, epochs=1, batch_size=8, mlm_weight=0.0, threads=2)
    figures = fit_surrogate(train, [], spec, 0, str(tmp_path / "m"))
    scorer = EncoderScorer(str(tmp_path / "m"))
    assert not scorer.has_mlm and scorer.validation_perplexities == []
    assert math.isnan(figures["val_accuracy"]) and figures["epoch"] == 1


def test_encoder_config_checks():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        EncoderConfig(max_length=128, max_batch_tokens=64)
    with pytest.raises(ValueError, match="perplexity_quantile"):
        FilterConfig(perplexity_quantile=1.5)


def test_pipeline_with_encoder_surrogates_on_the_ray_data_pool(ctx, tmp_path):
    from pyspark.sql import functions as F

    from common.data.config import InputSpec
    from jobs import run_pipeline

    import pandas as pd

    rows = [(t, label, "test" if i >= 6 else "train") for texts, label in ((POSITIVE, "pos"), (NEGATIVE, "neg"))
            for i, t in enumerate(texts)]
    rows += [("a fine film", "pos", "dev"), ("a poor film", "neg", "dev")]
    pd.DataFrame(rows, columns=["text", "label", "split"]).to_csv(tmp_path / "texts.csv", index=False)
    ctx.cfg.inputs.texts = InputSpec(path=str(tmp_path / "texts.csv"))
    tiny = dict(max_length=16, epochs=1, batch_size=8, learning_rate=3e-4, max_batch_tokens=256,
                score_batch_size=16)
    ctx.cfg.boostaug = BoostAugConfig(
        backends=["eda"], n_aug=1, folds=3,
        surrogate=SurrogateConfig(kind="encoder", encoder=EncoderConfig(**tiny)),
        filter=FilterConfig(confidence_threshold=0.0, perplexity_quantile=0.99),
        eval=EvalConfig(models=["fasttext", "encoder"], repeats=1, curve=[0, 1],
                        encoder=EncoderConfig(**tiny)))
    results = run_pipeline(ctx, "boostaug")
    lake = ctx.lakehouse
    candidates = lake.read("boostaug_candidates")
    scored = lake.read("boostaug_scored")
    assert candidates.count() == 12 * 2 and scored.count() == candidates.count()  # 12 train texts x 2·Ñ
    row = scored.agg(F.min("confidence"), F.min("perplexity"), F.count("perplexity_limit"),
                     F.count("mono_perplexity"), F.countDistinct("fold")).first()
    assert row[0] >= 0.5 and row[1] > 1.0 and row[2] == 24 and row[3] == 24 and row[4] == 3
    # each fold's candidates carry their own surrogate's calibrated threshold
    limits = scored.groupBy("fold").agg(F.countDistinct("perplexity_limit").alias("n")).collect()
    assert all(r["n"] == 1 for r in limits)
    kept, rejects = lake.read("boostaug_kept"), lake.read("boostaug_rejects")
    assert kept.count() + rejects.count() == 24
    assert kept.filter(F.col("perplexity") >= F.col("perplexity_limit")).count() == 0
    res = lake.read("boostaug_results").toPandas()
    assert set(res["model"]) == {"fasttext", "encoder"}
    assert "eda+boostaug w/o perplexity" in set(res["method"])  # the encoder has a perplexity
    assert res["accuracy"].between(0, 1).all()
    by_job = {r.job: r for r in results}
    assert "encoder.mean.none.accuracy" not in by_job["boostaug-evaluate"].metrics
    assert "mean.encoder.none.accuracy" in by_job["boostaug-evaluate"].metrics

    # a new confidence threshold re-filters the scored version: no surrogate is trained again
    ctx.cfg.boostaug.filter.confidence_threshold = 0.5
    again = {r.job: r for r in run_pipeline(ctx, "boostaug")}
    assert again["boostaug-filter"].outputs["boostaug_scored"].skipped
    assert not again["boostaug-filter"].outputs["boostaug_kept"].skipped
    assert lake.read("boostaug_kept").filter(F.col("confidence") <= 0.5).count() == 0
