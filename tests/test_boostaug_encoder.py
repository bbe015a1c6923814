"""BoostAug's encoder surrogate (MiniLM fine-tuned with a masked-LM head alongside): pseudo-perplexity against
a one-mask-at-a-time computation, masking, model choice and calibration, and a tiny pipeline run that trains
the fold surrogates in Ray tasks and scores on the Ray Data actor pool.

The torch work runs in Ray tasks whose worker exits afterwards, never in the test process: fastText trains on
uninitialised memory, and in a process whose heap torch has shaped, the later in-process fastText tests
(test_classifier) would get models that differ from a clean process's.
"""

from __future__ import annotations

import json
import math

import pytest
from worlds import NEGATIVE_REVIEWS, POSITIVE_REVIEWS, write_reviews_csv

from common.boostaug.config import BoostAugConfig, EncoderConfig, EvalConfig, FilterConfig, SurrogateConfig

POSITIVE, NEGATIVE = POSITIVE_REVIEWS[:8], NEGATIVE_REVIEWS[:8]
PPL_TEXTS = ["a great and moving film", "boring", "", "the worst film this year , truly"]

TINY = EncoderConfig(max_length=16, epochs=2, batch_size=8, learning_rate=3e-4, max_batch_tokens=64, num_cpus=2)


def _in_fresh_worker(ray_runtime, function, *args):
    """``function(*args)`` in a Ray task of its own worker process (which exits afterwards)."""
    import sys

    import ray
    from ray import cloudpickle

    # Ray workers cannot import a test module: ship its functions by value.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    return ray.get(ray.remote(num_cpus=1, max_calls=1)(function).remote(*args))


def _parquet(path, rows):
    import pandas as pd

    pd.DataFrame(rows, columns=["text", "label"]).to_parquet(path)
    return [([str(path)], None)]


def _fit_and_probe(folder: str) -> dict:
    """Train one tiny surrogate (12 training, 4 validation sentences, 2 epochs), load it, and measure what
    the tests check: its figures, saved calibration, predictions, and batched vs one-at-a-time perplexity."""
    from pathlib import Path

    import torch

    from common.models.classifiers.encoder_classifier import fit_surrogate
    from common.models.classifiers.encoder_surrogate import EncoderScorer

    rows = [(t, "pos") for t in POSITIVE] + [(t, "neg") for t in NEGATIVE]
    train = _parquet(Path(folder, "train.parquet"), rows[:6] + rows[8:14])
    validation = _parquet(Path(folder, "val.parquet"), rows[6:8] + rows[14:])
    figures = fit_surrogate(train, validation, TINY, 7, f"{folder}/model")
    scorer = EncoderScorer(f"{folder}/model")
    lm, tok = scorer.model.lm, scorer.tokenizer
    brute = []
    for text in PPL_TEXTS:
        ids = tok(text, truncation=True, max_length=TINY.max_length, return_tensors="pt")["input_ids"]
        nll = []
        with torch.inference_mode():
            for i in range(1, ids.shape[1] - 1):
                masked = ids.clone()
                masked[0, i] = tok.mask_token_id
                nll.append(-float(lm(input_ids=masked).logits[0, i].log_softmax(-1)[ids[0, i]]))
        brute.append(math.exp(sum(nll) / len(nll)) if nll else None)
    return {
        "figures": figures,
        "labels": scorer.labels,
        "has_mlm": scorer.has_mlm,
        "validation_perplexities": scorer.validation_perplexities,
        "limit_none": scorer.perplexity_limit(None),
        "limit_max": scorer.perplexity_limit(1.0),
        # max_batch_tokens 64 with widths up to 10 cuts the 20-odd masked copies into several batches
        "fast": scorer.pseudo_perplexity(PPL_TEXTS),
        "brute": brute,
        "classified": scorer.classify(["a great and moving film", "a dull and tedious mess"]),
    }


@pytest.fixture(scope="module")
def probe(ray_runtime, tmp_path_factory):
    return _in_fresh_worker(ray_runtime, _fit_and_probe, str(tmp_path_factory.mktemp("encoder")))


def _masking_case() -> dict:
    import torch

    from common.models.classifiers.encoder_classifier import _mask_tokens

    ids = torch.tensor([[101, 5, 6, 7, 102, 0], [101, 8, 102, 0, 0, 0]])
    special = torch.tensor([[1, 0, 0, 0, 1, 1], [1, 0, 1, 1, 1, 1]]).bool()
    masked, chosen = _mask_tokens(ids, special, 0.01, 103, torch.Generator().manual_seed(0))
    return {
        "every_row": bool(chosen.any(1).all()),
        "special_touched": bool((chosen & special).any()),
        "masked_ok": bool((masked[chosen] == 103).all()),
        "rest_ok": bool((masked[~chosen] == ids[~chosen]).all()),
    }


def test_masking_covers_ordinary_tokens_only_and_every_row(ray_runtime):
    out = _in_fresh_worker(ray_runtime, _masking_case)
    assert out["every_row"]  # a draw of nothing still masks one token per row
    assert not out["special_touched"]
    assert out["masked_ok"] and out["rest_ok"]


def test_surrogate_learns_and_saves_its_choice_and_calibration(probe):
    figures = probe["figures"]
    assert 1 <= figures["epoch"] <= TINY.epochs and 0.0 <= figures["val_accuracy"] <= 1.0
    assert figures["rows"] == 12 and figures["device"] in ("cpu", "cuda")
    assert probe["labels"] == ["neg", "pos"] and probe["has_mlm"]
    # the validation texts' pseudo-perplexities, sorted: the calibration of filter.perplexity_quantile
    ppl = probe["validation_perplexities"]
    assert len(ppl) == 4 and ppl == sorted(ppl) and all(p > 1 for p in ppl)
    assert probe["limit_none"] is None
    assert probe["limit_max"] == pytest.approx(ppl[-1])
    assert figures["val_perplexity_median"] == pytest.approx((ppl[1] + ppl[2]) / 2)
    out = probe["classified"]
    assert [label for label, _ in out] == ["pos", "neg"]  # its own training sentences
    assert all(0.5 <= c <= 1.0 for _, c in out)


def test_pseudo_perplexity_equals_masking_each_token_in_turn(probe):
    fast, brute = probe["fast"], probe["brute"]
    assert fast[2] is None and brute[2] is None  # no ordinary token, no perplexity
    for value, expected in zip(fast, brute):
        if expected is not None:
            assert value == pytest.approx(expected, rel=1e-4)


def _plain_classifier(folder: str) -> dict:
    """A classifier without MLM head, fine-tuned from a half-precision copy of MiniLM."""
    import shutil
    from pathlib import Path

    from safetensors.torch import load_file, save_file

    from common.models.classifiers.encoder_classifier import fit_surrogate
    from common.models.classifiers.encoder_surrogate import EncoderScorer
    from common.models.pretrained import minilm_folder

    half = Path(folder, "half")
    shutil.copytree(minilm_folder(), half, ignore=shutil.ignore_patterns("model.safetensors"))
    weights = load_file(str(minilm_folder() / "model.safetensors"))
    save_file(
        {k: v.half() if v.is_floating_point() else v for k, v in weights.items()},
        str(half / "model.safetensors"),
        metadata={"format": "pt"},
    )
    rows = [(t, "pos") for t in POSITIVE[:3]] + [(t, "neg") for t in NEGATIVE[:3]]
    spec = EncoderConfig(name_or_path=str(half), max_length=16, epochs=1, batch_size=8, mlm_weight=0.0, num_cpus=2)
    figures = fit_surrogate(_parquet(Path(folder, "train.parquet"), rows), [], spec, 0, f"{folder}/m")
    scorer = EncoderScorer(f"{folder}/m")
    saved = load_file(str(Path(folder, "m", "lm", "model.safetensors")))
    return {
        "figures": figures,
        "has_mlm": scorer.has_mlm,
        "calibration": scorer.validation_perplexities,
        "saved_dtypes": sorted({str(v.dtype) for v in saved.values() if v.is_floating_point()}),
        "finite": all(bool(v.isfinite().all()) for v in saved.values() if v.is_floating_point()),
    }


def test_plain_classifier_has_no_perplexity_and_trains_a_half_checkpoint_in_float32(ray_runtime, tmp_path):
    out = _in_fresh_worker(ray_runtime, _plain_classifier, str(tmp_path))
    assert not out["has_mlm"] and out["calibration"] == []
    assert math.isnan(out["figures"]["val_accuracy"]) and out["figures"]["epoch"] == 1
    # transformers 5 loads a checkpoint in its saved dtype; fit_surrogate asks for float32 (no loss scaler)
    assert out["saved_dtypes"] == ["torch.float32"] and out["finite"]


def test_encoder_config_checks():
    with pytest.raises(ValueError, match="max_batch_tokens"):
        EncoderConfig(max_length=128, max_batch_tokens=64)
    with pytest.raises(ValueError, match="perplexity_quantile"):
        FilterConfig(perplexity_quantile=1.5)


@pytest.mark.slow  # a whole pipeline, minutes on 2 cores: make test runs it, make test-fast not
def _classify(folder: str, texts: list[str]) -> list:
    """The suite's own scoring of a kept encoder classifier: (label, confidence) per text."""
    from common.models.classifiers.encoder_surrogate import EncoderScorer

    return EncoderScorer(folder).classify(texts)


def test_pipeline_with_encoder_surrogates_on_the_ray_data_pool(ctx, ray_runtime, tmp_path):
    import mlflow
    from pyspark.sql import functions as F
    from shipped_models import fresh_predictions

    from common.data.config import InputSpec
    from common.evaluation.paired import paired
    from common.registry.compare import paired_cells
    from common.registry.store import registry_client
    from jobs import run_pipeline

    write_reviews_csv(tmp_path / "texts.csv", per_label=8, n_train=6)
    ctx.cfg.inputs.texts = InputSpec(path=str(tmp_path / "texts.csv"))
    tiny = dict(max_length=16, epochs=1, batch_size=8, learning_rate=3e-4, max_batch_tokens=256, score_batch_size=16)
    ctx.cfg.boostaug = BoostAugConfig(
        backends=["eda"],
        n_aug=1,
        folds=3,
        surrogate=SurrogateConfig(kind="encoder", encoder=EncoderConfig(**tiny)),
        filter=FilterConfig(confidence_threshold=0.0, perplexity_quantile=0.99),
        eval=EvalConfig(models=["fasttext", "encoder"], repeats=1, curve=[0, 1], encoder=EncoderConfig(**tiny)),
    )
    results = run_pipeline(ctx, "boostaug")
    lake = ctx.lakehouse
    candidates = lake.read("boostaug_candidates")
    scored = lake.read("boostaug_scored")
    assert candidates.count() == 12 * 2 and scored.count() == candidates.count()  # 12 train texts x 2·Ñ
    row = scored.agg(
        F.min("confidence"),
        F.min("perplexity"),
        F.count("perplexity_limit"),
        F.count("mono_perplexity"),
        F.countDistinct("fold"),
    ).first()
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

    # each main variant's seed-0 classifier of each model ships; the encoder's loads in a process without the suite
    # and predicts as the suite's scorer, and scores on the gate's path (the registered loader in a fresh worker,
    # beside itself) to its recorded accuracy
    client, prefix = registry_client(ctx), ctx.cfg.registry.name_prefix
    for method in ("none", "eda", "eda_boostaug"):
        for model in ("fasttext", "encoder"):
            name = f"{prefix}boostaug_{method}{'' if model == 'fasttext' else '_encoder'}"
            version = client.get_model_version_by_alias(name, "champion")
            assert str(version.version) == "1" and version.tags["classifier"] == model
    uri = f"models:/{prefix}boostaug_eda_boostaug_encoder@champion"
    model = tmp_path / "shipped"
    mlflow.artifacts.download_artifacts(uri, dst_path=str(model), tracking_uri=ctx.cfg.tracking_uri)
    assert "torch==" in (model / "requirements.txt").read_text()
    texts = ["a great and moving film", "a dull and tedious mess", "", "Ünïcode — ROT?"]
    got = fresh_predictions(ctx.cfg.tracking_uri, [uri], texts, tmp_path)[uri]
    assert [c["name"] for c in json.loads(got["signature"]["outputs"])] == ["label", "confidence"]
    suite = _in_fresh_worker(ray_runtime, _classify, str(model / "data" / "classifier"), texts)
    assert got["predictions"]["label"] == [label for label, _ in suite]
    assert got["predictions"]["confidence"] == pytest.approx([c for _, c in suite], abs=1e-6)
    test = [([str(tmp_path / "test.parquet")], None)]
    lake.read("boostaug_texts").filter("split = 'test'").select("text", "label").toPandas().to_parquet(test[0][0][0])
    seed0 = res[(res["model"] == "encoder") & (res["method"] == "eda+boostaug") & (res["repeat"] == 0)]
    folder = str(model / "data" / "classifier")
    cells = _in_fresh_worker(ray_runtime, paired_cells, folder, folder, test)
    assert all(k[1] == k[2] for k, _ in cells["rows"])  # one artifact twice: the same predictions
    assert paired("accuracy", cells, 0.95, 100, 0).candidate == pytest.approx(float(seed0["accuracy"].iloc[0]))

    # a new confidence threshold re-filters the scored version: no surrogate is trained again (the filter job
    # alone: evaluating the new kept set again would retrain every classifier, a minute here, for no assertion)
    ctx.cfg.boostaug.filter.confidence_threshold = 0.5
    again = {r.job: r for r in run_pipeline(ctx, "boostaug", ["boostaug-filter"])}
    assert again["boostaug-filter"].outputs["boostaug_scored"].skipped
    assert not again["boostaug-filter"].outputs["boostaug_kept"].skipped
    assert lake.read("boostaug_kept").filter(F.col("confidence") <= 0.5).count() == 0


def test_minilm_loads_as_a_masked_lm_without_transformers_calling_it_corrupted(capfd):
    """all-MiniLM-L6-v2 has no masked-LM head by design: the surrogate's head starts fresh, and the log says so in one
    line instead of transformers' "This checkpoint seem corrupted" and its table of missing keys (which a plain load
    prints: the test would see them)."""
    from transformers import AutoModelForMaskedLM

    from common.models.pretrained import masked_lm, minilm_folder

    capfd.readouterr()
    AutoModelForMaskedLM.from_pretrained(str(minilm_folder()), use_safetensors=True)
    assert "seem corrupted" in capfd.readouterr().err  # what the plain load logs
    model = masked_lm(str(minilm_folder()))
    logged = capfd.readouterr()
    assert "seem corrupted" not in logged.err + logged.out and "MISSING" not in logged.err + logged.out
    assert model.cls.predictions.decoder.out_features == model.config.vocab_size  # the fresh head is there
