"""A table's commit lease on S3: one writing driver at a time, where Spark's Delta log store cannot promise it.

Spark's Delta writer commits version N of a table on S3 through ``S3SingleDriverLogStore``: it checks that N's
log file is absent and then writes it, which is safe for the writers of ONE driver JVM (they share an in-memory
lock) and unsafe across drivers: two drivers that both see N absent both write it, and the later silently
replaces the earlier (a lost commit, its data files orphaned). The multi-writer answers are a DynamoDB log store
(``S3DynamoDBLogStore``) or a catalog that coordinates commits (Unity Catalog): see the operations page
"Running on a cluster". This lease is the suite's guard without them: before a native write to a table on S3, the
driver creates a lease object beside the table with S3's conditional put (``If-None-Match: *``, atomic on AWS S3
since 2024), keeps it alive while the write runs, and deletes it after. A second driver writing the same table
waits for it, and fails with a clear error naming the holder when it waits longer than ``wait_s``. A holder
killed mid-write stops renewing: its lease is broken ``ttl_s`` after its last renewal (measured on the store's
own clock, so the drivers' clocks need not agree). Writers outside the suite are not guarded.

delta-rs needs no lease: it commits on S3 with conditional put itself. A local table's commit lock (a ``flock``) is
:mod:`common.platform.lakehouse.commit_flock`; :func:`commit_lock` and :func:`claim` pick the one a location needs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Iterator, Optional

from common.platform.lakehouse.commit_flock import LockTimeout, local_commit_lock
from common.platform.lakehouse.tables import LakehouseError
from common.platform.process.identity import process_gone, process_tags
from common.platform.process.termination import cause
from common.platform.storage import StorageBusy, arrow_uri, is_local

log = logging.getLogger(__name__)


class CommitLeaseTimeout(LakehouseError, StorageBusy):
    """Another driver held a table's commit lease for longer than this writer would wait."""


@dataclass(frozen=True)
class LeaseSettings:
    """How long a lease lives without renewal (``ttl_s``; renewed every third of it) and how long a writer waits
    for another's (``wait_s``)."""

    ttl_s: float = 60.0
    wait_s: float = 600.0
    poll_s: float = 2.0


# A lease whose writer (its driver and the JVMs committing for it) is gone from this host is broken this long after a
# waiter first saw it gone, not after ttl_s: what the JVM had in flight has landed or failed by then.
GONE_GRACE_S = 10.0


def lease_key(location: str) -> tuple[str, str]:
    """(bucket, key) of the lease object of the table at ``location``: ``.<table>.commit-lock`` beside the table's
    folder, the name the local flock takes (:func:`~common.platform.lakehouse.commit_flock.local_commit_lock`)."""
    path = arrow_uri(location).split("://", 1)[1].rstrip("/")
    bucket, _, key = path.partition("/")
    parent, _, name = key.rpartition("/")
    return bucket, f"{parent}/.{name}.commit-lock" if parent else f".{name}.commit-lock"


@functools.lru_cache(maxsize=1)
def _client():
    import boto3

    # boto3 takes the endpoint (AWS_ENDPOINT_URL), region and credentials from the environment, as delta-rs and
    # pyarrow do; one client per process (a client is thread-safe, and costs a few ms to build).
    return boto3.client("s3")


def _code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


def _conditional_failed(exc: Exception) -> bool:
    # 412: the condition did not hold; 409 ConditionalRequestConflict: a concurrent conditional write won.
    return _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409")


@contextlib.contextmanager
def s3_commit_lease(location: str, table: str, settings: LeaseSettings = LeaseSettings()) -> Iterator[None]:
    """Hold the commit lease of the table at ``location`` (``s3://`` / ``s3a://``) for the body. Waits while another
    driver holds it; raises :class:`CommitLeaseTimeout` naming the holder after ``settings.wait_s``. Breaks a lease
    not renewed for ``settings.ttl_s`` (its holder died)."""
    from botocore.exceptions import ClientError

    client = _client()
    bucket, key = lease_key(location)
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    body = json.dumps(
        {
            "owner": owner,
            "table": table,
            "location": location,
            "process": process_tags(),
            "jvms": [process_tags(pid) for pid in _jvm_pids()],
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
    ).encode()
    started, announced, denied = time.monotonic(), False, None
    holder: Optional[dict] = None
    tried: set[str] = set()  # the stale leases this writer tried to break: once each, never a loop of deletes
    gone_since: dict[str, float] = {}  # leases whose writer was first seen gone, when
    while True:
        try:
            etag = client.put_object(Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")["ETag"]
            break
        except ClientError as exc:
            if not _conditional_failed(exc):
                raise
        holder = _holder(client, bucket, key)
        gone = False
        if holder is not None and _writer_gone(holder):  # on this writer's clock: the lease's age says nothing
            gone = time.monotonic() - gone_since.setdefault(holder["etag"], time.monotonic()) >= min(
                GONE_GRACE_S, settings.ttl_s
            )
        if holder is not None and (holder["age_s"] > settings.ttl_s or gone) and holder["etag"] not in tried:
            # Before the bound: a writer that may not wait (wait_s 0) still breaks a dead writer's lease. A writer of
            # this host whose process is gone (a signal, a kill) is known dead: its lease is broken without the ttl.
            tried.add(holder["etag"])
            log.warning(
                "breaking the commit lease of %s held by %s: %s",
                table,
                holder["owner"],
                "its process on this host is gone"
                if gone
                else f"not renewed for {holder['age_s']:.0f} s (its writer died?)",
            )
            try:
                client.delete_object(Bucket=bucket, Key=key, IfMatch=holder["etag"])
                continue
            except ClientError as exc:  # another waiter broke it first (its etag no longer matches), denied, or busy
                if _code(exc) in ("AccessDenied", "403", "AllAccessDisabled"):
                    denied = _code(exc)
                    log.warning("the stale commit lease s3://%s/%s cannot be deleted: %s", bucket, key, denied)
                elif not _conditional_failed(exc) and _code(exc) not in ("NoSuchKey", "404"):
                    tried.discard(holder["etag"])  # a store that did not answer (500, SlowDown): tried next poll
        waited = time.monotonic() - started
        if waited > settings.wait_s:
            who = f"held by {holder['owner']} since {holder['since']}" if holder else "its holder unknown"
            why = (
                (
                    f"; the stale lease could not be deleted ({denied}): delete s3://{bucket}/{key} or grant "
                    "s3:DeleteObject on it"
                )
                if denied
                else ""
            )
            raise CommitLeaseTimeout(
                f"write to {table!r} ({location}) waited {waited:.0f} s for another writer's commit lease "
                f"(s3://{bucket}/{key}, {who}){why}. Spark's Delta log store on S3 is safe for one writing driver at "
                f"a time: run the writers one after the other, raise lakehouse.commit_wait_s, or configure a "
                f"multi-writer log store (docs: Running on a cluster)"
            )
        if holder is not None and not announced:
            log.info(
                "waiting for the commit lease of %s, held by %s since %s", table, holder["owner"], holder["since"]
            )
            announced = True
        # A holder gone between our put and our look: again, soon.
        time.sleep(settings.poll_s if holder is not None else min(settings.poll_s, 0.1))
    renewer = _Renewer(client, bucket, key, body, etag, settings.ttl_s / 3, table)
    renewer.start()
    released = True
    try:
        yield
    except BaseException as exc:
        if cause(exc) is None:  # an error, or a notebook's interrupt: released below
            raise
        # A signal: the run ends, but its JVM may still be writing the log's next commit. The lease is left to
        # expire (ttl_s, no longer renewed) so that no other driver writes that same commit file meanwhile; once
        # this process (and the JVM with it) is gone, a writer on this host breaks it at once. A notebook's
        # interrupt (the process goes on) releases it as an error does.
        released = False
        raise
    finally:
        renewer.stop()
        if renewer.lost:
            log.error(
                "the commit lease of %s was lost while writing (%s): another writer may have committed "
                "concurrently; check the table's history",
                table,
                renewer.lost,
            )
        if released:
            with contextlib.suppress(ClientError):
                client.delete_object(Bucket=bucket, Key=key, IfMatch=renewer.etag)


def _holder(client, bucket: str, key: str) -> Optional[dict]:
    """The lease object's owner, start, ETag and age on the store's clock (its ``Date`` header against the object's
    ``LastModified``), or None when there is none."""
    from botocore.exceptions import ClientError

    try:
        response = client.get_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if _code(exc) in ("NoSuchKey", "404"):
            return None
        raise
    info = json.loads(response["Body"].read() or b"{}")
    now = parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"])
    return {
        "owner": info.get("owner", "?"),
        "since": info.get("since", "?"),
        "etag": response["ETag"],
        "age_s": (now - response["LastModified"]).total_seconds(),
        "process": info.get("process") or {},
        "jvms": info.get("jvms") or [],
    }


def _jvm_pids() -> list[int]:
    """The JVMs that commit for this driver: its parent under spark-submit (the JVM starts the Python driver), or
    the gateway JVM the driver started itself (pyspark in local mode)."""
    pids = []
    try:
        with open(f"/proc/{os.getppid()}/comm", encoding="ascii") as handle:
            if handle.read().strip() == "java":
                pids.append(os.getppid())
    except OSError:
        pass
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        process = getattr(SparkContext._gateway, "proc", None)
        if process is not None and process.pid not in pids:
            pids.append(process.pid)
    return pids


def _writer_gone(holder: dict) -> bool:
    """Whether the lease's writer, the Python driver and every JVM committing for it, ran on this host and is gone."""
    return process_gone(holder["process"]) and all(process_gone(jvm) for jvm in holder["jvms"])


class _Renewer(threading.Thread):
    """Rewrites the lease object (``If-Match`` its last ETag) every ``every_s`` seconds until stopped; records in
    ``lost`` why a renewal failed (another writer broke the lease)."""

    def __init__(self, client, bucket: str, key: str, body: bytes, etag: str, every_s: float, table: str):
        super().__init__(name=f"commit-lease-{table}", daemon=True)
        self.client, self.bucket, self.key, self.body, self.etag = client, bucket, key, body, etag
        self.every_s, self.lost = every_s, ""
        self._halt = threading.Event()

    def run(self) -> None:
        from botocore.exceptions import ClientError

        while not self._halt.wait(self.every_s):
            try:
                self.etag = self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=self.body, IfMatch=self.etag
                )["ETag"]
            except ClientError as exc:
                self.lost = str(exc)
                return
            except Exception as exc:  # a network blip: the next renewal may succeed within the TTL
                log.warning("commit lease renewal of s3://%s/%s failed: %s", self.bucket, self.key, exc)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


@contextlib.contextmanager
def claim(uri: str, what: str) -> Iterator[bool]:
    """Hold the file or folder ``uri`` for the body so that two processes never work on it at once: yields True, or
    False at once where another holds it (a local flock beside it; on S3 a lease object, as tables' commits take;
    other stores: no lock). A local lock file beside a ``uri`` the body removed goes too."""
    from common.platform.storage import exists, is_s3

    if is_local(uri):
        guard = local_commit_lock(uri, wait_s=0.0)
    elif is_s3(uri):
        guard = s3_commit_lease(uri, what, LeaseSettings(wait_s=0.0, poll_s=0.1))
    else:
        guard = contextlib.nullcontext()
    try:
        guard.__enter__()
    except (LockTimeout, CommitLeaseTimeout):
        yield False
        return
    try:
        yield True
    finally:
        if is_local(uri) and not exists(uri):  # the file done and removed: its lock file goes too
            with contextlib.suppress(OSError):
                lock = Path(uri.removeprefix("file://"))
                (lock.parent / f".{lock.name}.commit-lock").unlink()
        guard.__exit__(None, None, None)


def commit_lock(location: str, table: str, settings: LeaseSettings = LeaseSettings()):
    """The guard around a native Delta write to the path table at ``location``: the local table's flock
    (:func:`~common.platform.lakehouse.commit_flock.local_commit_lock`), the S3 commit lease, or nothing on stores
    whose Delta log stores are multi-writer safe (GCS and Azure commit with put-if-absent or an atomic rename)."""
    from common.platform.storage import is_s3

    if is_local(location):
        return local_commit_lock(location, settings.wait_s)
    if is_s3(location):
        return s3_commit_lease(location, table, settings)
    return contextlib.nullcontext()
