"""Secrets and safe model loading: no credential in the shipped config, credentials masked in MLflow params
and in ``augment config``, and model weights stored as safetensors and loaded without unpickling."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from common.config import load_config
from common.platform.config_loader import MASK, flatten, is_secret_key, mask_secrets
from common.platform.tracking.tracker import Tracker

REPO = Path(__file__).resolve().parents[2]
# Credential shapes that must never appear as literal config values: AWS access keys, Databricks, GitHub and
# Hugging Face tokens, Azure SAS signatures, passwords inside URIs.
CREDENTIAL_VALUES = re.compile(
    r"AKIA[0-9A-Z]{16}|dapi[0-9a-f]{32}|gh[pousr]_[A-Za-z0-9]{30,}|hf_[A-Za-z]{30,}|"
    r"[?&]sig=[A-Za-z0-9%]{20,}|://[^/\s:@]+:[^/\s@]+@"
)
REFERENCE = re.compile(r"^\$\{[A-Z0-9_]+\}$|^\{\{\s*secrets/[^}]+\}\}$")


def test_no_credential_is_written_in_the_shipped_config():
    files = sorted([*REPO.glob("conf/*.yaml"), REPO / "databricks.yml", *REPO.glob("resources/*.yml")])
    assert len(files) >= 10
    checked = 0
    for path in files:
        for key, value in flatten(yaml.safe_load(path.read_text()) or {}).items():
            checked += 1
            if is_secret_key(key) and value not in (None, "", [], {}):
                assert REFERENCE.match(str(value)), f"{path.name}: {key} holds a literal credential; use ${{ENV}}"
            assert not CREDENTIAL_VALUES.search(str(value)), f"{path.name}: {key} looks like a credential"
    assert checked > 200


def test_secret_key_names_are_told_from_counts():
    for key in (
        "lakehouse.storage_options.AWS_SECRET_ACCESS_KEY",
        "x.azure_storage_sas_token",
        "a.clientSecret",
        "tracking.password",
        "s.AZURE_STORAGE_ACCOUNT_KEY",
        "hub.token",
        "x.api_key",
    ):
        assert is_secret_key(key), key
    for key in (
        "generation.max_new_tokens",
        "generation.max_source_tokens",
        "model.tokenizer",
        "lakehouse.root",
        "ingest.label_separator",
        "x.keywords",
    ):
        assert not is_secret_key(key), key
    masked = mask_secrets({"uri": "https://bob:hunter2@mlflow.example.com", "n": [{"sas_token": "abc"}]})
    assert masked == {"uri": f"https://bob:{MASK}@mlflow.example.com", "n": [{"sas_token": MASK}]}


def test_credentials_come_from_the_environment_and_are_masked_in_params_and_printouts(tmp_path, tracking_uri):
    import mlflow

    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    conf = tmp_path / "cluster.yaml"
    conf.write_text(
        "lakehouse:\n  storage_options:\n    AWS_SECRET_ACCESS_KEY: ${AUGMENT_TEST_SECRET}\n"
        "    AWS_REGION: eu-west-1\n"
    )
    os.environ["AUGMENT_TEST_SECRET"] = secret
    try:
        cfg = load_config(
            str(conf),
            [
                f"lakehouse.root={tmp_path / 'lh'}",
                f"tracking.uri={tracking_uri}",
                f"tracking.experiment=secrets-{tmp_path.name}",
            ],
        )
        # The job gets the real value (delta-rs and object stores need it) ...
        assert cfg.lakehouse.storage_options["AWS_SECRET_ACCESS_KEY"] == secret
        with Tracker(cfg).run("secrets") as run:
            pass
        params = mlflow.get_run(run.run_id).data.params
        # ... MLflow never does, and the other settings are logged as they are.
        assert params["lakehouse.storage_options.AWS_SECRET_ACCESS_KEY"] == MASK
        assert params["lakehouse.storage_options.AWS_REGION"] == "eu-west-1"
        assert not [k for k, v in params.items() if secret in v]
        assert any(k.endswith("max_new_tokens") and v.isdigit() for k, v in params.items())
        printed = subprocess.run(
            [str(Path(sys.executable).parent / "augment"), "config", "--conf", str(conf)],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ},
        )
        assert printed.returncode == 0, printed.stderr
        assert secret not in printed.stdout and f"AWS_SECRET_ACCESS_KEY: '{MASK}'" in printed.stdout
    finally:
        del os.environ["AUGMENT_TEST_SECRET"]


def _calls(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name:
            yield node


def test_model_weights_load_without_pickle():
    """Every weight load in the suite is safetensors (``use_safetensors=True`` for Hugging Face models,
    ``safetensors`` files for our own tensors); ``torch.load`` only with ``weights_only=True``; no pickle."""
    sources = [p for d in ("common", "jobs") for p in (REPO / d).rglob("*.py")]
    loads = 0
    for path in sources:
        tree = ast.parse(path.read_text(), str(path))
        for call in _calls(tree, "from_pretrained"):
            # Every from_pretrained but a tokenizer's or a config's loads weights, whatever names the class
            # (AutoModel*, *ForConditionalGeneration, or a helper's class argument).
            owner = ast.unparse(call.func.value)
            if not owner.endswith(("Tokenizer", "Config")):
                loads += 1
                kwargs = {k.arg: ast.unparse(k.value) for k in call.keywords}
                assert kwargs.get("use_safetensors") == "True", f"{path}:{call.lineno}: {ast.unparse(call)}"
        # Loads through the training loader (common.models.pretrained.load_for_training) count too.
        loads += sum(
            isinstance(node, ast.Call) and ast.unparse(node.func) == "load_for_training" for node in ast.walk(tree)
        )
        for call in _calls(tree, "load"):
            if ast.unparse(call.func.value) == "torch":
                kwargs = {k.arg: ast.unparse(k.value) for k in call.keywords}
                assert kwargs.get("weights_only") == "True", f"{path}:{call.lineno}"
        text = path.read_text()
        assert "pickle.load" not in text and "joblib.load" not in text, path
    assert loads >= 5


def test_a_pickled_checkpoint_is_refused_and_our_tensors_are_safetensors(tmp_path):
    """In a process of its own (torch stays out of the test process): a model folder holding only pickled
    weights (``pytorch_model.bin``) is refused by the suite's loader flags; a label-prefix table round-trips
    through a safetensors file."""
    script = f"""
import os, torch
from transformers import AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration
from common.models.generation.kinds.label_prefix import PREFIX_FILE, LabelPrefix
net = T5ForConditionalGeneration(T5Config(vocab_size=32, d_model=8, d_kv=4, d_ff=16, num_layers=1, num_heads=2))
net.save_pretrained("{tmp_path}/pickled")
# A checkpoint as older tools write it: the weights as a pickled state dict (pytorch_model.bin) only.
os.remove("{tmp_path}/pickled/model.safetensors")
torch.save(net.state_dict(), "{tmp_path}/pickled/pytorch_model.bin")
AutoModelForSeq2SeqLM.from_pretrained("{tmp_path}/pickled")  # loadable as such (the refusal below is the flag's)
try:
    AutoModelForSeq2SeqLM.from_pretrained("{tmp_path}/pickled", use_safetensors=True)
    print("LOADED")
except (OSError, EnvironmentError) as exc:
    print("REFUSED", str(exc).splitlines()[0][:120])
prefix = LabelPrefix(["a", "b"], 2, 8, ",", torch.randn(2, 2, 8))
os.makedirs("{tmp_path}/prefix")
prefix.save("{tmp_path}/prefix")
with open(os.path.join("{tmp_path}/prefix", PREFIX_FILE), "rb") as fh:
    header = fh.read(8)
loaded = LabelPrefix.load("{tmp_path}/prefix")
print("PREFIX", PREFIX_FILE, torch.equal(loaded.table, prefix.table), int.from_bytes(header, "little") > 0)
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "REFUSED" in out.stdout and "LOADED" not in out.stdout, out.stdout
    assert "PREFIX label_prefix.safetensors True True" in out.stdout, out.stdout
