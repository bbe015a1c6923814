"""The local cluster's constants and the process tools every part of it uses: free ports, HTTP gets, which
processes live, their descendants, reaping. Only the standard library: the nodes' Python imports it."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VENV = Path(os.environ.get("AUGMENT_VENV", REPO / ".venv"))
DEFAULT_ROOT = REPO / "build" / "cluster"
BUCKET = "augment"
REGION = "us-east-1"
CONF = REPO / "conf" / "cluster_demo.yaml"
# The demo pipeline's order, one spark-submit each (jobs shared by several run once: the later ones skip them).
DEMO_CHAIN = ("cga", "query-reformulation", "boostaug", "genre-transfer", "compositional", "results-summary")
SPARK_WORKERS = ("spark-worker-1", "spark-worker-2")
# The rehearsal's driver and executor JVMs (see spark-defaults.conf below): a 2-core machine's, not a cluster's.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
RAY_NODES = ("ray-head", "ray-node-2")
# Start order; stopped in reverse.
PROCESSES = ("s3-store", "s3", "mlflow", "spark-master", *SPARK_WORKERS, *RAY_NODES, "model-server")
# The served model of the endpoint rehearsal: transformers serve of the packaged SmolLM2's materialised folder.
ENDPOINT_KEY_ENV = "AUGMENT_ENDPOINT_KEY"


class ClusterError(RuntimeError):
    """A process of the local cluster did not start, or a check of it failed; the message names the log."""


def free_port() -> int:
    """A TCP port nothing listens on at this moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 3.0, token: Optional[str] = None) -> bytes:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read()


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if not found:
        raise ClusterError(f"no site-packages under {venv}: run `make install` first")
    return found[0]


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs...), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def exists(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, exited and not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
