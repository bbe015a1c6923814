"""CTranslate2 as the generation engine of the actor pool (``generation.engine: ctranslate2``).

A fine-tuned HF seq2seq model (scratch T5, a T5 checkpoint, the MiniLM-warm-started BART) is converted once
into CTranslate2's format, in a folder ``ct2-<quantization>`` next to the model (the same key, so the same
reuse, as the HF weights), and each actor loads it once: int8 on CPU, float16 (or int8_float16) on GPU.
:class:`CT2Generator` keeps :class:`~common.models.generation.hf_engine.T5Generator`'s output contract (n samples per
input by top-k/top-p sampling or beams, the quarantine rules, ``generated_tokens``, a seed per length bucket
so the rows do not depend on which actor got a batch) and swaps only the decoding call. CTranslate2's
sampling generator cannot be re-seeded once drawn from, so a sampled bucket after the first reloads the
translator (milliseconds on CPU: 24 ms for t5-small's int8 weights); beams and greedy decoding never reload.

A causal LM (:mod:`common.models.generation.causal_lm`, a folder with ``generator.json``) converts the same way and
runs
on CTranslate2's ``Generator``: its prompt tokens are forwarded at once (``include_prompt_in_result=False``)
and the samples are what follows them.

A model with a label-prefix table (the compositional pipeline's LS-PT generator) feeds learned blocks to
its encoder instead of tokens, which CTranslate2 cannot take: :class:`CT2Generator` serves it with HF.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any, Optional

from common.models.generation.fast_tokenizer import FastTokenizer
from common.models.generation.hf_engine import GenerationSpec, T5Generator
from common.platform.native_heap import release_free_heap
from common.platform.storage import read_json as read_json_file

log = logging.getLogger(__name__)


def available() -> bool:
    """True when the ``ctranslate2`` package imports here."""
    try:
        import ctranslate2
    except ImportError:
        return False
    return bool(ctranslate2.__version__)


def compute_type(spec: GenerationSpec, device: str) -> str:
    """The CTranslate2 compute type for ``device`` ("cpu" or "cuda"): ``spec.compute_type`` unless "auto",
    then int8 on CPU (quantized weights, float activations) and float16 on GPU."""
    if spec.compute_type != "auto":
        return spec.compute_type
    return "float16" if device == "cuda" else "int8"


def stored_type(kind: str, device: str) -> str:
    """The weights' storage type for compute type ``kind`` on ``device``: int8 (CPU int8, GPU int8_float16),
    float16 on GPU, else float32; CTranslate2 casts at load where the two differ."""
    return "int8" if kind.startswith("int8") else "float16" if device == "cuda" else "float32"


def convert(model_path: str, quantization: str, target: Optional[str] = None, layers: Optional[int] = None) -> str:
    """The CTranslate2 conversion of the local HF model folder ``model_path``, made once: returns ``target``
    (default ``<model_path>/ct2-<quantization>``); ``layers``: only the encoder's first that many layers (a
    BERT-style ``num_hidden_layers`` config; None: all). Converted into a temporary folder beside ``target`` and
    renamed into place, so two actors converting at once leave one complete folder (the loser's rename fails
    and it uses the winner's). A failure is remembered beside ``target`` (``<target>.failed``, with the
    ctranslate2 version) and raised again at once by later calls of that version, instead of each actor of
    each run loading the weights to fail the same way."""
    import errno
    import json

    import ctranslate2

    from common.platform.errors import DiskFull, user_error
    from common.platform.storage import read_json

    target = target or os.path.join(model_path, f"ct2-{quantization}")
    if os.path.isfile(os.path.join(target, "model.bin")):
        return target
    failed = f"{target}.failed"
    if os.path.isfile(failed):
        with open(failed, encoding="utf-8") as handle:
            known = json.load(handle)
        # A mark an older release left for a full disk says nothing about the model: converted again.
        if known.get("ctranslate2") == ctranslate2.__version__ and "No space left" not in known.get("error", ""):
            raise RuntimeError(f"ctranslate2 {known['ctranslate2']} failed to convert it before: {known['error']}")
    try:
        scratch = tempfile.mkdtemp(prefix=".ct2-", dir=os.path.dirname(target))
    except OSError as exc:
        found = user_error(exc)  # a full disk is DiskFull (exit 9), not a reason to serve with the slower engine
        if found is None:
            raise
        raise found from exc
    try:
        out = os.path.join(scratch, "model")
        try:
            config = read_json(os.path.join(model_path, "config.json"))
            source = _converter_source(model_path, config, scratch, layers)
            ctranslate2.converters.TransformersConverter(source).convert(out, quantization=quantization)
            _name_special_tokens(out, model_path, config)
        except Exception as exc:
            if isinstance(user_error(exc), DiskFull):
                # A full disk (however wrapped) says nothing about the model or the engine: raised, never remembered.
                raise DiskFull(
                    errno.ENOSPC, f"No space left on device: converting {model_path} into {scratch}"
                ) from exc
            with open(failed, "w", encoding="utf-8") as handle:
                json.dump({"ctranslate2": ctranslate2.__version__, "error": f"{type(exc).__name__}: {exc}"}, handle)
            raise
        try:
            os.rename(out, target)
        except OSError:  # another actor's conversion landed first
            if not os.path.isfile(os.path.join(target, "model.bin")):
                raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _converter_source(model_path: str, config: dict, scratch: str, layers: Optional[int] = None) -> str:
    """The folder CTranslate2's converter reads for ``model_path`` (whose ``config.json`` holds ``config``): the
    model itself, or a folder in ``scratch`` of links to the model's files and a config that differs in what the
    converter must read otherwise: ``normalize_before: false`` for a BART config without the key (transformers 5
    dropped it; CTranslate2 4.8's BART loader reads it; BART's post-norm layers, the MiniLM warm start's BERT
    ones), ``num_hidden_layers: layers`` when ``layers`` is given (the loader builds that many layers and takes
    their weights; the later layers' are left unread). The model's own folder is never written."""
    import json

    overrides: dict = {}
    if config.get("model_type") == "bart" and "normalize_before" not in config:
        overrides["normalize_before"] = False
    if layers is not None:
        if not 1 <= layers <= int(config.get("num_hidden_layers") or 0):
            raise ValueError(
                f"{model_path}: cannot keep {layers} layers of a model of "
                f"{config.get('num_hidden_layers')} (num_hidden_layers in its config.json)"
            )
        overrides["num_hidden_layers"] = layers
    if not overrides:
        return model_path
    source = os.path.join(scratch, "source")
    os.makedirs(source)
    for name in os.listdir(model_path):
        if name != "config.json" and not name.startswith(("ct2-", ".ct2-")):
            os.symlink(os.path.abspath(os.path.join(model_path, name)), os.path.join(source, name))
    with open(os.path.join(source, "config.json"), "w", encoding="utf-8") as handle:
        json.dump({**config, **overrides}, handle, indent=2)
    return source


def _name_special_tokens(converted_folder: str, model_path: str, config: dict) -> None:
    """Fill the converted config's ``bos_token`` / ``eos_token`` where the converter left them empty: it takes
    them from the tokenizer, and a BERT tokenizer (the MiniLM warm start's) has none, its model starting with
    ``[CLS]`` and ending with ``[SEP]``. The model config ``config``'s ``bos_token_id`` / ``eos_token_id``
    name them, through the converted vocabulary. Without an end token CTranslate2 would decode every sample
    to the cap."""
    import json

    from common.platform.storage import read_json

    path = os.path.join(converted_folder, "config.json")
    converted_config = read_json(path)
    missing = [key for key in ("bos_token", "eos_token") if not converted_config.get(key)]
    if not missing:
        return
    vocabulary = _vocabulary(converted_folder)
    for key in missing:
        token_id = config.get(f"{key}_id")
        if token_id is None or not 0 <= token_id < len(vocabulary):
            raise ValueError(f"{model_path}: no {key} in its tokenizer and no valid {key}_id in its config")
        converted_config[key] = vocabulary[token_id]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(converted_config, handle, indent=2)


def prepare(model_uri: str, spec: GenerationSpec, num_gpus: float = 0.0) -> Optional[str]:
    """Convert the model at ``model_uri`` once for an actor pool about to start, in a Ray task (the converter
    imports torch and loads the HF weights; the driver need not): the pool's actors then load
    ``<model_uri>/ct2-<quantization>`` instead of each converting. The quantization is the one the actors
    will use, on GPU when ``num_gpus`` > 0. Returns the converted folder's URI, or None when the pool will
    generate with hf (the actors then say why)."""
    import ray

    from common.platform.storage import exists, folder_state

    device = "cuda" if num_gpus > 0 else "cpu"
    quantization = stored_type(compute_type(spec, device), device)
    target = f"{model_uri.rstrip('/')}/ct2-{quantization}"
    state = folder_state(target)
    if state == "complete" or (state == "unmarked" and exists(f"{target}/model.bin")):  # converted by an earlier run
        return target
    if state == "incomplete":  # a copy cut short (or being written): converted again and written over, never loaded
        log.warning("%s is incomplete: converted again", target)
    from common.platform.ray_stages import TORCH_TASK_ENV

    # The fine-tune tasks' environment: the worker that just trained the model, torch imported, converts it.
    from common.platform.ray_waits import wait_all

    task = ray.remote(num_cpus=1, runtime_env=TORCH_TASK_ENV)(_convert_once)
    return wait_all([task.remote(model_uri, quantization, target)], "the CTranslate2 conversion task", {"CPU": 1})[0]


def _convert_once(model_uri: str, quantization: str, target: str) -> Optional[str]:
    """:func:`prepare`'s task: the model converted into ``target`` (``<model_uri>/ct2-<quantization>``;
    copied up to an object store when the model lives in one), or None when hf must serve it."""
    from common.platform.storage import is_local, local_copy, put_folder

    local_copy_root = local_copy(model_uri)
    folder, reason = converted(local_copy_root, quantization)
    if folder is None:  # the actors fall back to hf and log why
        log.warning("no CTranslate2 conversion of %s: %s", model_uri, reason)
        return None
    if not is_local(model_uri) and folder.startswith(local_copy_root):  # not a base model's shared conversion
        put_folder(folder, target)
    return target


def converted(model_path: str, quantization: str) -> tuple[Optional[str], Optional[str]]:
    """(the CTranslate2 folder of the local model ``model_path``, converted once by :func:`convert`, None) or
    (None, why hf must serve it instead: :func:`hf_reason`, or the converter's failure)."""
    from common.models.generation.in_context import weights_folder

    reason = hf_reason(model_path)
    if reason:
        return None, reason
    weights = weights_folder(model_path)
    # An in-context generator runs on its base model's weights: converted once per machine, beside them.
    target = None if weights == model_path else os.path.join(weights, f"ct2-{quantization}")
    from common.platform.errors import DiskFull

    try:
        return convert(weights, quantization, target), None
    except DiskFull:  # the run's fault to report (exit code 9), not a reason to serve with the slower engine
        raise
    except Exception as exc:  # noqa: BLE001  (a model kind the converter does not take: served by hf)
        return None, f"CTranslate2's converter failed: {type(exc).__name__}: {exc}"


def hf_reason(model_path: str) -> str | None:
    """Why the local model folder ``model_path`` must be generated with hf instead (None when CTranslate2
    can run it): the package does not import here, or the model takes label-prefix blocks."""
    from common.models.generation.prefix_files import has_prefix

    if not available():
        return "the ctranslate2 package does not import here"
    if has_prefix(model_path):
        return "its encoder takes label-prefix blocks, which CTranslate2 cannot feed"
    return None


def _vocabulary(folder: str) -> list[str]:
    """A converted model's target vocabulary, tokens in id order (``shared_``, ``target_`` or a decoder-only model's
    plain ``vocabulary.json`` / ``.txt``)."""
    import json

    for name in ("shared_vocabulary.json", "target_vocabulary.json", "vocabulary.json"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
    for name in ("shared_vocabulary.txt", "target_vocabulary.txt", "vocabulary.txt"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                return [line.rstrip("\n") for line in handle]
    raise FileNotFoundError(f"no vocabulary file in the converted model {folder}")


def _actor_threads() -> int:
    """CTranslate2's intra-op threads: ``OMP_NUM_THREADS``, which bounds them (the pool sets it,
    :func:`common.platform.ray_stages.threads_env`; Ray otherwise sets it to the worker's CPUs), else the CPUs Ray
    gave this actor (1 outside Ray)."""
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
    batches exactly as :class:`T5Generator` does. A model CTranslate2 cannot run (:func:`hf_reason`, or one its
    converter fails on) is served by the HF engine, said once in the log."""

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
        from common.models.generation.causal_lm import generator_settings

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
            from common.models.generation.in_context import stops

            # The end token, and for an in-context generator every token holding its stop text.
            self.stop, stop_ids = stops(settings)
            self.end_token = [
                read_json_file(os.path.join(folder, "config.json")).get("eos_token")
            ] + self.tokenizer.convert_ids_to_tokens(stop_ids)
            from common.models.generation.in_context import static_tokens

            self.static = static_tokens(self.prompt, self.tokenizer) if settings.get("in_context") else None
        # CTranslate2 refuses a top-k above the vocabulary (transformers clamps it): clamp as transformers does.
        self.top_k = min(spec.top_k, len(_vocabulary(folder)))
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
            from common.models.generation.causal_lm import prompt_text

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
        from common.models.generation.in_context import cut_at_stop

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
