"""The HF engine of batched generation: one model loaded once, serving batches of (source_id, source_text).

:class:`T5Generator` is the Ray Data callable of :mod:`common.models.generation.on_ray.pool`'s actor pools (and the
base :class:`common.models.generation.engines.ct2.CT2Generator` extends): inside a batch, inputs are sorted by token
length and generated in buckets, so short inputs do not pay for the longest one's padding. Each input gives
``n_samples`` outputs (sampling with top-k/top-p, or beam search). A bad row (empty, longer than ``max_source_tokens``,
or one whose decoding fails) becomes one output row with a ``reason`` instead of failing its batch. A model saved with
a label-prefix table (:mod:`common.models.generation.kinds.label_prefix`, the compositional pipeline's LS-PT generator)
reads each source text as a label set and feeds its labels' learned blocks to the encoder instead of tokens. A causal
LM (a folder with ``generator.json``, :mod:`common.models.generation.kinds.causal_lm`) gets each source written into
the prompt it was trained on, left-padded, and its samples are what it writes after the prompt.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from typing import Any, Optional

import numpy as np

from common.models.config import Decoding

# The rows' columns and schema, imported from here by the pools, jobs and tests.
from common.models.generation.formats import OUTPUT_COLUMNS, output_schema  # noqa: F401

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationSpec(Decoding):
    """What an engine decodes with: a ``*.generation`` section's decoding settings
    (:class:`common.models.config.Decoding`; the consistency paper generates n = 8 samples per input) and
    the run's ``seed``."""

    seed: int = 42

    @classmethod
    def from_config(cls, cfg: Decoding, seed: int) -> "GenerationSpec":
        """The spec of a ``*.generation`` config section (:class:`common.models.config.GenerationConfig`):
        its decoding settings (not the pool's batch size, actors or GPUs) and ``seed``."""
        return cls(seed=seed, **{f.name: getattr(cfg, f.name) for f in fields(Decoding)})


class T5Generator:
    """A Ray Data callable class: loads tokenizer and model once (GPU when visible), then serves batches.
    Serves seq2seq models and causal LMs alike (``self.prompt`` is set for the latter)."""

    def __init__(self, model_path: str, model_version: str, spec: GenerationSpec):
        import torch
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

        from common.models.generation.kinds.causal_lm import generator_settings, load_tokenizer
        from common.models.generation.kinds.label_prefix import LabelPrefix, has_prefix
        from common.models.generation.kinds.seq2seq import device_and_dtype
        from common.platform.storage import local_copy

        self.spec = spec
        self.model_version = model_version
        self.device, dtype = device_and_dtype()
        model_path = local_copy(model_path)  # models on object stores are copied to the node once per actor
        # Saved in bfloat16 (a causal generator) or float32: float32 on CPU, where bf16 matmuls are slow.
        model_dtype = dtype if self.device == "cuda" else torch.float32
        settings = generator_settings(model_path)
        self.prompt = settings["prompt"] if settings else None
        self.stop, self.stop_ids = None, []
        if self.prompt is not None:
            from common.models.generation.kinds.in_context import stops, weights_folder

            # A causal LM, its tokenizer padded as in training; prompts are left-padded, so every row's
            # continuation starts at the same column.
            self.tokenizer = load_tokenizer(model_path)
            self.tokenizer.padding_side = "left"
            # An in-context generator: its base model's weights, its samples cut at a line break.
            self.stop, self.stop_ids = stops(settings)
            self.model = (
                AutoModelForCausalLM.from_pretrained(
                    weights_folder(model_path), dtype=model_dtype, use_safetensors=True
                )
                .to(self.device)
                .eval()
            )
        else:
            self.tokenizer = AutoTokenizer.from_pretrained(model_path)
            # T5 (checkpoint, scratch) or BART (the MiniLM warm start): the saved config names the class.
            # use_safetensors: weights load without unpickling (a .bin-only folder is refused, not trusted).
            self.model = (
                AutoModelForSeq2SeqLM.from_pretrained(model_path, dtype=model_dtype, use_safetensors=True)
                .to(self.device)
                .eval()
            )
        self.prefix = None
        if has_prefix(model_path):
            # A label-prefix model (LS-PT): each source text is a label set.
            self.prefix = LabelPrefix.load(model_path, model_dtype).to(self.device).eval()
        torch.manual_seed(spec.seed)

    def _seed(self, seed: int) -> None:
        """Seed the engine's sampling (torch's here)."""
        import torch

        torch.manual_seed(seed)

    def _generate(self, texts: list[str], ids: Optional[list[str]] = None) -> list[list[tuple[str, int]]]:
        """``n_samples`` (text, generated token count) per input text. Sampled rows draw their noise from
        their source id (the text itself when ``ids`` is None), the sample index and the seed alone
        (:mod:`common.models.generation.engines.row_sampling`), so an input gives the same samples in any batch."""
        import torch

        from common.models.generation.engines.row_sampling import RowKeyedSampler, row_keys
        from common.models.generation.kinds.seq2seq import model_inputs

        spec = self.spec
        width = 0  # a causal LM's prompt columns, cut off its output
        if self.prefix is not None:
            # A causal LM's label blocks are left-padded; generate() then returns the new tokens only.
            enc = self.prefix.encoder_inputs(texts, self.device, left=self.prompt is not None)
        elif self.prompt is not None:
            from common.models.generation.formats import prompt_text

            enc = model_inputs(
                self.tokenizer(
                    [prompt_text(self.prompt, t) for t in texts],
                    padding=True,
                    add_special_tokens=False,
                    return_tensors="pt",
                ),
                self.device,
            )
            width = enc["input_ids"].shape[1]
        else:
            enc = model_inputs(self.tokenizer(texts, padding=True, return_tensors="pt"), self.device)
        kwargs: dict[str, Any] = {"max_new_tokens": spec.max_new_tokens}
        if self.prompt is not None:
            kwargs.update(
                pad_token_id=self.tokenizer.pad_token_id, eos_token_id=[self.tokenizer.eos_token_id] + self.stop_ids
            )
        if spec.mode == "beam":
            kwargs.update(
                num_beams=max(spec.num_beams, spec.n_samples), do_sample=False, num_return_sequences=spec.n_samples
            )
        else:
            # Each input repeated n times (what generate does for num_return_sequences), then greedy search
            # over the row-keyed draws.
            enc = {k: v.repeat_interleave(spec.n_samples, dim=0) for k, v in enc.items()}
            keys = torch.tensor(
                row_keys(spec.seed, texts if ids is None else ids, spec.n_samples),
                dtype=torch.int64,
                device=self.device,
            )
            kwargs.update(
                do_sample=False,
                num_beams=1,
                top_k=None,
                top_p=None,
                logits_processor=[RowKeyedSampler(keys, spec.top_k, spec.top_p, width)],
            )
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        # A seq2seq output opens with the decoder start token; a causal one with the prompt.
        body = out[:, width:] if self.prompt is not None else out[:, 1:]
        if self.prompt is not None:
            from common.models.generation.kinds.in_context import cut_at_stop

            decoded = [
                cut_at_stop(text, self.stop) for text in self.tokenizer.batch_decode(body, skip_special_tokens=True)
            ]
            eos = [self.tokenizer.eos_token_id] + self.stop_ids  # the fine-tune's end token; in-context stops
        else:
            decoded = self.tokenizer.batch_decode(out, skip_special_tokens=True)
            eos = self.model.generation_config.eos_token_id  # BART warm-started from MiniLM: BERT's [SEP]
            eos = self.tokenizer.eos_token_id if eos is None else eos
        # Tokens produced per sequence: up to and including the first end token (beam search pads finished
        # beams with more end tokens), else every non-pad token.
        eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        ends = torch.isin(body, torch.tensor(eos_ids, dtype=body.dtype, device=body.device))
        counts = torch.where(
            ends.any(dim=1), ends.int().argmax(dim=1) + 1, (body != self.tokenizer.pad_token_id).sum(dim=1)
        ).tolist()
        n = spec.n_samples
        return [list(zip(decoded[i * n : (i + 1) * n], counts[i * n : (i + 1) * n])) for i in range(len(texts))]

    def __call__(self, batch: dict[str, np.ndarray]):
        ids = [str(x) for x in batch["source_id"]]
        texts = ["" if x is None else str(x) for x in batch["source_text"]]
        rows: list[tuple] = []
        lengths = [len(self.tokenizer(t).input_ids) if t.strip() else 0 for t in texts]
        good = []
        for i, (text, length) in enumerate(zip(texts, lengths)):
            if not text.strip():
                rows.append((ids[i], text, None, -1, self.model_version, 0, "empty input"))
            elif length > self.spec.max_source_tokens:
                rows.append(
                    (
                        ids[i],
                        text,
                        None,
                        -1,
                        self.model_version,
                        0,
                        f"input longer than {self.spec.max_source_tokens} tokens ({length})",
                    )
                )
            else:
                good.append(i)
        good.sort(key=lambda i: (lengths[i], ids[i]))  # length buckets: similar lengths share a padded batch
        for start in range(0, len(good), self.spec.bucket_size):
            bucket = good[start : start + self.spec.bucket_size]
            # hf draws per row (common.models.generation.engines.row_sampling); CTranslate2 per bucket, from this seed:
            # either way not from which actor got the batch or what it generated before.
            self._seed(_bucket_seed(self.spec.seed, [ids[i] for i in bucket]))
            try:
                outputs = self._generate([texts[i] for i in bucket], [ids[i] for i in bucket])
            except Exception:  # isolate the row that breaks decoding; the rest of the bucket still runs
                outputs = []
                for i in bucket:
                    try:
                        outputs.append(self._generate([texts[i]], [ids[i]])[0])
                    except Exception as exc:
                        outputs.append(exc)
            for i, samples in zip(bucket, outputs):
                if isinstance(samples, Exception):
                    rows.append(
                        (
                            ids[i],
                            texts[i],
                            None,
                            -1,
                            self.model_version,
                            0,
                            f"decoding error: {type(samples).__name__}: {samples}"[:300],
                        )
                    )
                    continue
                for k, (generated, n_tokens) in enumerate(samples):
                    rows.append((ids[i], texts[i], generated, k, self.model_version, n_tokens, None))
        import pyarrow as pa

        columns = list(zip(*rows)) if rows else [[] for _ in OUTPUT_COLUMNS]
        return pa.table({name: list(values) for name, values in zip(OUTPUT_COLUMNS, columns)}, schema=output_schema())


def _bucket_seed(seed: int, ids: list[str]) -> int:
    import hashlib

    digest = hashlib.sha256("\x1f".join([str(seed), *ids]).encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF
