"""The rehearsal (``make cluster-demo``): the local demo, the cluster up, every pipeline through spark-submit twice,
the checks, the endpoint rounds, the cluster down; and the per-job time table of a finished rehearsal."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Iterable, Optional, Sequence

from cluster_lifecycle import LocalCluster
from cluster_observe import lakehouse_tables
from cluster_processes import BUCKET, CONF, DEMO_CHAIN, ENDPOINT_KEY_ENV, HERE, REPO, SPARK_WORKERS, VENV, ClusterError

# The generative pipelines of the endpoint rounds, each with its generator served as conf/endpoint_demo.yaml says.
ENDPOINT_PIPELINES = ("cga", "query-reformulation", "genre-transfer", "compositional")


def endpoint_demo_overrides(cluster: LocalCluster) -> list[str]:
    """conf/endpoint_demo.yaml's sections (every generator ``model.kind: endpoint``, its generation budgets) as
    ``--set`` values for the cluster's config, its two variables replaced by the cluster's model server and each
    served section's key named by ``AUGMENT_ENDPOINT_KEY`` (one source: the local endpoint demo's file)."""
    import yaml

    tree = yaml.safe_load((REPO / "conf" / "endpoint_demo.yaml").read_text())
    values = {
        "${AUGMENT_ENDPOINT_URL}": cluster.endpoint_url,
        "${AUGMENT_ENDPOINT_MODEL}": cluster.state["model_folder"],
    }
    out: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict):
                walk(value, path)
                if key == "endpoint":
                    out.append(f"{path}.api_key_env={ENDPOINT_KEY_ENV}")
            else:
                out.append(f"{path}={values.get(str(value), value)}")

    walk({k: v for k, v in tree.items() if k not in ("extends", "name", "lakehouse")}, "")
    return out


def endpoint_rehearsal(cluster: LocalCluster, timed, pipelines: Sequence[str] = ENDPOINT_PIPELINES) -> list[str]:
    """Each of ``pipelines`` through spark-submit with every generator the cluster's model server
    (:func:`endpoint_demo_overrides`; the key in the driver's environment only), in two rounds: in the first each
    pipeline's generation is served (completions counted in the server's access log), in the second none sends a
    request or writes a version. The key must appear in no log of the cluster (drivers, Spark, Ray). Returns the
    failures."""
    failures: list[str] = []
    args = [a for o in endpoint_demo_overrides(cluster) for a in ("--set", o)]
    for round_ in (1, 2):
        for pipeline in pipelines:
            tables, served = cluster.tables(), cluster.model_server_completions()
            result = timed(
                f"endpoint {round_}: spark-submit {pipeline}, its generator served",
                cluster.submit,
                ["run", pipeline, *args],
                f"endpoint-{pipeline}-{round_}",
            )
            sent, moved = (
                cluster.model_server_completions() - served,
                {t: v for t, v in cluster.tables().items() if tables.get(t) != v},
            )
            print(
                f"[cluster-demo] endpoint round {round_}: {pipeline} exit {result.returncode}, {sent} completions "
                f"served, {len(moved)} tables with a new version",
                flush=True,
            )
            if result.returncode != 0:
                print(result.stdout[-4000:])
                return failures + [f"endpoint round {round_}: {pipeline} exited {result.returncode}"]
            if round_ == 1 and not sent:
                failures.append(f"endpoint round 1: the model server answered no completion for {pipeline}")
            if round_ == 2 and (sent or moved):
                failures.append(f"endpoint round 2: {pipeline} sent {sent} completions again, new versions {moved}")
    key = cluster._secret("endpoint-key").encode()
    leaks = [
        str(p)
        for folder in (cluster.root / "logs", cluster.ray_temp)
        for p in folder.rglob("*")
        if p.is_file() and key in p.read_bytes()
    ]
    if leaks:
        failures.append(f"the endpoint's key is written in {leaks[:5]}")
    return failures


def demo(
    root: Path, chain: Iterable[str] = DEMO_CHAIN, ray_mode: str = "address", notebook: Optional[str] = None
) -> int:
    """``make cluster-demo``: the local demo for comparison, then the cluster, every pipeline through spark-submit,
    where the work ran, the checks, the same chain again (no new versions), and the cluster down. ``notebook``
    names a pipeline of the chain whose first run is its notebook run as a scheduled Databricks job runs it
    (tests/cluster/notebook_job.py) instead of ``augment run``: the second round's CLI run then writes nothing new
    only if the notebook wrote what the CLI would. Returns 0 when every check held."""
    timings: dict[str, float] = {}
    failures: list[str] = []

    def timed(label: str, fn, *args, **kwargs):
        start = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            timings[label] = time.monotonic() - start
            print(f"[cluster-demo] {label}: {clock(timings[label])}", flush=True)

    root = Path(root).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    local = root / "local-demo"
    done = timed(
        "local demo (augment run demo, conf/demo.yaml)",
        subprocess.run,
        [
            str(VENV / "bin" / "augment"),
            "run",
            "demo",
            "--conf",
            str(REPO / "conf" / "demo.yaml"),
            "--set",
            f"lakehouse.root={local}",
            f"tracking.uri=sqlite:///{local}/mlflow.db",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    (root / "local-demo.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:])
        return 1
    cluster = LocalCluster(root / "cluster")
    try:
        timed("cluster up", cluster.up, model_server=True)
        print(cluster.status(), flush=True)
        timed("make dist", cluster.build_dist)
        timed("inputs to the bucket", cluster.upload_inputs)
        for round_ in (1, 2):
            before = cluster.tables() if round_ == 2 else {}
            for name in chain:
                overrides = [f"ray.mode={ray_mode}"] if ray_mode != "address" else []
                if round_ == 1 and name == notebook:
                    result = timed(
                        f"round {round_}: spark-submit notebooks/{name.replace('-', '_')}.py as a job",
                        _notebook_job,
                        cluster,
                        name,
                        overrides,
                        f"{name}-{round_}",
                    )
                else:
                    args = ["run", name] + [a for o in overrides for a in ("--set", o)]
                    result = timed(f"round {round_}: spark-submit {name}", cluster.submit, args, f"{name}-{round_}")
                if result.returncode != 0:
                    print(result.stdout[-4000:])
                    failures.append(f"round {round_}: {name} exited {result.returncode}")
                    raise ClusterError(failures[-1])
            if round_ == 1:
                print(cluster.where(), flush=True)
                failures += _checks(cluster, local, ray_mode)
            else:
                after = cluster.tables()
                moved = {t: (before.get(t), v) for t, v in after.items() if before.get(t) != v}
                print(f"[cluster-demo] round 2: {len(after)} tables, {len(moved)} with a new version", flush=True)
                if moved:
                    failures.append(f"the second run wrote new versions: {moved}")
        failures += endpoint_rehearsal(cluster, timed)
    except ClusterError as exc:
        if str(exc) not in failures:
            failures.append(str(exc))
    finally:
        timed("cluster down", cluster.down)
    chain_time = sum(v for k, v in timings.items() if k.startswith("round 1"))
    print(
        f"[cluster-demo] local demo {clock(timings['local demo (augment run demo, conf/demo.yaml)'])}; on the "
        f"cluster: up {clock(timings.get('cluster up', 0))}, the chain {clock(chain_time)}, again "
        f"{clock(sum(v for k, v in timings.items() if k.startswith('round 2')))}",
        flush=True,
    )
    # Where the time went: the Delta writes (each write's compute, its files and its commit), both sides.
    round1 = "".join(
        cluster.log(f"submit-{name}-1").read_text(errors="replace")
        for name in chain
        if cluster.log(f"submit-{name}-1").exists()
    )
    for label, text in (("local demo", (root / "local-demo.log").read_text()), ("cluster round 1", round1)):
        seconds = [float(s) for s in re.findall(r"committed \S+ version \d+ with .* in ([\d.]+) s", text)]
        print(f"[cluster-demo] {label}: {len(seconds)} Delta writes, {sum(seconds):.0f} s in all", flush=True)
    print(job_table(root), flush=True)
    for failure in failures:
        print(f"[cluster-demo] FAILED: {failure}")
    return 1 if failures else 0


def job_times(text: str) -> dict[str, float]:
    """{job: seconds} from a run's progress lines (``[pipeline i/n] job done in m:ss: ...``). A job that several
    pipelines share runs once and is skipped after: its longest line is the run that did the work."""
    times: dict[str, float] = {}
    for job, minutes, seconds in re.findall(r"^\[\S+ \d+/\d+\] (\S+) done in (\d+):(\d+):", text, re.M):
        times[job] = max(times.get(job, 0.0), 60 * int(minutes) + int(seconds))
    return times


def job_table(root: Path, chain: Iterable[str] = DEMO_CHAIN) -> str:
    """Each job's time in a ``make cluster-demo`` folder ``root``: the local demo's against the cluster's first
    round, with the totals, as a text table."""
    local = job_times((root / "local-demo.log").read_text(errors="replace"))
    logs = [root / "cluster" / "logs" / f"submit-{name}-1.log" for name in chain]
    remote = job_times("".join(log.read_text(errors="replace") for log in logs if log.exists()))
    lines = [f"{'job':<24} {'local':>6} {'cluster':>8}"]
    lines += [f"{job:<24} {clock(local[job]):>6} {clock(remote[job]) if job in remote else '-':>8}" for job in local]
    both = [job for job in local if job in remote]  # a single job's run (results-summary) prints no progress line
    lines.append(
        f"{'jobs in both':<24} {clock(sum(local[j] for j in both)):>6} {clock(sum(remote[j] for j in both)):>8}"
    )
    return "\n".join(lines)


def _notebook_job(
    cluster: LocalCluster, pipeline: str, overrides: Sequence[str], name: str
) -> subprocess.CompletedProcess:
    """Pipeline ``pipeline``'s notebook through spark-submit as a scheduled Databricks job runs it (its
    parameters in ``$AUGMENT_CONF``/``$AUGMENT_OVERRIDES``, the session made before the notebook starts)."""
    env = {**cluster.env("driver"), "AUGMENT_CONF": str(CONF), "AUGMENT_OVERRIDES": " ".join(overrides)}
    notebook = REPO / "notebooks" / f"{pipeline.replace('-', '_')}.py"
    return cluster.submit_script(HERE / "notebook_job.py", [str(notebook)], name, timeout=3600, env=env)


def _checks(cluster: LocalCluster, local: Path, ray_mode: str = "address") -> list[str]:
    """The rehearsal's checks after the first chain; returns what failed (and prints what held)."""
    failures = []
    mine, theirs = cluster.tables(), lakehouse_tables(str(local))
    missing = sorted(set(theirs) - set(mine))
    differ = {t: (theirs[t], mine[t]) for t in theirs if t in mine and theirs[t] != mine[t]}
    print(
        f"[cluster-demo] tables: {len(mine)} in the bucket, {len(theirs)} in the local demo; "
        f"missing {missing or 'none'}; other version or rows: {differ or 'none'}",
        flush=True,
    )
    if missing or differ:
        failures.append(f"bucket tables differ from the local demo's: missing {missing}, differ {differ}")
    left = sorted(str(p.relative_to(cluster.driver_dir)) for p in cluster.driver_dir.rglob("*"))
    print(f"[cluster-demo] files left in the driver's working folder: {left or 'none'}", flush=True)
    if left:
        failures.append(f"the driver's working folder holds {left}")
    spark = cluster.spark_tasks()
    workers = {w for counts in spark.values() for w, n in counts.items() if n}
    if not set(SPARK_WORKERS) <= workers:
        failures.append(f"Spark tasks ran on {sorted(workers)}, not on both workers")
    if ray_mode == "spark":  # each job's Ray on Spark cluster reported where its tasks ran before it ended
        reports = _ray_on_spark_reports(cluster)
        print(f"[cluster-demo] Ray on Spark, tasks by node per job: {reports}", flush=True)
        if not any(n for report in reports for where, n in report.items() if where.startswith("worker")):
            failures.append(f"no Ray task ran on a Ray-on-Spark worker node: {reports}")
    else:
        ray = cluster.ray_work()
        if not {"head", "node-2"} <= set(ray):
            failures.append(f"Ray work ran on {sorted(ray)}, not on both nodes")
    artifacts = cluster.bucket_keys("mlflow/")
    runs = _mlflow_runs(cluster)
    print(
        f"[cluster-demo] MLflow: {runs} runs on the server, {len(artifacts)} artifact files in s3://{BUCKET}/mlflow/",
        flush=True,
    )
    if not runs or not artifacts:
        failures.append("no MLflow runs or artifacts on the tracking server")
    return failures


def _ray_on_spark_reports(cluster: LocalCluster) -> list[dict[str, int]]:
    """The "ray on spark: tasks by node {...}" lines of the first round's submit logs, parsed."""
    reports = []
    for log in sorted((cluster.root / "logs").glob("submit-*-1.log")):
        for found in re.finditer(r"ray on spark: tasks by node (\{[^}]*\})", log.read_text(errors="replace")):
            reports.append(ast.literal_eval(found.group(1)))
    return reports


def _mlflow_runs(cluster: LocalCluster) -> int:
    url = f"http://127.0.0.1:{cluster.port('mlflow')}/api/2.0/mlflow/experiments/search"
    request = urllib.request.Request(
        url, data=json.dumps({"max_results": 100}).encode(), headers={"Content-Type": "application/json"}
    )
    experiments = json.loads(urllib.request.urlopen(request, timeout=30).read()).get("experiments", [])
    total = 0
    for experiment in experiments:
        token = None
        while True:
            body = {
                "experiment_ids": [experiment["experiment_id"]],
                "max_results": 1000,
                **({"page_token": token} if token else {}),
            }
            request = urllib.request.Request(
                url.replace("experiments/search", "runs/search"),
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            page = json.loads(urllib.request.urlopen(request, timeout=30).read())
            total += len(page.get("runs", []))
            token = page.get("next_page_token")
            if not token:
                break
    return total


def clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}:{secs:02d}"
