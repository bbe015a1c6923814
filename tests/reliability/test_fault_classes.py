"""Mid-run faults of each dependency end in their class's exit code, from real failures: a full disk (the kernel's
/dev/full), an object store answering 503 (an HTTP server that answers nothing else), an MLflow server that is not
there or never answers, and the ``spark-submit jobs/<module>.py`` entry saying it as the CLI does."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from common.platform.errors import DiskFull, StorageUnreachable, TrackingUnreachable, report, user_error
from common.platform.tracking import check_server

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed once the block ends: nothing listens there


class _Unavailable(BaseHTTPRequestHandler):
    def _answer(self):
        body = b"<Error><Code>ServiceUnavailable</Code><Message>down for maintenance</Message></Error>"
        self.send_response(503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def unavailable_store():
    """An S3 endpoint that answers every request 503: ``http://127.0.0.1:<port>``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_full_disk_is_its_own_class(capsys):
    with pytest.raises(OSError) as raised:
        with open("/dev/full", "w") as handle:  # the kernel's full device: every write ends in ENOSPC
            handle.write("x" * 65536)
    found = user_error(RuntimeError("a stage failed"))  # no fault of that kind: a bug
    assert found is None
    wrapped = RuntimeError("writing the model failed")
    wrapped.__cause__ = raised.value
    found = user_error(wrapped)
    assert isinstance(found, DiskFull) and report(found) == 9
    assert capsys.readouterr().err.startswith("augment: disk full: [Errno 28] No space left on device")


def test_an_object_store_answering_503_mid_run_is_storage_unreachable(unavailable_store):
    import pyarrow.fs as pafs

    store = pafs.S3FileSystem(endpoint_override=unavailable_store, access_key="k", secret_key="s", region="us-east-1",
                              retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    with pytest.raises(OSError) as raised:
        store.get_file_info("bucket/lake/table/_delta_log/00000000000000000000.json")
    found = user_error(raised.value)
    assert isinstance(found, StorageUnreachable), raised.value
    assert "the object store failed mid-run" in str(found) and "503" in str(found)


def test_an_mlflow_server_that_is_gone_mid_run_is_tracking_unreachable(monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    with pytest.raises(Exception) as raised:
        MlflowClient(f"http://127.0.0.1:{_closed_port()}").log_metric("0" * 32, "f1", 0.5)
    found = user_error(raised.value)
    assert isinstance(found, TrackingUnreachable), raised.value


def test_the_start_check_finds_a_server_gone_or_hung_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(TrackingUnreachable, match=r"did not answer within 2 s"):
        check_server(f"http://127.0.0.1:{_closed_port()}", 2.0)
    with socket.socket() as hung:  # accepts connections, never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        port = hung.getsockname()[1]
        with pytest.raises(TrackingUnreachable, match=rf"127.0.0.1:{port} did not answer within 1 s"):
            check_server(f"http://user:secret@127.0.0.1:{port}", 1.0)
    assert time.monotonic() - start < 10
    check_server("sqlite:////tmp/x.db", 0.1)  # not a server: nothing to ask


def test_the_spark_submit_entry_says_a_fault_in_one_line_with_its_code(tmp_path):
    """``python jobs/ingest.py`` (what ``spark-submit jobs/ingest.py`` runs) with its tracking server down: exit 8
    and one line naming the server, before a JVM starts; with a bad key: exit 2."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, str(REPO / "jobs" / "ingest.py"), "--set", f"lakehouse.root={tmp_path / 'lake'}"]
    start = time.monotonic()
    down = subprocess.run([*args, "--set", f"tracking.uri=http://127.0.0.1:{_closed_port()}",
                           "tracking.start_timeout_s=2"], capture_output=True, text=True, timeout=120, env=env)
    assert down.returncode == 8, down.stderr[-3000:]
    assert down.stderr.strip().splitlines()[-1].startswith("augment: tracking unreachable: the MLflow tracking "
                                                           "server http://127.0.0.1:")
    assert "Traceback" not in down.stderr and time.monotonic() - start < 60
    bad = subprocess.run([*args, "--set", "tracking.start_timeout_s=0"], capture_output=True, text=True, timeout=120,
                         env=env)
    assert bad.returncode == 2 and "tracking.start_timeout_s" in bad.stderr.strip().splitlines()[-1], bad.stderr
