"""The lease a stage holds on its roles' response logs (:mod:`common.models.generation.served.log`) while it sends
to a served model (:func:`sending`), so that two concurrent runs of a stage never both pay for the same answers: a
``flock`` beside a local log, the commit lease object (a conditional put) beside an S3 one.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import Iterator, Sequence


@contextlib.contextmanager
def stage_lease(roots: Sequence[str], stage: str) -> Iterator[None]:
    """Hold the lease of the response logs at ``roots`` while the stage ``stage`` sends, so that two concurrent runs
    of a stage never both pay: the second is refused at once with :class:`~common.platform.errors.StageBusy` naming
    the holder (exit code 6; run it again when the first has ended, and it finds the first's answers). A local log's
    lease is a ``flock`` on ``.<role>.lease`` beside it, released by the kernel when its holder dies; an S3 log's is
    the commit lease object (:func:`~common.platform.lakehouse.commit_lease.s3_commit_lease`: a conditional put, broken
    once not renewed for a minute). Other stores take no lease (documented)."""
    from common.platform.storage import is_local, is_s3

    with contextlib.ExitStack() as stack:
        for root in sorted(dict.fromkeys(roots)):  # one order for every run: no two runs hold each half
            if is_local(root):
                stack.enter_context(_local_lease(root.removeprefix("file://"), stage))
            elif is_s3(root):
                stack.enter_context(_s3_lease(root, stage))
        yield


@contextlib.contextmanager
def _local_lease(root: str, stage: str) -> Iterator[None]:
    import fcntl

    from common.platform.errors import StageBusy

    parent, name = os.path.split(root.rstrip("/"))
    os.makedirs(parent or ".", exist_ok=True)
    path = os.path.join(parent, f".{name}.lease")
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise StageBusy(
                f"{stage}: another run is sending to the model server ({path} held by "
                f"{handle.read().strip() or 'a live process'}); this run sends nothing: run it again "
                f"when that one has ended"
            ) from None
        handle.truncate(0)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        handle.write(f"{socket.gethostname()}:{os.getpid()} since {since}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def _s3_lease(root: str, stage: str) -> Iterator[None]:
    from common.platform.errors import StageBusy
    from common.platform.lakehouse.commit_lease import CommitLeaseTimeout, LeaseSettings, s3_commit_lease

    try:
        lease = s3_commit_lease(root, stage, LeaseSettings(wait_s=0.0, poll_s=0.1))
        lease.__enter__()
    except CommitLeaseTimeout as exc:
        raise StageBusy(
            f"{stage}: another run is sending to the model server ({exc}); this run sends nothing: run "
            f"it again when that one has ended"
        ) from None
    try:
        yield
    finally:
        lease.__exit__(None, None, None)


def sending(generator_uris: Sequence[str], stage: str):
    """The context a generation stage sends in: for served generators among ``generator_uris``, the lease of their
    response logs (:func:`stage_lease`: a second concurrent run of the stage
    is refused, so that the two never both pay); else nothing."""
    from common.models.generation.served.engine import served_generators
    from common.models.generation.served.log import log_root

    served = served_generators(generator_uris)
    return stage_lease([log_root(uri) for uri in served], stage) if served else contextlib.nullcontext()
