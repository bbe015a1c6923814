"""How a generator reads to a person: the phrase a results summary names it with (:func:`describe_generator`) and
the settings a dataset card shows (:func:`generator_facts`), from its model, fine-tune and generation sections
(:mod:`common.models.config`)."""

from __future__ import annotations

from typing import Any

from common.models.config import Decoding, FineTuneConfig, T5ModelConfig, in_context, skipped_fine_tune

# What a reader is told wrote a sample: the model by kind (a checkpoint by its name).
_GENERATOR_NAMES = {
    "smollm2": "SmolLM2-135M-Instruct",
    "warm_minilm": "a BART warm-started from MiniLM",
    "scratch_t5": "a tiny T5 trained from scratch (plumbing: not meant to read)",
}


def describe_generator(model: T5ModelConfig, fine_tune: FineTuneConfig) -> str:
    """One phrase naming a generator as a summary shows it: the model, and how it learned the task (prompted
    with k training pairs, or fine-tuned for a budget, LoRA or every weight)."""
    if model.served:
        unit = "steps" if fine_tune.max_steps else "epochs"
        skipped = (
            f"; fine_tune's {fine_tune.max_steps or fine_tune.epochs} {unit} skipped"
            if skipped_fine_tune(model, fine_tune)
            else ""
        )
        return (
            f"{model.endpoint.model} served at {model.endpoint.base_url}, prompted with "
            f"{model.in_context_examples} of its training pairs (a served model: no fine-tune here{skipped})"
        )
    name = model.name_or_path or _GENERATOR_NAMES.get(model.kind, model.kind)
    if in_context(model, fine_tune):
        return f"{name}, prompted with {model.in_context_examples} of its training pairs (no fine-tune)"
    budget = (
        f"{fine_tune.max_steps} steps"
        if fine_tune.max_steps
        else f"{fine_tune.epochs} epoch{'s' if fine_tune.epochs != 1 else ''}"
    )
    how = (
        "trained"
        if model.kind == "scratch_t5"
        else f"fine-tuned (LoRA r {model.lora_r})"
        if model.causal and model.lora_r
        else "fine-tuned"
    )
    return f"{name}, {how} {budget}"


def generator_facts(model: T5ModelConfig, fine_tune: FineTuneConfig, generation: Decoding) -> dict[str, Any]:
    """A generator's settings as a dataset card shows them: the model, its adapters, the fine-tune budget
    and the decoding."""
    decoding = {
        "decoding": f"{generation.mode}, {generation.n_samples} per input, top-p {generation.top_p:g}, at "
        f"most {generation.max_new_tokens} new tokens"
    }
    if model.served:  # the server decodes: no engine, no top-k (not a standard API parameter)
        return {
            "model": model.endpoint.model,
            "kind": "endpoint",
            "endpoint": model.endpoint.base_url,
            "api": model.endpoint.api,
            "prompt": model.prompt,
            "fine_tune": skipped_fine_tune(model, fine_tune)
            or f"none: a served model, {model.in_context_examples} training pairs in the prompt",
            **decoding,
        }
    budget = f"{fine_tune.max_steps} steps" if fine_tune.max_steps else f"{fine_tune.epochs} epochs"
    facts: dict[str, Any] = {"model": model.name_or_path or model.kind, "kind": model.kind}
    if model.causal:
        facts.update({"lora_r": model.lora_r, "prompt": model.prompt})
    trained = f"{budget} of {fine_tune.batch_size * fine_tune.grad_accumulation}, lr {fine_tune.learning_rate:g}"
    facts.update(
        {
            "fine_tune": trained
            if not in_context(model, fine_tune)
            else f"none: in-context, {model.in_context_examples} training pairs in the prompt",
            "decoding": f"{generation.mode}, {generation.n_samples} per input, top-k {generation.top_k}, "
            f"top-p {generation.top_p:g}, at most {generation.max_new_tokens} new tokens",
            "engine": generation.engine,
        }
    )
    return facts
