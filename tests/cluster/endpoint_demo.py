"""``make endpoint-demo``: the four generative pipelines from the CLI with their generators served.

    python tests/cluster/endpoint_demo.py [--root DIR]

Starts Hugging Face's ``transformers serve`` of the packaged SmolLM2 on a loopback port (the OpenAI-compatible server
of the endpoint tests, :func:`local_cluster.model_server_command`), then runs ``augment run`` of CGA, query
reformulation, genre transfer and compositional with ``conf/endpoint_demo.yaml`` (every generator ``model.kind:
endpoint``) into a lakehouse of its own under DIR, twice: the first round's generation is the server's (its access
log counts the completions each pipeline asked for), the second sends none and writes no table version. Prints a line
per run and a summary; exits 1 when a run failed or the second round sent or wrote anything. DIR defaults to
build/endpoint-demo; the server's log is DIR/model-server.log.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from local_cluster import REPO, VENV, free_port, smollm2_folder, start_model_server

PIPELINES = ("cga", "query-reformulation", "genre-transfer", "compositional")
CONF = REPO / "conf" / "endpoint_demo.yaml"


def completions(log: Path) -> int:
    return log.read_text(errors="replace").count('"POST /v1/completions HTTP/1.1" 200')


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="endpoint_demo.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(REPO / "build" / "endpoint-demo"))
    root = Path(parser.parse_args(argv).root).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    python = str(VENV / "bin" / "python")
    folder = smollm2_folder(python)
    port, log = free_port(), root / "model-server.log"
    base = f"http://127.0.0.1:{port}/v1"
    server = start_model_server(python, folder, port, log, root / "hub")
    failures: list[str] = []
    try:
        env = {**os.environ, "AUGMENT_ENDPOINT_URL": base, "AUGMENT_ENDPOINT_MODEL": folder}
        common = [
            "--conf",
            str(CONF),
            "--set",
            f"lakehouse.root={root / 'lakehouse'}",
            "--set",
            f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        ]
        augment = str(VENV / "bin" / "augment")
        for round_ in (1, 2):
            tables = subprocess.run([augment, "tables", *common], env=env, capture_output=True, text=True).stdout
            for pipeline in PIPELINES:
                served, started = completions(log), time.monotonic()
                done = subprocess.run(
                    [augment, "run", pipeline, *common], env=env, cwd=REPO, capture_output=True, text=True
                )
                (root / f"{pipeline}-{round_}.log").write_text(done.stdout + done.stderr)
                sent = completions(log) - served
                print(
                    f"[endpoint-demo] round {round_}: augment run {pipeline}: exit {done.returncode} in "
                    f"{time.monotonic() - started:.0f} s, {sent} completions served",
                    flush=True,
                )
                if done.returncode != 0:
                    print(done.stderr[-3000:])
                    failures.append(f"round {round_}: {pipeline} exited {done.returncode}")
                elif (round_ == 1) != (sent > 0):
                    failures.append(f"round {round_}: {pipeline} asked for {sent} completions")
            if round_ == 2:
                after = subprocess.run([augment, "tables", *common], env=env, capture_output=True, text=True).stdout
                if after != tables:
                    failures.append("round 2 wrote new table versions")
        print(f"[endpoint-demo] {completions(log)} completions served in all; the server's log: {log}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    for failure in failures:
        print(f"[endpoint-demo] FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
