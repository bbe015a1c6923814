"""File access by path or URI (local paths, file://, s3://, gs://, abfs://...) through pyarrow's filesystems.

Only file listings and small files (models, reports) go through here; table data is read and written by
Spark and delta-rs.
"""
from __future__ import annotations

import logging
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


def is_local(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return "://" not in uri or uri.startswith("file://")


def filesystem(uri: str):
    """``(pyarrow FileSystem, path inside it)`` for a path or URI."""
    import pyarrow.fs as pafs

    if is_local(uri):
        return pafs.LocalFileSystem(), uri.removeprefix("file://")
    return pafs.FileSystem.from_uri(uri)


def list_files(uri: str) -> list:
    """FileInfo of every file under ``uri`` (recursively), or of ``uri`` itself when it is a file."""
    import pyarrow.fs as pafs

    fs, root = filesystem(uri)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        return [info]
    if info.type != pafs.FileType.Directory:
        return []
    return [e for e in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if e.type == pafs.FileType.File]


def put_file(local_path: str, uri: str) -> None:
    """Copy a local file to ``uri`` (parent folders are created for local targets)."""
    if is_local(uri):
        target = Path(uri.removeprefix("file://"))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local_path, target)
        return
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    pafs.copy_files(local_path, path, destination_filesystem=fs)


def put_folder(local_dir: str, uri: str) -> None:
    """Copy every file under ``local_dir`` to the same relative paths under ``uri``."""
    root = Path(local_dir)
    for path in sorted(root.rglob("*")):
        if path.is_file():
            put_file(str(path), f"{uri.rstrip('/')}/{path.relative_to(root).as_posix()}")


def exists(uri: str) -> bool:
    """True when ``uri`` names an existing file or folder."""
    import pyarrow.fs as pafs

    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def local_copy(uri: str) -> str:
    """A local folder holding ``uri``'s files (the folder itself when it is already local)."""
    if is_local(uri):
        return uri.removeprefix("file://")
    import pyarrow.fs as pafs

    target = tempfile.mkdtemp(prefix="augment-")
    fs, path = filesystem(uri)
    pafs.copy_files(path, target, source_filesystem=fs)
    return target


def remove_tree(uri: str) -> None:
    """Delete a folder; failures are logged, never raised (cleanup must not hide the original error)."""
    import pyarrow.fs as pafs

    try:
        fs, root = filesystem(uri)
        if fs.get_file_info(root).type == pafs.FileType.Directory:
            fs.delete_dir(root)
    except Exception as exc:
        log.warning("could not remove %s: %s", uri, exc)


def cache_root() -> str:
    """The suite's machine-local cache (converted encoders, the BoostAug synonym table): ``$AUGMENT_CACHE``,
    default ``~/.cache/catalog-augment``."""
    import os

    return os.environ.get("AUGMENT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "catalog-augment")


def read_json(path: str) -> dict:
    """The JSON object in the local file ``path``, or {} when there is no such file (optional model configs)."""
    import json
    import os

    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


@contextmanager
def local_commit_lock(location: str) -> Iterator[None]:
    """Hold an exclusive lock on the local table folder ``location`` for the body (a no-op for object stores).

    Why: on a local file system Spark's Delta log store commits version N by checking that N's file is absent
    and then renaming onto it, and a POSIX rename replaces: two processes committing one version at once can
    both "succeed", the later silently replacing the earlier (and Hadoop's checksum sidecar of the one no
    longer matching the other's file). Object stores get put-if-absent from their log stores, and delta-rs
    commits locally with an atomic no-replace rename; this lock gives Spark's writer the same guarantee on a
    local lakehouse. It is a ``flock`` on ``.<folder>.commit-lock`` beside the table folder, taken on a
    descriptor of its own per call, so it serializes writers in other processes and in other threads alike;
    the kernel releases it when a holder dies.
    """
    if not is_local(location):
        yield
        return
    import fcntl

    folder = Path(location.removeprefix("file://"))
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.commit-lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another writer of %s to commit", location)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as exc:  # a mount without locks (some FUSE file systems): commit as Spark alone would
            log.warning("no commit lock for %s (%s): concurrent Spark writers of it are not serialized",
                        location, exc)
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def worker_scratch(prefix: str) -> Iterator[str]:
    """A local temporary folder ``<tmp>/<prefix><pid>-<random>`` for the body (removed after it); returns its path.

    Why the pid: a model worker killed mid-task (SIGKILL, out of memory, a lost node's retry) cannot remove its
    folder, and a trainer's holds a copy of its training text. On entry, the folders of this prefix whose
    process no longer exists are removed, so a retried task does not leave its killed attempt's copy behind.
    A folder of a live process (or of a pid reused since) is kept. Assumes the temp folder is this host's and
    its pids are ours: a ``/tmp`` shared with another pid namespace would see that one's folders as dead.
    """
    import os
    import re

    root = tempfile.gettempdir()
    shape = re.compile(re.escape(prefix) + r"(\d+)-[^/]+$")
    for name in os.listdir(root):
        match = shape.match(name)
        if match and not _process_exists(int(match.group(1))):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-") as folder:
        yield folder


def _process_exists(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
