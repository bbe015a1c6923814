"""CTranslate2 as the generation engine of the actor pool (``generation.engine: ctranslate2``).

Each actor loads the model's CTranslate2 conversion once (made by
:mod:`common.models.generation.engines.ct2_conversion`:
int8 on CPU, float16 or int8_float16 on GPU). :class:`CT2Generator` keeps
:class:`~common.models.generation.engines.hf_engine.T5Generator`'s output contract (n samples per
input by top-k/top-p sampling or beams, the quarantine rules, ``generated_tokens``, a seed per length bucket
so the rows do not depend on which actor got a batch) and swaps only the decoding call. CTranslate2's
sampling generator cannot be re-seeded once drawn from, so a sampled bucket after the first reloads the
translator (milliseconds on CPU: 24 ms for t5-small's int8 weights); beams and greedy decoding never reload.

A causal LM (:mod:`common.models.generation.kinds.causal_lm`, a folder with ``generator.json``) converts the same way
and runs on CTranslate2's ``Generator``: its prompt tokens are forwarded at once (``include_prompt_in_result=False``)
and the samples are what follows them.

A model with a label-prefix table (the compositional pipeline's LS-PT generator) feeds learned blocks to
its encoder instead of tokens, which CTranslate2 cannot take: :class:`CT2Generator` serves it with HF.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from common.models.generation.engines.ct2_conversion import compute_type, converted, stored_type, target_vocabulary
from common.models.generation.engines.fast_tokenizer import FastTokenizer
from common.models.generation.engines.hf_engine import GenerationSpec, T5Generator
from common.platform.process.native_heap import release_free_heap
from common.platform.storage import read_json as read_json_file

log = logging.getLogger(__name__)


def _actor_threads() -> int:
    """CTranslate2's intra-op threads: ``OMP_NUM_THREADS``, which bounds them (the pool sets it,
    :func:`common.platform.compute.ray_stages.threads_env`; Ray otherwise sets it to the worker's CPUs), else the CPUs
    Ray gave this actor (1 outside Ray)."""
    omp = os.environ.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) >= 1:
        return int(omp)
    try:
        import ray

        if ray.is_initialized():
            return max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))
    except Exception:  # noqa: BLE001  (outside an actor there is no assignment)
        pass
    return 1


class CT2Generator(T5Generator):
    """A Ray Data callable class generating with CTranslate2: converts (once) and loads the model, then serves
    batches exactly as :class:`T5Generator` does. A model CTranslate2 cannot run
    (:func:`common.models.generation.engines.ct2_conversion.hf_reason`, or one its converter fails on) is served by the
    HF engine, said once in the log."""

    def __init__(self, model_path: str, model_version: str, spec: GenerationSpec):
        import ctranslate2

        from common.platform.storage import local_copy

        local = local_copy(model_path)
        self._ct2 = None
        self.device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        kind = compute_type(spec, self.device)
        folder, reason = converted(local, stored_type(kind, self.device))  # asks hf_reason first
        if reason:
            log.warning("generating with hf, not ctranslate2, from %s: %s", model_path, reason)
            super().__init__(local, model_version, spec)
            return
        from common.models.generation.kinds.causal_lm import generator_settings

        self.spec, self.model_version, self.prefix = spec, model_version, None
        settings = generator_settings(local)
        self.prompt = settings["prompt"] if settings else None
        self.tokenizer = FastTokenizer.load(local)
        if self.tokenizer is None:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(local)
        self._load = {
            "model_path": folder,
            "device": self.device,
            "compute_type": kind,
            "intra_threads": _actor_threads(),
        }
        # A causal LM runs on CTranslate2's Generator, a seq2seq model on its Translator.
        self._engine = ctranslate2.Generator if self.prompt is not None else ctranslate2.Translator
        self.translator = self._engine(**self._load)
        if self.prompt is not None:
            from common.models.generation.kinds.in_context import stops

            # The end token, and for an in-context generator every token holding its stop text.
            self.stop, stop_ids = stops(settings)
            self.end_token = [
                read_json_file(os.path.join(folder, "config.json")).get("eos_token")
            ] + self.tokenizer.convert_ids_to_tokens(stop_ids)
            from common.models.generation.kinds.in_context import static_tokens

            self.static = static_tokens(self.prompt, self.tokenizer) if settings.get("in_context") else None
        # CTranslate2 refuses a top-k above the vocabulary (transformers clamps it): clamp as transformers does.
        self.top_k = min(spec.top_k, len(target_vocabulary(folder)))
        self._ct2, self._seed_value, self._drawn = ctranslate2, spec.seed, False

    def _seed(self, seed: int) -> None:
        if self._ct2 is None:
            return super()._seed(seed)
        self._seed_value = seed % (2**31)

    def _seeded_translator(self):
        """The translator, its sampling seeded with the bucket's seed. CTranslate2 keeps one random
        generator per worker thread, seeded from ``set_random_seed`` at the thread's first draw only: a later
        call does not restart it, so samples would depend on every bucket the actor sampled before. After a
        draw, the translator is built again (new worker threads; the int8 weights load in milliseconds on
        CPU) so each bucket's samples depend on its inputs and seed alone, as with the hf engine."""
        if self._drawn:
            del self.translator  # free the old weights before the new copy loads
            self.translator = self._engine(**self._load)
        self._ct2.set_random_seed(self._seed_value)
        self._drawn = True
        return self.translator

    def _generate(self, texts: list[str], ids: Optional[list[str]] = None) -> list[list[tuple[str, int]]]:
        """``n_samples`` (text, generated token count) per input text; the count includes the end token when
        one was produced (``return_end_token``), as the HF engine's does. CTranslate2 draws every row of a
        call from one generator, seeded per bucket (:meth:`_seeded_translator`): ``ids`` serve the HF
        engine only."""
        if self._ct2 is None:
            return super()._generate(texts, ids)
        spec = self.spec
        kwargs: dict[str, Any] = {
            "num_hypotheses": spec.n_samples,
            "max_batch_size": spec.max_batch_tokens,
            "batch_type": "tokens",
            "return_end_token": True,
        }
        if self.prompt is not None:
            from common.models.generation.formats import prompt_text

            prompts = [prompt_text(self.prompt, t) for t in texts]
            sources = [
                self.tokenizer.convert_ids_to_tokens(ids)
                for ids in self.tokenizer(prompts, add_special_tokens=False).input_ids
            ]
            static = self.static
            if static and all(row[: len(static)] == static for row in sources):
                # every row starts with the examples' tokens: their state is computed once for the batch
                kwargs.update(static_prompt=static)
                sources = [row[len(static) :] for row in sources]
            # The prompt initialises the decoder state at once; max_length bounds the tokens after it.
            kwargs.update(max_length=spec.max_new_tokens, include_prompt_in_result=False, end_token=self.end_token)
        else:
            sources = [self.tokenizer.convert_ids_to_tokens(ids) for ids in self.tokenizer(texts).input_ids]
            kwargs.update(max_decoding_length=spec.max_new_tokens)
        translator = self.translator
        if spec.mode == "beam":
            kwargs.update(beam_size=max(spec.num_beams, spec.n_samples))
        else:
            kwargs.update(beam_size=1, sampling_topk=self.top_k, sampling_topp=spec.top_p)
            translator = self._seeded_translator()
        run = translator.generate_batch if self.prompt is not None else translator.translate_batch
        from common.models.generation.kinds.in_context import cut_at_stop

        out = []
        for result in run(sources, **kwargs):
            samples = []
            for tokens in result.sequences if self.prompt is not None else result.hypotheses:
                text = self.tokenizer.decode(self.tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)
                samples.append((cut_at_stop(text, self.stop) if self.prompt is not None else text, len(tokens)))
            out.append(samples)
        # Each sampled bucket rebuilt the translator (new weights, new threads): hand the freed heap back, or
        # the worker's arenas grow by about a model copy per bucket (native_heap.release_free_heap).
        release_free_heap()
        return out
