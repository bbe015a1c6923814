"""Paths and URIs (storage), what a cluster's code needs shipped (Ray's py_modules from a zip), and the doctor's
cluster checks: the parts of running on a cluster that need no cluster. The cluster itself: tests/cluster/."""

from __future__ import annotations

import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from common.platform import storage
from common.platform.base_config import BaseConfig
from common.platform.config_loader import from_mapping
from common.platform.storage import StorageUnreachable, arrow_uri, check_reachable, endpoint

REPO = Path(__file__).resolve().parents[1]


def test_hadoops_s3_schemes_are_s3_to_pyarrow():
    assert arrow_uri("s3a://bucket/lake/t/part-0.parquet") == "s3://bucket/lake/t/part-0.parquet"
    assert arrow_uri("s3n://bucket/x") == "s3://bucket/x"
    for same in ("s3://bucket/x", "/tmp/lake/t", "file:///tmp/x", "abfss://c@a.dfs.core.windows.net/x", "gs://b/x"):
        assert arrow_uri(same) == same
    assert storage.is_s3("S3A://b/x") and not storage.is_s3("gs://b/x") and storage.scheme("/x") == "file"


def test_the_endpoint_named_in_messages(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert endpoint("s3a://b/lake") == "http://127.0.0.1:9000"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3.local:9000")
    assert endpoint("s3://b/lake") == "http://s3.local:9000"
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert endpoint("s3://b/lake") == "AWS S3 (eu-west-1)"
    assert endpoint("gs://bucket/lake") == "gs://bucket" and endpoint("/tmp/lake") == "local disk"


def test_an_object_store_that_does_not_answer_is_named_at_once(monkeypatch, tmp_path):
    """A closed port: one line naming the path and the endpoint, in seconds (s3a and delta-rs retry for minutes)."""
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    start = time.monotonic()
    with pytest.raises(
        StorageUnreachable,
        match=rf"s3a://bucket/lake: the object store at http://127.0.0.1:{port} "
        r"did not answer",
    ):
        check_reachable("s3a://bucket/lake", timeout_s=3)
    assert time.monotonic() - start < 20
    check_reachable(str(tmp_path / "not-yet"))  # local paths are not checked


def test_texts_and_folders_through_one_api(tmp_path):
    storage.write_text(str(tmp_path / "a" / "b.txt"), "café\n")
    assert storage.read_text(str(tmp_path / "a" / "b.txt")) == "café\n"
    assert storage.exists(str(tmp_path / "a")) and not storage.exists(str(tmp_path / "c"))


def test_packages_imported_from_a_zip_are_unpacked_for_rays_py_modules(tmp_path):
    """``spark-submit --py-files dist/augment.zip``: the driver imports the suite from the zip, and Ray's py_modules
    takes folders, so the runtime unpacks each named package (only its members) once per process."""
    archive = tmp_path / "code.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("pkg_a/__init__.py", "VALUE = 1\n")
        zipped.writestr("pkg_a/data/words.txt", "x\n")
        zipped.writestr("pkg_b/__init__.py", "")
        zipped.writestr("other/__init__.py", "")
    script = (
        "import sys, os; sys.path.insert(0, sys.argv[1])\n"
        "from common.platform.compute.ray_runtime import package_folders\n"
        "folders = package_folders(('pkg_a', 'pkg_b'))\n"
        "print([os.path.basename(f) for f in folders])\n"
        "print(sorted(os.listdir(os.path.dirname(folders[0]))))\n"
        "print(open(os.path.join(folders[0], 'data', 'words.txt')).read().strip())\n"
        "try:\n    package_folders(('no_such_pkg',))\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(archive)], capture_output=True, text=True, timeout=60, check=True
    ).stdout.splitlines()
    assert out == [
        "['pkg_a', 'pkg_b']",
        "['pkg_a', 'pkg_b']",
        "x",
        "ray.code_packages names 'no_such_pkg', which is not an importable package here",
    ]


def test_the_shipped_dictionaries_are_read_from_the_package_even_inside_a_zip():
    """CS-Blind's colour and size lists travel with the code (package data read through importlib.resources):
    from `make dist`'s zip, in a Python that sees nothing of the checkout or its install (``-S``: no site-packages,
    so no editable install either)."""
    subprocess.run(["make", "-s", "dist"], cwd=REPO, check=True, capture_output=True, timeout=120)
    archive = REPO / "dist" / "augment.zip"
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import common.catalog.blinding as b\n"
        "print(b.__file__.startswith(sys.argv[1]), len(b.load_dictionary(None, 'colours')) > 20, "
        "len(b.load_dictionary(None, 'sizes')) > 5)\n"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", script, str(archive)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=archive.parent,
    )
    assert out.stdout.split() == ["True", "True", "True"], out.stderr[-2000:]


def test_the_doctor_names_what_a_cluster_config_cannot_reach(monkeypatch, tmp_path):
    """A cluster config's doctor lines: the standalone master (from spark-defaults.conf), Ray's head and the token
    this driver would present, the MLflow server. Closed ports: each named, required, with its fix."""
    from common.platform.doctor.cluster import cluster_checks, spark_master_url

    ports = []
    for _ in range(3):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
    (tmp_path / "spark-defaults.conf").write_text(
        f"spark.ui.enabled false\nspark.master  spark://127.0.0.1:{ports[0]}\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    cfg = from_mapping(
        BaseConfig,
        {
            "spark": {"mode": "cluster"},
            "ray": {"mode": "address", "address": f"127.0.0.1:{ports[1]}"},
            "lakehouse": {"root": str(tmp_path / "lake")},
            "tracking": {"uri": f"http://127.0.0.1:{ports[2]}"},
        },
    )
    assert spark_master_url(cfg) == f"spark://127.0.0.1:{ports[0]}"
    checks = {c.name: c for c in cluster_checks(cfg)}
    assert set(checks) == {"spark master", "ray head", "ray token", "mlflow server"}
    assert all(not c.ok and c.required and c.fix for c in checks.values()), checks
    assert "no-token missing or empty" in checks["ray token"].detail
    (tmp_path / "no-token").write_text("secret")
    assert cluster_checks(cfg)[2].ok
    local = from_mapping(BaseConfig, {"lakehouse": {"root": str(tmp_path / "lake")}})
    assert cluster_checks(local) == []


COPY_SLOWLY = """
import sys, time
from common.platform import storage

copy = storage.put_file

def slow(local, uri):  # an upload that takes its time after the first file, as a large weights file does
    copy(local, uri)
    print("copied", uri.rsplit("/", 1)[-1], flush=True)
    time.sleep(60)

storage.put_file = slow
storage.put_folder(sys.argv[1], sys.argv[2])
"""


def test_a_model_folder_cut_short_is_rebuilt_never_loaded(tmp_path):
    """A kill during a model folder's copy (SIGKILL of a real process after ``config.json`` landed, before the
    weights): the folder keeps its writing mark, so the fine-tune stage's reuse check trains it again (written over)
    instead of loading half a model; a finished copy is reused, and so is a folder written before the marks that
    holds its config.json."""
    import os
    import signal

    from common.stages.generation import reusable_model

    source = tmp_path / "local_model"
    source.mkdir()
    (source / "config.json").write_text("{}")
    (source / "model.safetensors").write_bytes(b"w" * 4096)
    target = tmp_path / "lake" / "models" / "t5-abc"
    copier = subprocess.Popen(
        [sys.executable, "-c", COPY_SLOWLY, str(source), str(target)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    try:
        assert copier.stdout.readline().strip() == "copied config.json"
        os.kill(copier.pid, signal.SIGKILL)
    finally:
        copier.wait(timeout=30)
    assert (target / "config.json").is_file() and not (target / "model.safetensors").exists()
    assert storage.folder_state(str(target)) == "incomplete"
    assert not reusable_model(str(target))  # never loaded: the stage trains it again and writes it over
    storage.put_folder(str(source), str(target))
    assert storage.folder_state(str(target)) == "complete" and reusable_model(str(target))
    (target / "model.safetensors").write_bytes(b"w")  # a file of another size than its mark says
    assert storage.folder_state(str(target)) == "incomplete"
    legacy = tmp_path / "lake" / "models" / "t5-old"
    legacy.mkdir()
    (legacy / "config.json").write_text("{}")
    assert storage.folder_state(str(legacy)) == "unmarked" and reusable_model(str(legacy))
