"""Batched generation on a Ray actor pool: shapes, quarantine of bad rows, and the write back to Delta."""
from __future__ import annotations

import pytest

from common.models.generation import GenerationSpec, generate, split_quarantine
from common.models.seq2seq import ModelSpec, TrainSpec, fine_tune


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pairs = [(f"{b} {n}", f"{n} by {b}") for b in ("acme", "zeta", "bolt") for n in ("mug", "lamp", "pan")]
    path = str(tmp_path_factory.mktemp("t5") / "model")
    fine_tune(pairs, path, ModelSpec(vocab_size=40, max_source_length=16), TrainSpec(epochs=5, batch_size=8))
    return path


def test_actor_pool_generates_n_samples_and_quarantines_bad_rows(tiny_model, lakehouse, ray_runtime):
    import ray

    rows = [{"source_id": f"s{i}", "source_text": f"acme mug {i}"} for i in range(20)]
    rows += [{"source_id": "empty", "source_text": "   "}, {"source_id": "long", "source_text": "mug " * 200}]
    spec = GenerationSpec(n_samples=3, max_new_tokens=8, max_source_tokens=32, bucket_size=6)
    out = generate(ray.data.from_items(rows), tiny_model, "t5-test@1", spec, concurrency=2, batch_size=8)
    generated, quarantined = split_quarantine(out.materialize())
    good = generated.to_pandas()
    assert len(good) == 20 * 3
    assert sorted(good.groupby("source_id").sample_idx.apply(sorted).map(tuple).unique()) == [(0, 1, 2)]
    assert set(good.model_version) == {"t5-test@1"} and good.generated_text.map(type).eq(str).all()
    assert good.generated_tokens.between(1, 8).all()  # max_new_tokens = 8
    bad = {r["source_id"]: r["reason"] for r in quarantined.take_all()}
    assert bad == {"empty": "empty input", "long": bad["long"]} and bad["long"].startswith("input longer than 32")
    written = lakehouse.write_ray(generated, "generated")
    assert written.num_rows == 60 and lakehouse.read("generated").columns == list(good.columns)


def test_beam_search_is_deterministic(tiny_model, ray_runtime):
    import ray

    spec = GenerationSpec(n_samples=2, mode="beam", num_beams=4, max_new_tokens=8)
    ds = ray.data.from_items([{"source_id": "a", "source_text": "zeta lamp"}])
    first = generate(ds, tiny_model, "v", spec).take_all()
    again = generate(ds, tiny_model, "v", spec).take_all()
    assert [r["generated_text"] for r in first] == [r["generated_text"] for r in again] and len(first) == 2
