"""The S3 commit lease's waits end in their bound: a stale lease that the writer is not allowed to delete (an object
store answering 403 to DeleteObject, as a bucket policy without s3:DeleteObject does) ends in CommitLeaseTimeout
naming the denial after ``wait_s``, instead of a busy loop with no end."""

from __future__ import annotations

import json
import time

import pytest
from s3_proxy import DENIED, S3Proxy


@pytest.fixture()
def s3_denying_deletes(monkeypatch):
    """A moto S3 server (a real HTTP server, in a process of its own) behind an :class:`S3Proxy` answering every
    DELETE with S3's 403 AccessDenied (until told otherwise); boto3 pointed at the proxy."""
    from common.platform.lakehouse import commit_lease

    with S3Proxy.over_moto(monkeypatch) as proxy:
        proxy.refuse("DELETE", status=403, body=DENIED)
        commit_lease._client.cache_clear()
        try:
            yield proxy
        finally:
            commit_lease._client.cache_clear()


def test_a_stale_lease_that_cannot_be_deleted_ends_in_the_bound(s3_denying_deletes):
    from common.platform.lakehouse.commit_lease import (
        CommitLeaseTimeout,
        LeaseSettings,
        _client,
        lease_key,
        s3_commit_lease,
    )

    location = "s3://lake/tables/items"
    bucket, key = lease_key(location)
    client = _client()
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key=key, Body=json.dumps({"owner": "dead-driver", "since": "then"}).encode())
    time.sleep(1.5)  # older than the ttl: its writer died
    started = time.monotonic()
    with pytest.raises(CommitLeaseTimeout, match=r"held by dead-driver.*could not be deleted \(AccessDenied\)"):
        with s3_commit_lease(location, "items", LeaseSettings(ttl_s=1.0, wait_s=3.0, poll_s=0.25)):
            pytest.fail("the lease was taken")
    elapsed = time.monotonic() - started
    assert 3.0 <= elapsed < 6.0, elapsed
    assert s3_denying_deletes.refused == 1  # one try at the stale lease, then the wait: never a loop of deletes
    # allowed to delete, a writer that may not wait at all (a shipping ledger's claim) still breaks a dead writer's
    # lease, and leaves a live one's alone
    s3_denying_deletes.refuse(status=0)
    with s3_commit_lease(location, "items", LeaseSettings(ttl_s=1.0, wait_s=0.0, poll_s=0.25)):
        with pytest.raises(CommitLeaseTimeout, match="held by"):
            with s3_commit_lease(location, "items", LeaseSettings(ttl_s=1.0, wait_s=0.0, poll_s=0.25)):
                pytest.fail("a live lease was taken")


HOLD = """
import fcntl, sys, time
handle = open(sys.argv[1], "a")
fcntl.flock(handle, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_a_local_commit_lock_held_by_another_process_ends_in_the_bound(tmp_path):
    """The local table's flock is polled, not a blocking ``flock`` with no timeout: a holder that never lets go
    (another run stuck mid-commit) ends the wait in LockTimeout naming the lock file."""
    import subprocess
    import sys

    from common.platform.lakehouse.commit_flock import LockTimeout, local_commit_lock

    location = str(tmp_path / "items")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / ".items.commit-lock"), "60"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(LockTimeout, match=r"\.items\.commit-lock: another process held the commit lock"):
            with local_commit_lock(location, wait_s=1.0):
                pytest.fail("the lock was taken")
        assert 1.0 <= time.monotonic() - started < 3.0
    finally:
        holder.kill()
        holder.wait(timeout=10)
    with local_commit_lock(location, wait_s=1.0):  # its holder gone, the kernel released it
        pass


def test_a_notebooks_interrupt_releases_the_local_lock_and_a_signal_keeps_it_until_exit(tmp_path):
    """A run ended by a signal keeps its table's commit lock until the process exits (its JVM may still be
    committing); a notebook user's interrupt releases it at once, as an error does: the process goes on and writes
    the table again."""
    import os

    from common.platform.lakehouse.commit_flock import _HELD_TO_EXIT, LockTimeout, local_commit_lock
    from common.platform.process.termination import Terminated

    location = str(tmp_path / "items")
    with pytest.raises(KeyboardInterrupt):
        with local_commit_lock(location, wait_s=1.0):
            raise KeyboardInterrupt
    with local_commit_lock(location, wait_s=1.0):  # the notebook writes again
        pass
    with pytest.raises(Terminated):
        with local_commit_lock(location, wait_s=1.0):
            raise Terminated(15)
    with pytest.raises(LockTimeout):  # held by the ending run, as by another process
        with local_commit_lock(location, wait_s=0.5):
            pytest.fail("the lock was taken")
    os.close(_HELD_TO_EXIT.pop())  # this test process goes on: let it go
    with local_commit_lock(location, wait_s=1.0):
        pass


TAGS = (
    "import json; from common.platform.process.identity import process_tags; "
    "print(json.dumps(process_tags()), flush=True)"
)


def test_a_lease_left_by_a_process_gone_from_this_host_is_broken_without_the_ttl(monkeypatch):
    """A signalled driver leaves its S3 lease to expire (its JVM may still be committing); once that process and the
    JVMs committing for it are gone from this host, the next writer here breaks it ``GONE_GRACE_S`` after it first
    saw them gone, not after the lease's ttl. A lease whose driver or JVM lives is waited for."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from common.platform.lakehouse import commit_lease
    from common.platform.lakehouse.commit_lease import (
        CommitLeaseTimeout,
        LeaseSettings,
        _client,
        lease_key,
        s3_commit_lease,
    )

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    monkeypatch.setattr(commit_lease, "GONE_GRACE_S", 1.0)
    with S3Proxy.over_moto(monkeypatch):
        commit_lease._client.cache_clear()
        try:
            location = "s3://lake/tables/items"
            bucket, key = lease_key(location)
            client = _client()
            client.create_bucket(Bucket=bucket)
            gone = json.loads(
                subprocess.run(
                    [sys.executable, "-c", TAGS],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=repo,
                    timeout=60,
                    check=True,
                ).stdout
            )
            live = subprocess.Popen(
                [sys.executable, "-c", f"{TAGS}; import time; time.sleep(60)"],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
                cwd=repo,
            )
            alive = json.loads(live.stdout.readline())
            settings = LeaseSettings(ttl_s=600.0, wait_s=3.0, poll_s=0.25)
            try:
                # a live driver; a gone driver whose JVM (spark-submit's, its parent) still runs; a gone driver
                for driver, jvms in ((alive, []), (gone, [alive]), (gone, [])):
                    owner = f"{driver['process.host']}:{driver['process.pid']}:x"
                    client.put_object(
                        Bucket=bucket,
                        Key=key,
                        Body=json.dumps({"owner": owner, "since": "then", "process": driver, "jvms": jvms}).encode(),
                    )
                    started = time.monotonic()
                    if driver is alive or jvms:
                        with pytest.raises(CommitLeaseTimeout, match=f"held by {owner}"):
                            with s3_commit_lease(location, "items", settings):
                                pytest.fail("a live writer's lease was taken")
                        continue
                    with s3_commit_lease(location, "items", settings):
                        took = time.monotonic() - started
                    assert 1.0 <= took < 6.0, took  # the grace from when it was seen gone: not the ttl's 600 s
            finally:
                live.kill()
                live.wait(timeout=10)
        finally:
            commit_lease._client.cache_clear()
