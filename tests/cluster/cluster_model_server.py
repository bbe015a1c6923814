"""The model server of the endpoint tests and rehearsals: Hugging Face's ``transformers serve`` of a local model
folder, an OpenAI-compatible API on loopback."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

from cluster_processes import REPO, ClusterError


def smollm2_folder(python: str) -> str:
    """The packaged SmolLM2's model folder, made once per machine by ``python`` (the project's venv, run in the
    repository): the model server's environment holds no project to make it."""
    code = "from common.models.generation.kinds.smollm2 import materialise_smollm2; print(materialise_smollm2())"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    return done.stdout.strip().splitlines()[-1]


def model_server_command(python: str, folder: str, port: int) -> list[str]:
    """Hugging Face's ``transformers serve`` of the local model ``folder`` on 127.0.0.1:``port``, on CPU in float32:
    the OpenAI-compatible server of the endpoint tests and rehearsals (it answers ``/v1/completions`` and
    ``/v1/chat/completions``, and logs each request as an access line)."""
    return [
        python,
        "-m",
        "transformers.cli.transformers",
        "serve",
        folder,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
        "--dtype",
        "float32",
    ]


def model_server_env(hub: Path) -> dict[str, str]:
    """The model server's variables: offline, with a hub cache of its own in ``hub`` (with none its /v1/models
    answers 500; with one, it lists no local folder but serves it)."""
    hub.mkdir(parents=True, exist_ok=True)
    return {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def start_model_server(
    python: str, folder: str, port: int, log: Path, hub: Path, timeout: float = 180.0
) -> subprocess.Popen:
    """:func:`model_server_command` started with its output to ``log`` (appended), once its ``/v1/models``
    answers; raises :class:`ClusterError` with the log's tail when it exits or does not answer in ``timeout`` s."""
    with open(log, "ab") as out:
        server = subprocess.Popen(
            model_server_command(python, folder, port),
            env={**os.environ, **model_server_env(hub)},
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=hub.parent,
        )
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise ClusterError(
                    f"transformers serve did not start: {log.read_text(errors='replace')[-3000:]}"
                ) from None
            time.sleep(0.5)
