"""File access by path or URI (local paths, file://, s3://, gs://, abfs://...) through pyarrow's filesystems.

Only file listings and small files (models, reports) go through here; table data is read and written by
Spark and delta-rs.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

log = logging.getLogger(__name__)


# Hadoop's S3 connectors (s3a, the current one; s3n, its predecessor) name the same objects as s3://.
S3_SCHEMES = ("s3", "s3a", "s3n")


class StorageUnreachable(OSError):
    """The object store behind a path cannot be reached (down, wrong endpoint, refused credentials); the message
    names the path and the endpoint."""


def is_local(uri: str) -> bool:
    """True for plain paths and ``file://`` URIs."""
    return "://" not in uri or uri.startswith("file://")


def scheme(uri: str) -> str:
    """The URI's scheme (``s3a``, ``abfss``...), ``file`` for a plain path."""
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def is_s3(uri: str) -> bool:
    """True for ``s3://``, ``s3a://`` and ``s3n://`` URIs."""
    return scheme(uri) in S3_SCHEMES


def arrow_uri(uri: str) -> str:
    """``uri`` as pyarrow (and so Ray Data) names it: Hadoop's ``s3a://`` / ``s3n://`` become ``s3://`` (the same
    objects: Spark writes a lakehouse on S3 through s3a, delta-rs reads both spellings, pyarrow only s3://)."""
    return "s3://" + uri.split("://", 1)[1] if scheme(uri) in ("s3a", "s3n") else uri


def filesystem(uri: str):
    """``(pyarrow FileSystem, path inside it)`` for a path or URI (s3a:// and s3n:// read as s3://). An S3
    endpoint other than AWS comes from ``AWS_ENDPOINT_URL`` (pyarrow reads it, as delta-rs and boto3 do)."""
    import pyarrow.fs as pafs

    if is_local(uri):
        return pafs.LocalFileSystem(), uri.removeprefix("file://")
    return pafs.FileSystem.from_uri(arrow_uri(uri))


def endpoint(uri: str) -> str:
    """Where the store behind ``uri`` answers, for messages: S3's ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``
    (or AWS itself), the host of other URIs, ``local disk`` for paths."""
    if is_local(uri):
        return "local disk"
    if is_s3(uri):
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "the default region"
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or f"AWS S3 ({region})"
    return f"{scheme(uri)}://{uri.split('://', 1)[1].split('/', 1)[0]}"


def check_reachable(uri: str, timeout_s: float = 10.0) -> None:
    """Raise :class:`StorageUnreachable` naming ``uri`` and its endpoint unless the store behind it answers a
    metadata request within about ``timeout_s`` (a missing path is fine: the store answered). Local paths are
    not checked. Why: with the store down, Hadoop's s3a and delta-rs retry for minutes before they fail, deep
    inside the first read or write; a job checks its lakehouse first and fails at once, before it writes."""
    if is_local(uri):
        return
    import pyarrow.fs as pafs

    try:
        if is_s3(uri):
            # One attempt with short timeouts; region and credentials come from the environment (the endpoint too,
            # but pyarrow's constructor reads only what FileSystem.from_uri does not: it is passed here).
            override = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
            fs = pafs.S3FileSystem(
                connect_timeout=min(timeout_s, 5.0),
                request_timeout=timeout_s,
                endpoint_override=override or None,
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
            )
            path = arrow_uri(uri).split("://", 1)[1]
        else:
            fs, path = filesystem(uri)
        fs.get_file_info(path.rstrip("/"))
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split())
        raise StorageUnreachable(f"{uri}: the object store at {endpoint(uri)} did not answer: {reason[:300]}") from exc


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


# A folder put_folder is writing holds WRITING; one it finished holds COMPLETE (each file's size and sha256) and no
# WRITING. A kill, an outage or a full disk during the copy leaves WRITING: the folder is no model to load.
WRITING, COMPLETE = "_WRITING", "_COMPLETE.json"


def put_folder(local_dir: str, uri: str) -> None:
    """Copy every file under ``local_dir`` to the same relative paths under ``uri``, marked while it is written:
    :data:`WRITING` first (an earlier :data:`COMPLETE` removed), then the files, then :data:`COMPLETE` listing each
    file's size and sha256, then :data:`WRITING` removed. :func:`folder_state` reads the marks."""
    import hashlib
    import json

    root, base = Path(local_dir), uri.rstrip("/")
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name not in (WRITING, COMPLETE)]
    write_text(f"{base}/{WRITING}", json.dumps({"since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
    remove_file(f"{base}/{COMPLETE}")
    listed = {}
    for path in files:
        relative = path.relative_to(root).as_posix()
        put_file(str(path), f"{base}/{relative}")
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        listed[relative] = {"size": path.stat().st_size, "sha256": digest.hexdigest()}
    if is_local(base):  # the files on disk before the mark that vouches for them (a power cut, a host's crash)
        for relative in listed:
            _fsync(f"{base.removeprefix('file://')}/{relative}")
    write_text(f"{base}/{COMPLETE}", json.dumps({"files": listed}, indent=1, sort_keys=True))
    remove_file(f"{base}/{WRITING}")


def _fsync(path: str) -> None:
    """Flush the local file ``path`` to its disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def folder_state(uri: str) -> str:
    """What the folder ``uri`` is: ``absent`` (no file), ``incomplete`` (:func:`put_folder` did not finish it: its
    :data:`WRITING` mark is there, or a file :data:`COMPLETE` lists is missing or of another size), ``complete``, or
    ``unmarked`` (written before the marks, or by other means: the caller's own check decides)."""
    import json

    base = uri.rstrip("/")
    infos = list_files(base)
    if not infos:
        return "absent"
    prefix = len(filesystem(base)[1].rstrip("/")) + 1  # the paths list_files gives are the filesystem's
    sizes = {info.path[prefix:]: info.size for info in infos}
    if WRITING in sizes:
        return "incomplete"
    if COMPLETE not in sizes:
        return "unmarked"
    try:
        listed = json.loads(read_text(f"{base}/{COMPLETE}"))["files"]
    except (ValueError, KeyError):
        return "incomplete"
    return "complete" if all(sizes.get(name) == entry["size"] for name, entry in listed.items()) else "incomplete"


def remove_file(uri: str) -> None:
    """Delete the file ``uri``; absent already is fine."""
    fs, path = filesystem(uri)
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass


def read_parquet_files(files: Sequence[str], columns: Sequence[str], filters: Optional[list] = None):
    """A pyarrow Table of ``columns`` of the Parquet ``files`` (paths, or URIs of one store: a table version's file
    list), the rows matching pyarrow ``filters`` when given. pyarrow's dataset takes a list of URIs only with their
    file system named, so it is resolved here from the first file."""
    import pyarrow.parquet as pq

    files = list(files)
    if files and not is_local(files[0]):
        fs, _ = filesystem(files[0])
        paths = [filesystem(f)[1] for f in files]
        return pq.ParquetDataset(paths, filesystem=fs, filters=filters or None).read(columns=list(columns))
    return pq.ParquetDataset([f.removeprefix("file://") for f in files], filters=filters or None).read(
        columns=list(columns)
    )


def read_text(uri: str) -> str:
    """The UTF-8 text of the file ``uri`` (a path or an object-store URI)."""
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as handle:
        return handle.read().decode("utf-8")


def write_text(uri: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the file ``uri``, replacing it whole (local parent folders are created): locally
    through a temporary file renamed over it, so a reader or a kill never meets half a file (an object store's put
    is whole by itself)."""
    if is_local(uri):
        import uuid

        target = Path(uri.removeprefix("file://"))
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
        try:
            with open(temporary, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())  # on disk before the rename: a power cut leaves the old file or the new
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        return
    fs, path = filesystem(uri)
    with fs.open_output_stream(path) as handle:
        handle.write(text.encode("utf-8"))


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
    return os.environ.get("AUGMENT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "catalog-augment")


def read_json(path: str) -> dict:
    """The JSON object in the local file ``path``, or {} when there is no such file (optional model configs)."""
    import json

    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


class StorageBusy(Exception):
    """Another run held what this one needed of the storage (a table's commit lock or lease) for longer than it
    would wait: retryable once that run is done (exit code 4)."""


@contextmanager
def worker_scratch(prefix: str) -> Iterator[str]:
    """A local temporary folder ``<tmp>/<prefix><pid>-<random>`` for the body (removed after it); returns its path.

    Why the pid: a model worker killed mid-task (SIGKILL, out of memory, a lost node's retry) cannot remove its
    folder, and a trainer's holds a copy of its training text. On entry, the folders of this prefix whose
    process no longer exists are removed, so a retried task does not leave its killed attempt's copy behind.
    A folder of a live process (or of a pid reused since) is kept. Assumes the temp folder is this host's and
    its pids are ours: a ``/tmp`` shared with another pid namespace would see that one's folders as dead.
    """
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
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
