"""Mid-run faults of each dependency end in their class's exit code, from real failures: a full disk (the kernel's
/dev/full), an object store answering 503 (an HTTP server that answers nothing else), an MLflow server that is not
there or never answers, and the ``spark-submit jobs/<family>/<module>.py`` entry saying it as the CLI does."""

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
from common.platform.tracking.status import check_server

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed once the block ends: nothing listens there


class _Unavailable(BaseHTTPRequestHandler):
    status = 503

    def _answer(self):
        body = b"<Error><Code>ServiceUnavailable</Code><Message>down for maintenance</Message></Error>"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


class _Forbidden(_Unavailable):
    status = 403


def _serve(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def unavailable_store():
    """An HTTP server that answers every request 503 (an object store, a tracking server failing) and one that
    answers 403 (a refused credential): their URLs."""
    failing, refusing = _serve(_Unavailable), _serve(_Forbidden)
    yield (f"http://127.0.0.1:{failing.server_address[1]}", f"http://127.0.0.1:{refusing.server_address[1]}")
    failing.shutdown()
    refusing.shutdown()


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


def test_an_object_store_answering_503_is_storage_unreachable_and_403_is_not(unavailable_store):
    """A read of a table's log through pyarrow's S3 client (as the lakehouse reads) against a store answering 503:
    the retryable class; answering 403 (a refused credential, a missing permission): no outage, left a bug's
    traceback rather than called retryable."""
    import pyarrow.fs as pafs

    found = []
    for endpoint in unavailable_store:
        store = pafs.S3FileSystem(
            endpoint_override=endpoint,
            access_key="k",
            secret_key="s",
            region="us-east-1",
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
        )
        with pytest.raises(OSError) as raised:
            store.get_file_info("bucket/lake/table/_delta_log/00000000000000000000.json")
        found.append(user_error(raised.value))
    assert isinstance(found[0], StorageUnreachable), found
    assert "the object store failed mid-run" in str(found[0]) and "503" in str(found[0])
    assert found[1] is None, found[1]


def test_an_mlflow_server_gone_or_failing_is_tracking_unreachable_and_a_refusal_is_not(monkeypatch, unavailable_store):
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    found = []
    for uri in (f"http://user:s3cret@127.0.0.1:{_closed_port()}", *unavailable_store):
        with pytest.raises(Exception) as raised:
            MlflowClient(uri).log_metric("0" * 32, "f1", 0.5)
        found.append(user_error(raised.value))
    gone, failing, refused = found
    assert isinstance(gone, TrackingUnreachable) and isinstance(failing, TrackingUnreachable), found
    assert "s3cret" not in str(gone) and "Connection refused" in str(gone), gone  # the URI's password never said
    assert "down for maintenance" not in str(failing)  # the server's answer is not printed
    assert refused is None, refused


def test_the_start_check_finds_a_server_gone_or_hung_within_its_timeout():
    start = time.monotonic()
    with pytest.raises(TrackingUnreachable, match=r"did not answer within 2 s"):
        check_server(f"http://127.0.0.1:{_closed_port()}", 2.0)
    with socket.socket() as hung:  # accepts connections, never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(8)
        port = hung.getsockname()[1]
        hung_since = time.monotonic()
        with pytest.raises(TrackingUnreachable, match=rf"127.0.0.1:{port} did not answer within 1 s"):
            check_server(f"http://127.0.0.1:{port}", 1.0)
        assert 1.0 <= time.monotonic() - hung_since < 5
    for uri in (f"http://user:s3cret@127.0.0.1:{_closed_port()}", "http://user:s3cret@host-without-port/x"):
        with pytest.raises(TrackingUnreachable) as raised:  # a URI's password never in the line
            check_server(uri, 1.0)
        assert "s3cret" not in str(raised.value) and "user" not in str(raised.value)
    assert time.monotonic() - start < 20
    check_server("sqlite:////tmp/x.db", 0.1)  # not a server: nothing to ask


def test_the_spark_submit_entry_says_a_fault_in_one_line_with_its_code(tmp_path):
    """``python jobs/foundation/ingest.py`` (what ``spark-submit jobs/foundation/ingest.py`` runs) with its tracking
    server down: exit 8 and one line naming the server, before a JVM starts; with a bad key: exit 2."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [
        sys.executable,
        str(REPO / "jobs" / "foundation" / "ingest.py"),
        "--set",
        f"lakehouse.root={tmp_path / 'lake'}",
    ]
    start = time.monotonic()
    down = subprocess.run(
        [*args, "--set", f"tracking.uri=http://127.0.0.1:{_closed_port()}", "tracking.start_timeout_s=2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert down.returncode == 8, down.stderr[-3000:]
    assert (
        down.stderr.strip()
        .splitlines()[-1]
        .startswith("augment: tracking unreachable: the MLflow tracking server http://127.0.0.1:")
    )
    assert "Traceback" not in down.stderr and time.monotonic() - start < 60
    bad = subprocess.run(
        [*args, "--set", "tracking.start_timeout_s=0"], capture_output=True, text=True, timeout=120, env=env
    )
    assert bad.returncode == 2 and "tracking.start_timeout_s" in bad.stderr.strip().splitlines()[-1], bad.stderr


def test_an_object_store_answering_503_to_a_commit_leaves_no_version_and_the_rerun_commits_once(monkeypatch):
    """delta-rs's commit of a table version to an S3 server (moto's, over HTTP) whose proxy answers 503 to the put
    of the log entry, after the data files were written: the retryable class naming the request and the status, no
    version, the written files removed; the rerun of the same write (same transaction id) commits once, and a third
    finds its commit and skips. The client's retries end in their bound (``max_retries``/``retry_timeout``, keys
    of ``lakehouse.storage_options``)."""
    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable
    from s3_proxy import UNAVAILABLE, S3Proxy

    from common.platform.lakehouse.delta_rs import commit_files
    from common.platform.storage import filesystem

    def rows(values):
        def write(folder):
            store, path = filesystem(folder)
            pq.write_table(pa.table({"a": values}), f"{path}/part-0.parquet", filesystem=store)

        return write

    with S3Proxy.over_moto(monkeypatch) as proxy:
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="lake")
        storage = {"AWS_S3_ALLOW_UNSAFE_RENAME": "true", "max_retries": "2", "retry_timeout": "5s"}
        location = "s3://lake/t"
        assert commit_files("t", location, storage, "overwrite", None, rows([1, 2, 3]), app_id="day-1").version == 0
        proxy.refuse("PUT", "/_delta_log/", 503, UNAVAILABLE)
        start = time.monotonic()
        with pytest.raises(OSError) as raised:
            commit_files("t", location, storage, "append", None, rows([4, 5]), app_id="day-2")
        assert time.monotonic() - start < 30 and proxy.refused == 3  # the first try and the 2 retries
        found = user_error(raised.value)
        assert isinstance(found, StorageUnreachable) and report(found) == 4
        assert "PUT http://127.0.0.1:" in str(found) and "/lake/t/_delta_log/00000000000000000001.json" in str(found)
        assert "503 Service Unavailable" in str(found) and "\n" not in str(found) and "<Error>" not in str(found)
        assert DeltaTable(location, storage_options=storage).version() == 0
        # the failed write's files went with its folder: the data files left are version 0's
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket="lake")["Contents"]]
        committed = DeltaTable(location, storage_options=storage).file_uris()
        assert [f"s3://lake/{k}" for k in keys if k.endswith(".parquet")] == committed and len(committed) == 1
        assert [k for k in keys if "_delta_log" in k] == ["t/_delta_log/00000000000000000000.json"]
        proxy.refuse(status=0)
        assert commit_files("t", location, storage, "append", None, rows([4, 5]), app_id="day-2").version == 1
        again = commit_files("t", location, storage, "append", None, rows([4, 5]), app_id="day-2")
        assert again.skipped and again.version == 1
        table = DeltaTable(location, storage_options=storage)
        assert table.version() == 1 and sorted(table.to_pyarrow_table()["a"].to_pylist()) == [1, 2, 3, 4, 5]
