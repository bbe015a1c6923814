"""BoostAug's contextual-substitution backend: seeded span masking, the infiller's training pairs, and a
tiny run of the augment and filter jobs with a scratch T5 infiller (fine-tuned and sampling on Ray)."""

from __future__ import annotations

import pytest

from common.boostaug import contextual as C
from common.boostaug.backends import rng_for
from common.boostaug.config import BoostAugConfig, ContextualConfig, EvalConfig, FilterConfig, SurrogateConfig
from common.models.config import FineTuneConfig, GenerationConfig, ScratchT5Config, T5ModelConfig
from common.platform.config import ConfigError

SENTENCE = "a stirring , funny and finally transporting re-imagining of beauty and the beast"


def test_mask_span_is_seeded_and_cuts_the_text_into_three_parts():
    words = SENTENCE.split()  # 13 words x 0.1 rounds to 1; x 0.3 to 4, capped at 3
    seen = set()
    for i in range(30):
        left, span, right = C.mask_span(SENTENCE, rng_for(42, "s1", C.BACKEND, i), 0.1, 3)
        assert " ".join(p for p in (left, span, right) if p) == SENTENCE and len(span.split()) == 1
        assert (left, span, right) == C.mask_span(SENTENCE, rng_for(42, "s1", C.BACKEND, i), 0.1, 3)
        seen.add(len(left.split()))
        long = C.mask_span(SENTENCE, rng_for(42, "s1", C.BACKEND, i), 0.3, 3)
        assert len(long[1].split()) == 3
    assert len(seen) > 5  # the span moves over the text
    assert C.mask_span("one", rng_for(1, "x", C.BACKEND, 0), 0.1, 3) == ("", "one", "")
    assert C.masked("", "the end", "[MASK]") == "[MASK] the end"
    assert C.masked("at the", "", "[MASK]") == "at the [MASK]"
    assert len(words) == 13


def test_infill_tables_and_candidate_assembly(spark):
    from pyspark.sql import functions as F

    train = spark.createDataFrame(
        [("s1", 0, SENTENCE, "pos"), ("s2", 1, "dull", "neg")], "source_id string, fold int, text string, label string"
    )
    pairs = C.infill_pairs(train, 2, 0.1, 3, "[MASK]", 42).orderBy("pair_id").collect()
    assert [r["pair_id"] for r in pairs] == ["s1:0", "s1:1", "s2:0", "s2:1"]
    for r in pairs:
        assert r["source_text"].count("[MASK]") == 1 and r["target_text"]
        assert r["source_text"].replace("[MASK]", r["target_text"]) in (SENTENCE, "dull")
    prompts = C.infill_prompts(train, 4, 0.1, 3, "[MASK]", 42)
    assert prompts.count() == 8
    # the candidates' spans come from another stream than the training pairs' spans
    first = prompts.filter("prompt_id = 's1:0'").first()
    assert first["prompt"] == C.masked(first["left_text"], first["right_text"], "[MASK]")

    generated = spark.createDataFrame(
        [
            ("s1:0", "hilarious", None),
            ("s1:1", "", None),
            ("s1:2", None, "input over 64 tokens"),
            ("s2:0", "", None),
            ("s2:1", "bland", None),
            ("s2:2", "  very   dull ", None),
        ],
        "source_id string, generated_text string, reason string",
    )
    out = {r["source_id"] + ":" + str(r["aug_idx"]): r for r in C.contextual_candidates(prompts, generated).collect()}
    assert len(out) == 8  # one row per prompt
    p = {r["prompt_id"]: r for r in prompts.collect()}
    assert out["s1:0"]["text"] == " ".join(f"{p['s1:0']['left_text']} hilarious {p['s1:0']['right_text']}".split())
    assert out["s1:0"]["reason"] is None and out["s1:0"]["backend"] == "contextual"
    assert out["s1:1"]["reason"] is None and len(out["s1:1"]["text"].split()) == 12  # an empty fill deletes the span
    assert out["s1:2"]["reason"] == "input over 64 tokens"  # the generation's quarantine reason
    assert out["s1:3"]["reason"] == "no generation"
    assert out["s2:0"]["reason"] == "empty text" and out["s2:1"]["text"] == "bland"
    assert out["s2:2"]["text"] == "very dull"
    assert C.contextual_candidates(prompts, generated).filter(F.col("reason").isNull()).count() == 4


def test_contextual_config_checks():
    with pytest.raises(ConfigError, match="n_samples"):
        ContextualConfig(generation=GenerationConfig(n_samples=2))
    with pytest.raises(ConfigError, match="contextual.mask"):
        ContextualConfig(mask=" ")
    assert ContextualConfig().model.kind == "warm_minilm" and ContextualConfig().generation.engine == "ctranslate2"


def test_augment_and_filter_jobs_with_a_scratch_infiller(ctx):
    from pyspark.sql import functions as F

    from jobs import run_pipeline

    infiller = ContextualConfig(
        model=T5ModelConfig(
            kind="scratch_t5",
            scratch=ScratchT5Config(vocab_size=300, d_model=32, d_ff=64, num_layers=1, num_heads=4),
            max_source_length=48,
            max_target_length=8,
        ),
        fine_tune=FineTuneConfig(epochs=2, learning_rate=3e-3, batch_size=32, checkpoint_every=0),
        generation=GenerationConfig(engine="ctranslate2", n_samples=1, max_new_tokens=6, max_source_tokens=48),
    )
    ctx.cfg.boostaug = BoostAugConfig(
        backends=["split", "contextual"],
        n_aug=2,
        folds=3,
        label_level=1,
        contextual=infiller,
        surrogate=SurrogateConfig(kind="fasttext", epochs=[50]),
        filter=FilterConfig(confidence_threshold=0.6),
        eval=EvalConfig(repeats=1, curve=[0, 2], ablation_backend="contextual"),
    )
    jobs = ["generate-demo", "ingest-texts", "boostaug-splits", "boostaug-augment", "boostaug-filter"]
    results = {r.job: r for r in run_pipeline(ctx, "boostaug", jobs)}
    lake = ctx.lakehouse
    n_train = lake.read("boostaug_texts").filter("split = 'train'").count()
    pairs, prompts = lake.read("boostaug_infill_pairs"), lake.read("boostaug_infill_prompts")
    assert pairs.count() == 2 * n_train and prompts.count() == 4 * n_train
    assert pairs.filter(~F.col("source_text").contains("[MASK]")).count() == 0
    candidates = lake.read("boostaug_candidates")
    ctx_rows = candidates.filter(F.col("backend") == "contextual")
    rejected = lake.read("boostaug_contextual_rejects")
    assert ctx_rows.count() + rejected.count() == prompts.count()  # prompts = candidates + rejected
    assert ctx_rows.count() > 0 and candidates.filter(F.col("backend") == "split").count() == 4 * n_train
    # each candidate keeps the words around its prompt's span
    joined = ctx_rows.join(prompts.select("source_id", "aug_idx", "left_text", "right_text"), ["source_id", "aug_idx"])
    assert (
        joined.filter(
            ~F.col("text").startswith(F.col("left_text")) | ~F.col("text").endswith(F.col("right_text"))
        ).count()
        == 0
    )
    assert results["boostaug-augment"].metrics["contextual.prompts"] == 4 * n_train
    kept, rejects = lake.read("boostaug_kept"), lake.read("boostaug_rejects")
    assert kept.count() + rejects.count() == candidates.count()

    again = run_pipeline(ctx, "boostaug", jobs)  # same config, same inputs: nothing new
    assert all(out.skipped for r in again for out in r.outputs.values())
