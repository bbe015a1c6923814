"""What the cluster demo uploads to its bucket: the local demo's input files at the keys the cluster demo reads."""

from __future__ import annotations

import os
from pathlib import Path

from cluster_processes import BUCKET, CONF, REPO


def demo_inputs(
    bucket_uri: str = f"s3a://{BUCKET}", conf: Path = CONF, local_conf: Path = REPO / "conf" / "demo.yaml"
) -> dict[str, Path]:
    """{bucket key: local file}: every file the local demo (``local_conf``) reads for an input that the cluster demo
    (``conf``, with ``AUGMENT_BUCKET`` = ``bucket_uri``) reads from the bucket, at the key the cluster demo reads it
    from: a folder's files, a glob's matches, or the file. Listed from the two configs themselves (their paths
    relative to the repository, as ``make demo`` runs), so the uploads follow whatever the demo reads."""
    import glob

    from common.config import load_config

    saved = {key: os.environ.get(key) for key in ("AUGMENT_BUCKET", "RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    cwd = os.getcwd()
    try:
        os.environ["AUGMENT_BUCKET"] = bucket_uri
        os.environ.setdefault("RAY_ADDRESS", "127.0.0.1:6379")
        os.environ.setdefault("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
        os.chdir(REPO)
        local, cluster = load_config(local_conf).inputs, load_config(conf).inputs
    finally:
        os.chdir(cwd)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    uploads: dict[str, Path] = {}
    prefix = bucket_uri.rstrip("/") + "/"
    for name, spec in vars(local).items():
        remote = getattr(cluster, name)
        if not hasattr(spec, "path") or remote is None or not remote.path.startswith(prefix):
            continue
        base = Path(spec.path)
        if base.is_dir():
            files = {p.relative_to(base).as_posix(): p for p in sorted(base.rglob("*")) if p.is_file()}
            for relative, path in files.items():
                uploads[f"{remote.path[len(prefix) :].rstrip('/')}/{relative}"] = path
        else:
            folder, remote_folder = base.parent, remote.path[len(prefix) :].rsplit("/", 1)[0]
            for match in sorted(glob.glob(str(base))):
                uploads[f"{remote_folder}/{Path(match).relative_to(folder).as_posix()}"] = Path(match)
    return uploads
