"""Spark -> Ray -> Delta handoff, and the BLEU / MiniLM similarity scores against hand-checked pairs."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from common.models.generation.quality.scoring import bleu_scores, cosine_scores
from common.platform.lakehouse.lakehouse import Lineage


def test_spark_table_to_ray_and_back_as_one_delta_version(spark, lakehouse, ray_runtime):
    df = spark.range(5000).select(
        F.col("id").cast("string").alias("source_id"),
        F.concat(F.lit("red mug "), F.col("id").cast("string")).alias("source_text"),
    )
    written = lakehouse.write(df.repartition(4), "sources")
    ds = lakehouse.read_ray("sources", written.version)
    assert ds.count() == 5000 and set(ds.schema().names) == {"source_id", "source_text"}
    upper = ds.map_batches(
        lambda b: {"source_id": b["source_id"], "generated_text": [t.upper() for t in b["source_text"]]},
        batch_format="numpy",
    )
    lineage = Lineage(job="generate", config_hash="c1", inputs={"sources": str(written.version)})
    out = lakehouse.write_ray(upper, "generated", lineage=lineage)
    assert out.version == 0 and out.num_rows == 5000
    again = lakehouse.write_ray(upper, "generated", lineage=lineage)
    assert again.skipped and DeltaTable(lakehouse.location("generated")).version() == 0
    back = lakehouse.read("generated")
    assert back.count() == 5000 and back.filter("generated_text = 'RED MUG 7'").count() == 1
    assert lakehouse.history("generated")[0].lineage["inputs"] == {"sources": "0"}
    # On the native path Spark's Delta writer commits what Ray's workers wrote; its staging folder is gone.
    engine = DeltaTable(lakehouse.location("generated")).history()[0].get("engineInfo", "")
    assert engine.startswith("Apache-Spark/") if lakehouse.native_delta else "delta-rs" in engine
    staging = Path(lakehouse.cfg.root) / "_staging"
    assert not staging.exists() or not any(staging.iterdir())
    # A stage that adds columns to the Arrow batches it read (as the scorers do): the batches carry the
    # Spark-written input's schema in their metadata, and the written version must still have every column.
    import pyarrow as pa

    scored = ds.map_batches(lambda t: t.append_column("score", pa.array([0.5] * len(t))), batch_format="pyarrow")
    lakehouse.write_ray(scored, "scored")
    assert lakehouse.read("scored").columns == ["source_id", "source_text", "score"]
    assert DeltaTable(lakehouse.location("scored")).to_pyarrow_table().column_names == [
        "source_id",
        "source_text",
        "score",
    ]


def test_failed_ray_write_leaves_no_version(lakehouse, ray_runtime):
    import ray

    def explode(batch):
        raise ValueError("decoding error")

    broken = ray.data.range(10).map_batches(explode)
    with pytest.raises(Exception, match="decoding error"):
        lakehouse.write_ray(broken, "generated")
    assert lakehouse.version("generated") is None


def test_bleu_on_hand_checked_pairs():
    scores = bleu_scores(
        ["acme red cotton t-shirt xl", "blue mug", "", "completely different words here"],
        ["acme red cotton t-shirt xl", "blue mug 350ml", "red mug", "acme red cotton t-shirt xl"],
    )
    assert scores[0] == pytest.approx(1.0)
    assert 0.3 < scores[1] < 1.0  # a prefix: high precision, brevity penalty
    assert scores[2] == 0.0 and scores[3] < 0.05
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        bleu_scores(["a", "b"], ["a"])


def test_minilm_cosine_on_hand_checked_pairs():
    scores = cosine_scores(
        ["red cotton t-shirt size XL", "red cotton t-shirt size XL", "stainless steel frying pan"],
        ["red cotton t-shirt size XL", "crimson cotton tee, extra large", "red cotton t-shirt size XL"],
    )
    assert scores[0] == pytest.approx(1.0, abs=1e-4)
    assert scores[1] > 0.6 > scores[2]  # a paraphrase is close, an unrelated product far
    assert cosine_scores([], []) == []


def test_filter_keeps_scores_above_t_and_gives_every_reject_a_reason(ray_runtime):
    import ray

    from common.models.generation.quality.filtering import FilterSpec, filter_generated

    rows = [
        ("a", "acme red cotton t-shirt xl", "acme red cotton t-shirt size xl"),  # close: kept
        ("b", "acme red cotton t-shirt xl", "stainless steel frying pan"),  # far: below T
        ("c", "acme red cotton t-shirt xl", "  "),  # empty
        ("d", "acme red cotton t-shirt xl", "ACME red cotton t-shirt XL"),  # a copy (case aside)
    ]
    ds = ray.data.from_items(
        [{"source_id": i, "source_text": s, "generated_text": g, "reason": None} for i, s, g in rows]
    )
    kept, rejected = filter_generated(ds, FilterSpec(scorer="bleu", threshold=0.5))
    kept_rows = kept.take_all()
    assert [r["source_id"] for r in kept_rows] == ["a"] and kept_rows[0]["score"] >= 0.5
    reasons = {r["source_id"]: r["reason"] for r in rejected.take_all()}
    assert reasons == {"b": "score below T=0.5", "c": "empty output", "d": "copy of the source"}
    assert len(kept_rows) + len(reasons) == len(rows)
    cosine_kept, _ = filter_generated(ds, FilterSpec(scorer="minilm", threshold=0.7))
    assert [r["source_id"] for r in cosine_kept.take_all()] == ["a"]


def test_scoring_keeps_earlier_reasons_and_threshold_free_mode(ray_runtime):
    import pyarrow as pa

    from common.models.generation.quality.filtering import FilterSpec, score_batch

    table = pa.table(
        {
            "source_text": ["red mug", "mug " * 100, "blue lamp"],
            "generated_text": ["red mug large", None, "blue lamp"],
            "reason": [None, "input longer than 64 tokens (101)", None],
        }
    )
    scored = score_batch(table, FilterSpec(scorer="bleu", threshold=None)).to_pydict()
    assert scored["reason"] == [None, "input longer than 64 tokens (101)", "copy of the source"]
    assert scored["score"][0] > 0.3 and scored["score"][1:] == [None, None]


def test_minilm_on_ctranslate2_matches_sentence_transformers_and_converts_once(tmp_path, monkeypatch, caplog):
    import logging
    import os
    import shutil

    import numpy as np

    from common.models.generation.quality.scoring import _encoder, minilm_path
    from common.models.generation.quality.sentence_encoder import CT2SentenceEncoder, ct2_reason, token_batches

    monkeypatch.setenv("AUGMENT_CACHE", str(tmp_path / "cache"))
    texts = [
        "red cotton t-shirt size XL",
        "crimson cotton tee, extra large",
        "stainless steel frying pan 28cm",
        "LEGO Technic 42115 Lamborghini Sián FKP 37",
        "a",
    ]
    path = minilm_path()
    assert ct2_reason(path) is None
    fast = CT2SentenceEncoder(path, device="cpu")
    converted = os.listdir(tmp_path / "cache" / "ct2-encoders")
    assert len(converted) == 1 and converted[0].endswith("-float32")
    CT2SentenceEncoder(path, device="cpu")  # the second load reuses the conversion
    assert os.listdir(tmp_path / "cache" / "ct2-encoders") == converted
    exact = _encoder(path, None, "torch").encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    float32 = fast.encode(texts, batch_size=2)  # batches of 2: padding inside a batch must not move a vector
    assert float32.shape == exact.shape and np.allclose(float32, exact, atol=2e-4)
    # Batches cut by a token budget (rows x longest) hold the same vectors as one batch of every text.
    assert np.allclose(fast.encode(texts, max_batch_tokens=16), fast.encode(texts, max_batch_tokens=0), atol=1e-5)
    assert token_batches([5, 1, 9, 3, 3], max_rows=2) == [[1, 3], [4, 0], [2]]
    assert token_batches([5, 1, 9, 3, 3], max_rows=8, max_tokens=9) == [[1, 3, 4], [0], [2]]
    int8 = CT2SentenceEncoder(path, device="cpu", compute_type="int8", threads=1).encode(texts)
    assert np.allclose(np.linalg.norm(int8, axis=1), 1.0, atol=1e-5) and (np.sum(int8 * exact, axis=1) > 0.99).all()
    # Two threads on CPU encode two batches at once, one thread each: the same vectors, in the texts' order.
    two = CT2SentenceEncoder(path, device="cpu", compute_type="int8", threads=2)
    assert two.workers == 2 and np.allclose(two.encode(texts, max_batch_tokens=16), int8, atol=1e-6)
    assert CT2SentenceEncoder(path, device="cpu", compute_type="int8", threads=2, parallel=False).workers == 1
    # The first 3 of MiniLM's 6 layers, converted into a folder of their own: torch's model cut the same way gives
    # the same vectors, and they are not the full model's.
    shallow = CT2SentenceEncoder(path, device="cpu", layers=3).encode(texts)
    assert any(name.endswith("-L3-float32") for name in os.listdir(tmp_path / "cache" / "ct2-encoders"))
    cut = _encoder(path, None, "torch", layers=3).encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    assert np.allclose(shallow, cut, atol=2e-4) and (np.sum(shallow * exact, axis=1) < 0.98).all()
    with pytest.raises(ValueError, match="cannot keep 7 layers of a model of 6"):
        _encoder(path, None, "torch", layers=7)
    # A model of another layout (CLS pooling here) is left to sentence-transformers, saying why when asked.
    other = tmp_path / "cls-model"
    shutil.copytree(path, other)
    (other / "1_Pooling" / "config.json").write_text(
        '{"word_embedding_dimension": 384, "pooling_mode_cls_token": true}'
    )
    assert "not mean tokens" in ct2_reason(str(other))
    with caplog.at_level(logging.WARNING, logger="common.models.generation.quality.scoring"):
        encoder = _encoder(str(other), None, "ctranslate2")
    assert type(encoder).__name__ == "SentenceTransformer" and "not mean tokens" in caplog.text
