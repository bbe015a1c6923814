"""Dataset cards (common.platform.reports.cards): what a card says, from a version's lineage and the job's facts.
The end-to-end tests of the five generative pipelines check each pipeline's card against its table."""

from __future__ import annotations

from common.models.config import FineTuneConfig, GenerationConfig, T5ModelConfig
from common.models.generator_summary import generator_facts
from common.platform.reports.cards import CardFacts, render


def test_a_card_names_its_provenance_generator_filter_and_counts():
    facts = CardFacts(
        table="cga_augmented",
        version=3,
        rows=13310,
        lineage={
            "job": "cga-train",
            "run_id": "abc123",
            "config_hash": "f00d",
            "inputs": {"labeled_train": "0", "cga_generated": "2"},
        },
        timestamp_ms=1_795_000_000_000,
        generator={"kind": "smollm2", "lora_r": 16},
        filter={"threshold T": 0.7, "sub-sample N": None},
        counts={"candidates": 64920},
    )
    text = render(facts)
    assert text.splitlines()[0] == "# Dataset card: cga_augmented v3"
    for line in (
        "| rows | 13,310 |",
        "| written | 2026-11-18 11:06 UTC |",
        "| job | cga-train (MLflow run `abc123`) |",
        "| config hash | `f00d` |",
        "| inputs | cga_generated v2, labeled_train v0 |",
        "## Generator",
        "| kind | `smollm2` |",
        "| lora_r | `16` |",
        "| threshold T | `0.7` |",
        "| sub-sample N | `null` |",
        "| candidates | `64920` |",
    ):
        assert line in text, line
    # The same facts give the same card (a rerun that finds the version written rewrites it unchanged).
    assert render(facts) == text
    bare = render(CardFacts(table="t", version=0, rows=1, lineage={}, timestamp_ms=None))
    assert "## Generator" not in bare and "| written | unknown |" in bare


def test_generator_facts_show_the_budget_the_adapters_and_the_decoding():
    causal = generator_facts(
        T5ModelConfig(kind="smollm2", lora_r=16),
        FineTuneConfig(max_steps=500, batch_size=16, learning_rate=5e-4),
        GenerationConfig(n_samples=8, max_new_tokens=48),
    )
    assert causal["model"] == "smollm2" and causal["lora_r"] == 16 and "{source}" in causal["prompt"]
    assert causal["fine_tune"] == "500 steps of 16, lr 0.0005"
    assert causal["decoding"] == "sample, 8 per input, top-k 50, top-p 0.95, at most 48 new tokens"
    seq2seq = generator_facts(
        T5ModelConfig(kind="checkpoint", name_or_path="t5-base"), FineTuneConfig(epochs=3), GenerationConfig()
    )
    assert seq2seq["model"] == "t5-base" and "lora_r" not in seq2seq and seq2seq["fine_tune"].startswith("3 epochs")
