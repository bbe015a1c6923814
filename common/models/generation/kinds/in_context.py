"""In-context generators: a causal LM prompted with a few of the method's own training pairs, no fine-tune.

``fine_tune.epochs: 0`` with a causal kind (``smollm2``, ``causal_checkpoint``) selects it; a served model (kind
``endpoint``, :func:`save_endpoint`) is always one, its prompt's examples cut in words (its tokenizer is the
server's). The "fine-tune"
stage then draws ``model.in_context_examples`` pairs (seeded) and writes them ahead of the section's prompt
template, one example per block::

    Product title: <source 1>
    The same product, another title: <target 1>

    Product title: {source}
    The same product, another title:

The model folder holds that prompt in ``generator.json`` (so every engine builds the same prompts), the
tokenizer and the base model's ``config.json``, but no weights: ``"weights": "base"`` sends the engines to
the base model's folder (the materialised SmolLM2, or a local checkpoint folder), and CTranslate2's
conversion of it is made once per machine beside it, not once per run. A hub name cannot be referenced
that way, so its weights are saved in the folder as a fine-tune's are.

Samples stop at the first line break (the examples are one line each), besides the end token.

SmolLM2-135M-Instruct on demo title pairs, 2 cores (CTranslate2 int8, slow day): 4 examples give title
variants of the same product at about 1.5-2.4 samples a second, the 225-token prompt dominating; the same
prompt with no examples writes off-topic text at 7.4 a second.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from typing import Any, Optional, Sequence

# STOP: text after it is not part of a sample (the next example would begin there); its home is formats.
from common.models.generation.formats import STOP

log = logging.getLogger(__name__)


def one_line(text: str) -> str:
    """``text`` on one line (an example's line breaks would read as the end of its sample), with no
    ``{source}`` placeholder left in it."""
    return " ".join(str(text).split()).replace("{source}", "(source)")


def few_shot_prompt(
    tokenizer,
    pairs: Sequence[tuple[str, str]],
    template: str,
    k: int,
    seed: int,
    max_source_length: int,
    max_target_length: int,
) -> str:
    """The prompt template with ``k`` of ``pairs`` (drawn with ``seed`` from the sorted pairs, so the draw
    does not depend on the order the files were read in) filled in ahead of it, each source and target cut
    to ``max_source_length`` / ``max_target_length`` tokens (words when ``tokenizer`` is None: a served model's)
    and put on one line. Returns a template with one ``{source}``."""
    from common.models.generation.formats import prompt_text

    chosen = random.Random(seed).sample(sorted(pairs), min(k, len(pairs)))

    def cut(text: str, n: int) -> str:
        if tokenizer is None:  # a served model's tokenizer is not here: n words, more than n tokens' worth
            return " ".join(one_line(text).split()[:n])
        ids = tokenizer(one_line(text), add_special_tokens=False, max_length=n, truncation=True).input_ids
        return tokenizer.decode(ids).strip()

    shots = [
        prompt_text(template, cut(s, max_source_length)) + " " + cut(t, max_target_length) + "\n\n" for s, t in chosen
    ]
    return "".join(shots) + template


def static_tokens(template: str, tokenizer) -> Optional[list[str]]:
    """The tokens of an in-context prompt ``template`` ahead of ``{source}`` (its examples, the same for every
    row) up to the last whitespace there, for CTranslate2's ``static_prompt``: the decoder state of the examples
    is then computed once per batch, not once per row (a 174-token prompt around a 12-token source). The
    generator passes them only for a batch whose every row's tokens start with them (a byte-level BPE starts a
    token at a space, so they do; a tokenizer that merges across the cut is served whole), so the model reads
    the same tokens either way. None when nothing precedes that whitespace."""
    static = template.split("{source}", 1)[0].rstrip()
    if not static:
        return None
    return tokenizer.convert_ids_to_tokens(tokenizer(static, add_special_tokens=False).input_ids)


def save_in_context(
    out_dir: str, kind: str, base: str, base_path: str, prompt: str, k: int, tokenizer, net=None
) -> None:
    """Write an in-context generator to ``out_dir``: ``generator.json`` (kind, the few-shot ``prompt``,
    ``base``, ``in_context``: k, ``stop`` and ``stop_ids``, the ids of ``tokenizer``'s tokens holding it),
    the tokenizer, and either a reference to the base weights at the local folder ``base_path``
    (``"weights": "base"``) or, when ``net`` is given (a hub checkpoint), the weights themselves."""
    from common.models.generation.kinds.causal_lm import GENERATOR_FILE, save_generator

    settings = {
        "kind": kind,
        "prompt": prompt,
        "base": base,
        "in_context": k,
        "stop": STOP,
        "stop_ids": stop_token_ids(tokenizer, STOP),
    }
    if net is not None:
        save_generator(net, tokenizer, out_dir, kind, prompt, base)
    else:
        os.makedirs(out_dir, exist_ok=True)
        for name in os.listdir(base_path):  # config and tokenizer files; the weights stay where they are
            if name.endswith((".json", ".txt", ".model")) and name != "materialised.json":
                shutil.copy(os.path.join(base_path, name), out_dir)
        settings["weights"] = "base"
    with open(os.path.join(out_dir, GENERATOR_FILE), "w", encoding="utf-8") as handle:
        json.dump(settings, handle, indent=2)


def in_context_generator(pairs: Sequence[tuple[str, str]], out_dir: str, model: Any, seed: int) -> float:
    """The "fine-tune" of ``fine_tune.epochs: 0``: ``model.in_context`` of ``pairs`` drawn with ``seed`` into
    the prompt (:func:`few_shot_prompt`), saved to ``out_dir`` (:func:`save_in_context`); ``model`` is the
    :class:`~common.models.generation.fine_tune_specs.ModelSpec`. Returns the seconds it took. Raises ValueError for
    a model kind that cannot be prompted (a seq2seq model, or label-prefix blocks)."""
    from common.models.generation.kinds.causal_lm import base_folder, build_causal, load_tokenizer

    if model.kind == "endpoint":
        return save_endpoint(pairs, out_dir, model, seed)
    if not model.causal or model.prefix_labels:
        raise ValueError(
            f"fine_tune.epochs 0 (in-context generation) needs a causal model kind (smollm2, "
            f"causal_checkpoint) without label prefixes; got {model.kind!r}"
            f"{' with prefix labels' if model.prefix_labels else ''}"
        )
    start = time.perf_counter()
    path = base_folder(model.kind, model.model_name_or_path)
    tokenizer = load_tokenizer(path)
    prompt = few_shot_prompt(
        tokenizer, pairs, model.prompt, model.in_context, seed, model.max_source_length, model.max_target_length
    )
    base = model.model_name_or_path or model.kind
    if os.path.isdir(path):
        save_in_context(out_dir, model.kind, base, path, prompt, model.in_context, tokenizer)
    else:  # a hub name: its weights travel with the generator
        _, net = build_causal(model.kind, model.model_name_or_path, lora_r=0)
        save_in_context(out_dir, model.kind, base, path, prompt, model.in_context, tokenizer, net)
    seconds = time.perf_counter() - start
    log.info(
        "in-context generator: %d of %d pairs in a %d-token prompt, no training (%.1f s)",
        min(model.in_context, len(pairs)),
        len(pairs),
        len(tokenizer(prompt).input_ids),
        seconds,
    )
    return seconds


def save_endpoint(pairs: Sequence[tuple[str, str]], out_dir: str, model: Any, seed: int) -> float:
    """The generator of a served model (``model``: a ``ModelSpec`` of kind ``endpoint``): ``model.in_context`` of
    ``pairs`` drawn with ``seed`` into the prompt, each cut to its length in words, saved to ``out_dir`` as
    ``generator.json`` (kind ``endpoint``, the prompt, the stop, and the endpoint's settings: the key's variable
    name, never a key) and ``config.json`` (the folder's saved-model marker). Returns the seconds it took."""
    from common.models.generation.kinds.causal_lm import GENERATOR_FILE

    start = time.perf_counter()
    prompt = few_shot_prompt(
        None, pairs, model.prompt, model.in_context, seed, model.max_source_length, model.max_target_length
    )
    settings = {
        "kind": "endpoint",
        "prompt": prompt,
        "base": f"{model.endpoint['model']} at {model.endpoint['base_url']}",
        "in_context": model.in_context,
        "stop": STOP,
        "endpoint": dict(model.endpoint),
    }
    os.makedirs(out_dir, exist_ok=True)
    for name, content in ((GENERATOR_FILE, settings), ("config.json", {"model_type": "endpoint"})):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as handle:
            json.dump(content, handle, indent=2)
    log.info(
        "endpoint generator: %s prompted with %d of %d pairs (%d words), no fine-tune: a served model",
        settings["base"],
        min(model.in_context, len(pairs)),
        len(pairs),
        len(prompt.split()),
    )
    return time.perf_counter() - start


def weights_folder(folder: str) -> str:
    """The folder whose weights a generator saved at ``folder`` runs on: the base model's for an in-context
    generator that references them, else ``folder`` itself."""
    from common.models.generation.kinds.causal_lm import base_folder, generator_settings

    settings = generator_settings(folder) or {}
    if settings.get("weights") != "base":
        return folder
    kind = settings["kind"]
    return base_folder(kind, None if kind == "smollm2" else settings["base"])


def stops(settings: dict[str, Any]) -> tuple[Optional[str], list[int]]:
    """(the text a saved generator's samples end at besides the end token, the ids of the tokens holding
    it), from its ``generator.json`` ``settings``: a line break and its tokens for an in-context generator,
    (None, []) for a fine-tuned one."""
    return settings.get("stop"), list(settings.get("stop_ids", []))


def stop_token_ids(tokenizer, stop: str) -> list[int]:
    """Ids of every vocabulary token whose text holds ``stop`` (a byte-level BPE has many holding a line
    break: alone, doubled, after a full stop...): generation ends at any of them."""
    vocabulary = len(tokenizer)
    texts = tokenizer.batch_decode([[i] for i in range(vocabulary)])
    return [i for i, text in enumerate(texts) if stop in text]


def cut_at_stop(text: str, stop: Optional[str]) -> str:
    """``text`` up to ``stop`` (all of it when None or absent), stripped."""
    return (text.split(stop, 1)[0] if stop else text).strip()
