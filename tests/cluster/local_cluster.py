"""A local cluster that stands in for a real one, every process on 127.0.0.1, started and stopped here.

    python tests/cluster/local_cluster.py up     [--root DIR]   start it (state, logs and scratch under DIR)
    python tests/cluster/local_cluster.py status [--root DIR]   what runs, where (ports, pids, logs)
    python tests/cluster/local_cluster.py env    [--root DIR]   the variables a driver needs (secrets by file)
    python tests/cluster/local_cluster.py submit [--root DIR] -- ARGS   spark-submit jobs/cli.py ARGS on it
    python tests/cluster/local_cluster.py where  [--root DIR]   where Spark tasks and Ray tasks and actors ran
    python tests/cluster/local_cluster.py down   [--root DIR]
    python tests/cluster/local_cluster.py demo   [--root DIR]   the rehearsal (make cluster-demo): the local demo,
                                                    then up, every pipeline through spark-submit twice, checks, down

DIR defaults to build/cluster. What runs:

* **Spark**: a standalone master and two workers (one core each, their own work folders), from pyspark's
  ``bin/spark-class``. Jobs come through ``spark-submit`` with the code as ``--py-files dist/augment.zip``.
* **Ray**: a head node and a second node joined with ``ray start``, with Ray's token authentication (the token in
  a 0600 file named by ``RAY_AUTH_TOKEN_PATH`` in every process; never in a config or a log).
* **Object store**: moto's S3 server (in memory) behind a loopback TCP gateway, which is what goes down when the
  store does (:meth:`LocalCluster.store_down`): the objects survive the outage, as a real store's would. Spark
  reads and writes it through ``s3a://`` (hadoop-aws, in the jars folder), delta-rs, pyarrow and boto3 through the
  ``AWS_ENDPOINT_URL`` of their environment.
* **MLflow**: ``mlflow server`` with a SQLite store on local disk and its artifacts in the bucket.
* **A model server** (``up --model-server``, which ``make cluster-up`` and the rehearsal use): Hugging Face's
  ``transformers serve`` of the packaged SmolLM2's materialised folder, an OpenAI-compatible API on loopback that a
  ``model.kind: endpoint`` generator calls (:func:`model_server_command`); the driver's environment names an API key
  (``AUGMENT_ENDPOINT_KEY``, a secret file's value) that the generation actors on the Ray nodes receive from it.
* **Code shipped, not installed**: every node, executor and driver runs ``<DIR>/node-env``, a venv that sees the
  suite's dependencies (the main venv's site-packages, without its editable install) but not the project. Spark
  executors get the code from ``--py-files``, Ray nodes from the driver's runtime environment (``py_modules``).

The harness, one module per part: ``cluster_processes`` (constants, ports, process tools), ``cluster_layout``
(folders, secrets, each process's environment), ``cluster_commands`` (each process's command line),
``cluster_lifecycle`` (:class:`LocalCluster`: start, wait, kill, stop), ``cluster_jobs`` (``make dist``, uploads,
spark-submit), ``cluster_observe`` (where work ran, the bucket's tables), ``cluster_s3_gateway``,
``cluster_model_server``, ``cluster_inputs`` (the demo's uploads) and ``cluster_rounds`` (the rehearsal). This file
is their command line, and the names other tests and benchmarks import.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Optional, Sequence

# The harness's modules import each other by file name (this folder on the path), however this file was reached:
# as a script, as ``local_cluster`` (tests/cluster on the path) or as ``cluster.local_cluster`` (tests/ on it).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster_inputs import demo_inputs  # noqa: E402
from cluster_lifecycle import LocalCluster  # noqa: E402
from cluster_model_server import (  # noqa: E402
    model_server_command,
    model_server_env,
    smollm2_folder,
    start_model_server,
)
from cluster_processes import (  # noqa: E402
    BUCKET,
    CONF,
    DEFAULT_ROOT,
    DEMO_CHAIN,
    ENDPOINT_KEY_ENV,
    REPO,
    SPARK_WORKERS,
    VENV,
    ClusterError,
    free_port,
)
from cluster_rounds import demo, endpoint_rehearsal, job_table  # noqa: E402
from cluster_s3_gateway import gateway  # noqa: E402

__all__ = [
    "BUCKET",
    "CONF",
    "DEMO_CHAIN",
    "ENDPOINT_KEY_ENV",
    "REPO",
    "SPARK_WORKERS",
    "VENV",
    "ClusterError",
    "LocalCluster",
    "demo",
    "demo_inputs",
    "free_port",
    "model_server_command",
    "model_server_env",
    "smollm2_folder",
    "start_model_server",
]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="local_cluster.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "command", choices=["up", "down", "status", "env", "submit", "where", "demo", "times", "gateway", "endpoint"]
    )
    parser.add_argument("--root", default=str(DEFAULT_ROOT))
    parser.add_argument("--listen", type=int)
    parser.add_argument("--to", type=int)
    parser.add_argument(
        "--ray-mode",
        choices=["address", "spark"],
        default="address",
        help="demo: the model stages on the Ray cluster (address) or on Ray on Spark (spark)",
    )
    parser.add_argument(
        "--model-server",
        action="store_true",
        help="up: also serve SmolLM2 behind an OpenAI-compatible API (transformers serve)",
    )
    parser.add_argument(
        "--notebook",
        choices=DEMO_CHAIN[:-1],
        help="demo: run this pipeline's notebook as a scheduled Databricks job would, not augment run",
    )
    args, rest = parser.parse_known_args(argv)  # submit's own arguments: after --
    if args.command == "gateway":
        asyncio.run(gateway(args.listen, args.to))
        return 0
    if args.command == "demo":
        return demo(Path(args.root), ray_mode=args.ray_mode, notebook=args.notebook)
    if args.command == "times":  # of a finished `make cluster-demo`: --root build/cluster-demo
        print(job_table(Path(args.root)))
        return 0
    if args.command == "endpoint":  # the endpoint rehearsal alone: up, the pipeline served twice, down
        cluster = LocalCluster(args.root)
        try:
            cluster.up(model_server=True)
            cluster.build_dist()
            cluster.upload_inputs()
            failures = endpoint_rehearsal(cluster, lambda label, fn, *a, **k: fn(*a, **k))
        finally:
            cluster.down()
        for failure in failures:
            print(f"[cluster-demo] FAILED: {failure}")
        return 1 if failures else 0
    if args.command == "up":
        cluster = LocalCluster(args.root).up(model_server=args.model_server)
        print(cluster.status())
        return 0
    cluster = LocalCluster.attach(args.root)
    if args.command == "down":
        cluster.down()
    elif args.command == "status":
        print(cluster.status())
    elif args.command == "env":
        env = cluster.env("driver")
        secret = {"AWS_ACCESS_KEY_ID": "s3-key-id", "AWS_SECRET_ACCESS_KEY": "s3-secret"}
        for key in sorted(
            k for k in env if k.startswith(("AWS_", "RAY_", "MLFLOW_", "AUGMENT_", "SPARK_", "PYSPARK_"))
        ):
            value = f'"$(cat {cluster.root / "secrets" / secret[key]})"' if key in secret else f"'{env[key]}'"
            print(f"export {key}={value}")
    elif args.command == "submit":
        rest = rest[1:] if rest[:1] == ["--"] else rest
        return cluster.submit(rest, "cli").returncode
    elif args.command == "where":
        print(cluster.where())
    return 0


if __name__ == "__main__":
    sys.exit(main())
