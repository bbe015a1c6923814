"""CTranslate2 conversion: which weights an actor of ``generation.engine: ctranslate2`` loads, and making them once.

A fine-tuned HF seq2seq model (scratch T5, a T5 checkpoint, the MiniLM-warm-started BART) or causal LM (a folder
with ``generator.json``) is converted once into CTranslate2's format, in a folder ``ct2-<quantization>`` next to the
model (the same key, so the same reuse, as the HF weights): int8 on CPU, float16 (or int8_float16) on GPU
(:func:`compute_type`, :func:`stored_type`). :func:`convert` fills what the converter misses (BART's
``normalize_before`` under transformers 5, a BERT tokenizer's bos/eos) and remembers a failure beside the model;
:func:`prepare` converts in one Ray task before a pool starts; :func:`hf_reason` and :func:`converted` say when hf
must serve a model instead (no ctranslate2 here, a label-prefix model, a converter failure). The engine that loads
the converted folder is :class:`common.models.generation.engines.ct2.CT2Generator`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from common.models.generation.engines.hf_engine import GenerationSpec

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
    vocabulary = target_vocabulary(converted_folder)
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
    from common.platform.compute.ray_stages import TORCH_TASK_ENV

    # The fine-tune tasks' environment: the worker that just trained the model, torch imported, converts it.
    from common.platform.compute.ray_waits import wait_all

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
    from common.models.generation.kinds.in_context import weights_folder

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
    from common.models.generation.kinds.prefix_files import has_prefix

    if not available():
        return "the ctranslate2 package does not import here"
    if has_prefix(model_path):
        return "its encoder takes label-prefix blocks, which CTranslate2 cannot feed"
    return None


def target_vocabulary(folder: str) -> list[str]:
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
