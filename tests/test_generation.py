"""Batched generation on a Ray actor pool: shapes, quarantine of bad rows, and the write back to Delta."""

from __future__ import annotations

import os

import pytest

from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
from common.models.generation.kinds.seq2seq import fine_tune
from common.models.generation.on_ray.pool import GenerationSpec, generate, split_quarantine


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pairs = [(f"{b} {n}", f"{n} by {b}") for b in ("acme", "zeta", "bolt") for n in ("mug", "lamp", "pan")]
    path = str(tmp_path_factory.mktemp("t5") / "model")
    fine_tune(pairs, path, ModelSpec(vocab_size=40, max_source_length=16), TrainSpec(epochs=5, batch_size=8))
    return path


@pytest.mark.parametrize("engine", ["hf", "ctranslate2"])
def test_actor_pool_generates_n_samples_and_quarantines_bad_rows(tiny_model, lakehouse, ray_runtime, engine):
    import ray

    rows = [{"source_id": f"s{i}", "source_text": f"acme mug {i}"} for i in range(20)]
    rows += [{"source_id": "empty", "source_text": "   "}, {"source_id": "long", "source_text": "mug " * 200}]
    spec = GenerationSpec(n_samples=3, max_new_tokens=8, max_source_tokens=32, bucket_size=6, engine=engine)
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
    # On warm torch tasks (the same generator code as an actor's, without a process start per pool): the
    # second run is served by the generator the first one built, so its state cannot change the beams either.
    first = generate(ds, tiny_model, "v", spec, warm_tasks=True).take_all()
    again = generate(ds, tiny_model, "v", spec, warm_tasks=True).take_all()
    assert [r["generated_text"] for r in first] == [r["generated_text"] for r in again] and len(first) == 2


@pytest.fixture(scope="module")
def learned_model(tmp_path_factory):
    """A scratch T5 trained until it maps "<brand> <noun>" to "<noun> by <brand>" (beams are then well apart)."""
    pairs = [(f"{b} {n}", f"{n} by {b}") for b in ("acme", "zeta", "bolt") for n in ("mug", "lamp", "pan")]
    path = str(tmp_path_factory.mktemp("t5") / "learned")
    fine_tune(
        pairs * 4,
        path,
        ModelSpec(vocab_size=40, max_source_length=16),
        TrainSpec(epochs=60, batch_size=8, learning_rate=0.003),
    )
    return path


def test_ctranslate2_decodes_as_hf_does(learned_model, ray_runtime):
    """The model converted to CTranslate2 (float32, no quantization) decodes greedily as the HF engine does;
    int8 sampling is seeded per bucket, so a rerun repeats it."""
    import ray

    rows = [
        {"source_id": f"{b}-{n}", "source_text": f"{b} {n}"}
        for b in ("acme", "zeta", "bolt")
        for n in ("mug", "lamp", "pan")
    ]
    ds = ray.data.from_items(rows)

    def run(**kw):
        # Warm torch tasks: the engines' decoding is what is compared, not the actor pool (tested above); five
        # pools would each start a process that imports torch.
        out = generate(
            ds, learned_model, "v", GenerationSpec(max_new_tokens=16, **kw), batch_size=4, warm_tasks=True
        ).to_pandas()
        return out.sort_values(["source_id", "sample_idx"])[["source_id", "generated_text", "generated_tokens"]]

    # Greedy decoding (a beam of 1) is the same argmax on both engines: the same texts and token counts.
    greedy = {"n_samples": 1, "mode": "beam", "num_beams": 1}
    hf, ct2 = run(**greedy), run(**greedy, engine="ctranslate2", compute_type="float32")
    assert len(hf) == 9 and hf.values.tolist() == ct2.values.tolist()
    assert (
        sum(
            text.startswith(f"{sid.split('-')[1]} by")
            for sid, text in hf[["source_id", "generated_text"]].values.tolist()
        )
        >= 6
    )
    # Wider beams end by different rules (HF's early stopping, CTranslate2's patience): n distinct beams each.
    beams = run(n_samples=2, mode="beam", num_beams=4, engine="ctranslate2")
    assert len(beams) == 18 and beams.groupby("source_id").generated_text.nunique().eq(2).all()
    sample = {"n_samples": 3, "engine": "ctranslate2"}
    first, again = run(**sample), run(**sample)
    assert len(first) == 27 and first.values.tolist() == again.values.tolist()


def test_ctranslate2_samples_depend_on_the_bucket_and_seed_alone(tiny_model):
    """CTranslate2 seeds a worker thread's generator at its first draw only; a bucket's samples must still
    not depend on what the actor sampled before (another bucket in between, or a fresh actor)."""
    from common.models.generation.engines.ct2 import CT2Generator

    spec = GenerationSpec(n_samples=3, max_new_tokens=12, engine="ctranslate2")
    texts = ["acme mug", "zeta pan", "bolt lamp"]
    actor = CT2Generator(tiny_model, "v", spec)
    assert actor._ct2 is not None  # served by CTranslate2, not the hf fallback

    def sample(generator, seed, inputs):
        generator._seed(seed)
        return generator._generate(inputs)

    first, other, again = sample(actor, 7, texts), sample(actor, 9, texts[:2]), sample(actor, 7, texts)
    assert first == again and first != sample(actor, 8, texts)
    assert sample(CT2Generator(tiny_model, "v", spec), 9, texts[:2]) == other


def test_ctranslate2_actor_tokenizes_as_transformers_does_without_importing_it(tiny_model):
    """The CTranslate2 actor's tokenizer (``tokenizers`` alone) gives transformers' ids and texts, also for an
    input longer than the training's truncation, which the saved tokenizer file still carries."""
    import json

    from transformers import AutoTokenizer

    from common.models.generation.engines.fast_tokenizer import FastTokenizer

    assert json.load(open(f"{tiny_model}/tokenizer.json"))["truncation"] is not None  # the trap is there
    hf, fast = AutoTokenizer.from_pretrained(tiny_model), FastTokenizer.load(tiny_model)
    texts = ["acme mug", "", '  Ünïcödé ½ 10"x12" ', "<pad> x </s>", "zeta lamp " * 40]
    assert fast(texts).input_ids == hf(texts).input_ids and len(fast(texts[-1]).input_ids) > 80
    ids = [3, 5, 0, 1, 2, 9, 1, 0]
    assert [fast.decode(ids, skip_special_tokens=s) for s in (True, False)] == [
        hf.decode(ids, skip_special_tokens=s) for s in (True, False)
    ]
    tokens = fast.convert_ids_to_tokens(ids)
    assert tokens == hf.convert_ids_to_tokens(ids) and fast.convert_tokens_to_ids(tokens) == ids
    # Tokens outside the vocabulary (CTranslate2's names for ids past the tokenizer's size) read as <unk>.
    strange = ["<extra_id_7>", "\u2581no-such-piece", "mug"]
    assert fast.convert_tokens_to_ids(strange) == hf.convert_tokens_to_ids(
        strange
    ) and hf.unk_token_id in fast.convert_tokens_to_ids(strange)


def test_a_model_ctranslate2_cannot_run_is_named(tmp_path):
    from common.models.generation.engines.ct2_conversion import compute_type, hf_reason
    from common.models.generation.kinds.label_prefix import META_FILE

    assert hf_reason(str(tmp_path)) is None
    (tmp_path / META_FILE).write_text("{}")
    assert "label-prefix" in hf_reason(str(tmp_path))
    assert compute_type(GenerationSpec(), "cpu") == "int8" and compute_type(GenerationSpec(), "cuda") == "float16"
    assert compute_type(GenerationSpec(compute_type="int8_float16"), "cuda") == "int8_float16"


def test_row_keyed_sampling_draws_from_the_filtered_softmax():
    """Per-row Gumbel-max draws follow softmax over the top-k/top-p survivors, each row's draw depends on
    its key alone (not its batch neighbours), and a filtered-out token is never drawn."""
    import torch

    from common.models.generation.engines.row_sampling import RowKeyedSampler, row_keys

    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -8.0])
    rows = 20_000
    keys = torch.tensor(row_keys(3, [f"r{i}" for i in range(rows)], 1), dtype=torch.int64)
    sampler = RowKeyedSampler(keys, top_k=4, top_p=1.0)
    input_ids = torch.zeros((rows, 5), dtype=torch.int64)
    out = sampler(input_ids, logits.repeat(rows, 1))
    assert torch.isfinite(out).sum(dim=1).eq(1).all()  # one token per row, as greedy search needs
    drawn = out.argmax(dim=1)
    freq = torch.bincount(drawn, minlength=6).double() / rows
    expected = torch.cat([logits[:4].softmax(0), torch.zeros(2)]).double()
    assert (freq - expected).abs().max() < 0.015, (freq, expected)
    # The same keys in another order and batch size draw the same tokens; another step draws others.
    again = sampler.__class__(keys[:50].flip(0), 4, 1.0)(input_ids[:50], logits.repeat(50, 1)).argmax(dim=1)
    assert torch.equal(again.flip(0), drawn[:50])
    later = sampler(torch.zeros((rows, 6), dtype=torch.int64), logits.repeat(rows, 1)).argmax(dim=1)
    assert 0.3 < (later != drawn).double().mean() < 0.9
    # top-p after top-k (transformers' order): of the four survivors (0.58, 0.21, 0.13, 0.08 of the mass),
    # p = 0.7 keeps the two most likely.
    nucleus = RowKeyedSampler(keys, top_k=4, top_p=0.7)(input_ids, logits.repeat(rows, 1)).argmax(dim=1)
    assert set(nucleus.tolist()) == {0, 1}


def test_sampled_rows_do_not_depend_on_their_batch(tiny_model):
    """An input's samples depend on its source id, the seed and the model, not on the rows generated with
    it: alone, in a batch, and in reverse order give the same texts; another seed gives others."""
    from common.models.generation.on_ray.pool import T5Generator

    texts = ["acme mug", "zeta lamp", "bolt pan", "acme lamp"]
    ids = ["a", "b", "c", "d"]
    generator = T5Generator(tiny_model, "v", GenerationSpec(n_samples=4, max_new_tokens=8, seed=5))
    together = generator._generate(texts, ids)
    assert together == [generator._generate([t], [i])[0] for t, i in zip(texts, ids)]
    assert together == generator._generate(texts[::-1], ids[::-1])[::-1]
    other = T5Generator(tiny_model, "v", GenerationSpec(n_samples=4, max_new_tokens=8, seed=6))
    assert other._generate(texts, ids) != together


# The write path is not what this test is about (read_ray_ordered reads either path's version through Spark;
# both paths have their own tests): delta-rs, which every session has, saves a second run of the pools.
@pytest.mark.parametrize("write_path", ["rs"], indirect=True)
@pytest.mark.parametrize("engine", ["hf", "ctranslate2"])
def test_samples_do_not_depend_on_the_input_files(tiny_model, lakehouse, ray_runtime, engine):
    """The same rows written as one file or as five, in different orders, read in id order
    (``read_ray_ordered``) and generated in batches of 8 and buckets of 4: the same samples. CTranslate2
    seeds per bucket, so this needs the same batches; hf draws per row."""
    rows = [
        (f"s{i:02d}", f"{b} {n} {i}")
        for i, (b, n) in enumerate((b, n) for b in ("acme", "zeta", "bolt") for n in ("mug", "lamp", "pan", "cup"))
    ]
    rows += [(f"t{i:02d}", f"acme mug {'x ' * (i % 5)}") for i in range(18)]
    df = lakehouse.spark.createDataFrame(rows, "item_id string, title string")
    spec = GenerationSpec(n_samples=2, max_new_tokens=6, bucket_size=4, engine=engine)
    outputs = []
    for version, layout in enumerate([df.coalesce(1), df.orderBy("title").repartition(5)]):
        assert lakehouse.write(layout, "gen_source").version == version
        assert len(lakehouse.file_uris("gen_source", version)) == [1, 5][version]
        with lakehouse.read_ray_ordered("gen_source", version, ["item_id", "title"], ["item_id"]) as ds:
            ds = ds.rename_columns({"item_id": "source_id", "title": "source_text"})
            out = generate(ds, tiny_model, "v", spec, batch_size=8).to_pandas()
        outputs.append(sorted(zip(out.source_id, out.sample_idx, out.generated_text)))
        assert not os.listdir(f"{lakehouse.cfg.root}/_staging")  # the sorted copy is removed on exit
    assert len(outputs[0]) == 30 * 2 and outputs[0] == outputs[1]
    # A small stage on warm torch tasks (ray.warm_task_rows) cuts the same batches: the same samples.
    with lakehouse.read_ray_ordered("gen_source", 1, ["item_id", "title"], ["item_id"]) as ds:
        ds = ds.rename_columns({"item_id": "source_id", "title": "source_text"})
        out = generate(ds, tiny_model, "v", spec, batch_size=8, warm_tasks=True).to_pandas()
    assert sorted(zip(out.source_id, out.sample_idx, out.generated_text)) == outputs[0]


def test_the_spec_reads_every_decoding_field_of_its_config_section():
    """GenerationSpec and a *.generation section share one definition of the decoding settings (Decoding);
    the section adds the pool's settings, the spec the run's seed, and from_config copies every decoding one."""
    from dataclasses import fields

    from common.models.config import Decoding, GenerationConfig

    decoding = {f.name for f in fields(Decoding)}
    assert {f.name for f in fields(GenerationConfig)} - decoding == {"batch_size", "concurrency", "num_gpus"}
    assert {f.name for f in fields(GenerationSpec)} - decoding == {"seed"}
    section = GenerationConfig(
        n_samples=3,
        mode="beam",
        top_k=7,
        top_p=0.5,
        num_beams=2,
        max_new_tokens=9,
        max_source_tokens=11,
        bucket_size=5,
        engine="ctranslate2",
        compute_type="int8",
        max_batch_tokens=99,
    )
    spec = GenerationSpec.from_config(section, seed=13)
    assert spec.seed == 13 and all(getattr(spec, name) == getattr(section, name) for name in decoding)
    with pytest.raises(ValueError, match="top_p"):
        GenerationConfig(top_p=0)


def test_warm_tasks_keep_each_workers_generator_across_batches_and_stages(ray_runtime, tmp_path):
    """Warm torch tasks (ray.warm_task_rows): each worker builds the generator once and serves every later
    batch, of this stage and the next, with it; a failing batch's retries are bounded; a model saved again in
    place is built again."""
    import pandas as pd
    import ray

    from common.models.generation.on_ray.warm_tasks import _warm_generator, on_warm_tasks, warm_tasks_for
    from common.platform.config import RayConfig

    class Probe:  # a generator stand-in that says which process and which instance served each row
        def __init__(self, model_path: str):
            self.model_path = model_path

        def __call__(self, batch):
            return {
                "source_id": batch["source_id"],
                "pid": [os.getpid()] * len(batch["source_id"]),
                "instance": [id(self)] * len(batch["source_id"]),
            }

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    rows = ray.data.from_items([{"source_id": f"s{i:02d}", "source_text": "x"} for i in range(24)])
    stages = [
        on_warm_tasks(rows, Probe, {"model_path": str(model)}, concurrency=1, batch_size=4).to_pandas()
        for _ in range(2)
    ]
    served = pd.concat([stages[0], stages[1]])
    assert sorted(stages[0].source_id) == sorted(stages[1].source_id) == [f"s{i:02d}" for i in range(24)]
    per_worker = served.groupby("pid")["instance"].nunique()
    # 12 batches over two stages, served by at most the few torch workers Ray keeps, each with one generator
    assert (per_worker == 1).all() and len(per_worker) <= 3 and served["pid"].ne(os.getpid()).all()

    # a batch that raises every time fails the stage after ray.actor_task_retries retries (never loops)
    attempts = tmp_path / "attempts"

    class Poisoned(Probe):
        def __call__(self, batch):
            if "s00" in list(batch["source_id"]):
                with open(attempts, "a") as out:
                    out.write("x\n")
                raise ValueError("poisoned batch")
            return super().__call__(batch)

    with pytest.raises(Exception, match="poisoned batch"):
        on_warm_tasks(rows, Poisoned, {"model_path": str(model)}, concurrency=1, batch_size=4).materialize()
    assert len(attempts.read_text().splitlines()) == RayConfig().actor_task_retries + 1

    # in one process: the kept generator, until the model is saved again
    first = _warm_generator(Probe, {"model_path": str(model)})
    assert _warm_generator(Probe, {"model_path": str(model)}) is first
    stat = (model / "config.json").stat()
    os.utime(model / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert _warm_generator(Probe, {"model_path": str(model)}) is not first

    # which stages take the tasks: CPU stages of at most ray.warm_task_rows rows
    from common.models.config import GenerationConfig

    cpu, gpu, ray_cfg = GenerationConfig(), GenerationConfig(num_gpus=1.0), RayConfig(warm_task_rows=10000)
    assert warm_tasks_for(5000, cpu, ray_cfg) and not warm_tasks_for(20000, cpu, ray_cfg)
    assert not warm_tasks_for(10, gpu, ray_cfg) and not warm_tasks_for(10, cpu, RayConfig(warm_task_rows=0))
