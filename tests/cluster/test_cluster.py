"""The cluster tier: the suite on a local multi-node cluster (tests/cluster/local_cluster.py), started once per test
session: Spark standalone with two one-core workers, a Ray head and a second node joined with token
authentication, an S3 server holding the lakehouse, an MLflow tracking server, the code shipped as
``dist/augment.zip`` to an environment without the project.

One pipeline with Spark and Ray stages (genre transfer on the small world's settings) runs end to end through
spark-submit and must give the tables the local run gives; then the faults: a Spark worker SIGKILLed in the middle
of a Spark stage, the second Ray node SIGKILLed in the middle of a generation stage, the object store down when a
job starts. And Ray on Spark (``ray.mode: spark``) on the same master from a driver whose session the suite builds:
nodes cut from the executors, Spark -> Ray -> Spark with the slots given back, nodes that cannot start ending the job
with an error (tests/cluster/ray_on_spark_probe.py). The rehearsal of every pipeline is ``make cluster-demo`` (its time
is in docs/operations/cluster.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from cluster_probes import (
    executor_busy,
    experiment_id,
    hold_lease,
    map_actors,
    mlflow_post,
    second_node_actors,
    table_rows,
    when_busy,
)
from local_cluster import BUCKET, SPARK_WORKERS, VENV, LocalCluster, free_port
from worlds import WORLD_MODELS

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

PIPELINE = "genre-transfer"


@pytest.fixture(scope="session")
def cluster(tmp_path_factory, remove_when_green):
    """The cluster, up for the session (a head of 3 logical CPUs: when the second node dies mid-stage, the head
    holds both generation actors and a CPU for Ray Data's own tasks)."""
    started = time.monotonic()
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), ray_cpus=(3, 2))
    try:
        cluster.up()
        cluster.build_dist()
        print(f"cluster up in {time.monotonic() - started:.0f} s")
        yield cluster
    finally:
        down = time.monotonic()
        cluster.down(grace=5.0)
        print(f"cluster down in {time.monotonic() - down:.0f} s")
        # The Ray nodes' folder lies outside pytest's base folder (a socket path's length): removed here when green.
        remove_when_green(cluster.ray_temp)


@pytest.fixture(scope="session")
def cluster_conf(cluster, tmp_path_factory) -> Path:
    """The small world's config (tests/worlds.py) on the cluster's platform, its documents in the bucket. Generation
    runs on a pool of two actors (``ray.warm_task_rows: 0``: no warm tasks), so that one lives on the second node,
    in batches of 9 rows: the world's 18 prompts make two blocks, one an actor, where its batches of 32 made one
    block, which the head's actor could take while the second node's idled (then its kill left nothing to
    recover: a CI run of 2026-12-03). The hf engine's samples depend on each row alone, not on its batch."""
    from worlds import world_config, write_documents

    folder = tmp_path_factory.mktemp("cluster_world")
    write_documents(folder / "documents.csv")
    cluster.upload_inputs({"raw/documents.csv": folder / "documents.csv"})
    tree = world_config(folder, "sqlite:///unused.db").to_dict()
    tree.update(
        name="cluster-tier",
        spark={**tree["spark"], "mode": "cluster", "delta": "native"},
        ray={"mode": "address", "address": "${RAY_ADDRESS}", "warm_task_rows": 0},
        lakehouse={"root": "${AUGMENT_BUCKET}/lakehouse", "commit_lease_s": 30},
        tracking={"uri": "${MLFLOW_TRACKING_URI}", "experiment": "cluster-tier"},
    )
    tree["inputs"]["documents"] = {**tree["inputs"]["documents"], "path": "${AUGMENT_BUCKET}/raw/documents.csv"}
    tree["genre"]["generator"]["generation"].update(concurrency=2, batch_size=9)
    path = folder / "cluster_world.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def pipeline_run(cluster, cluster_conf):
    """The pipeline through spark-submit, first with the object store down (refused), then its run with two nodes
    lost on the way: Spark's second worker SIGKILLed
    (with its executor and Python workers) while its executor runs a task, and Ray's second node SIGKILLed (raylet,
    agents, workers) while one of the generation pool's two actors lives there. Each comes back a few seconds
    later, as a cluster manager would replace it. Returns what happened: the exit code, the seconds, and for each
    fault when it struck and what it hit."""
    record: dict = {"log": cluster.log(f"submit-{PIPELINE}")}
    # First with the object store down: the job must fail at once, before it writes anything; the run below is
    # then the rerun once the store is back.
    cluster.store_down()
    try:
        started = time.monotonic()
        record["refused"] = cluster.submit(["run", PIPELINE], "store-down", conf=cluster_conf, timeout=300)
        record["refused_seconds"] = time.monotonic() - started
    finally:
        cluster.store_up()
    record["lakehouse_after_refusal"] = cluster.bucket_keys("lakehouse/")
    ui = free_port()
    started = time.monotonic()
    job = cluster.submit_background(["run", PIPELINE], PIPELINE, ui_port=ui, conf=cluster_conf)
    restarts = []
    try:
        victim = SPARK_WORKERS[1]
        if when_busy(job, lambda: executor_busy(cluster, ui, victim), 600):
            record["spark_kill_at"] = time.monotonic() - started
            record["spark_killed"] = cluster.kill(victim)
            restarts.append(threading.Thread(target=cluster.restart, args=(victim,)))
            restarts[-1].start()
        second: set = set()
        if when_busy(job, lambda: bool(second.update(second_node_actors(cluster)) or second), 900):
            record["ray_kill_at"] = time.monotonic() - started
            record["ray_actors_there"] = set(second)
            record["ray_killed"] = cluster.kill("ray-node-2")
            restarts.append(threading.Thread(target=cluster.restart, args=("ray-node-2",)))
            restarts[-1].start()
        record["returncode"] = job.wait(timeout=1200)
        record["seconds"] = time.monotonic() - started
        record["actors"] = map_actors(cluster)
    finally:
        if job.poll() is None:
            job.kill()
        for thread in restarts:
            thread.join(timeout=300)
        for name in (SPARK_WORKERS[1], "ray-node-2"):  # whatever happened, the next tests get the whole cluster
            if name not in cluster.state["pids"]:
                cluster.restart(name)
    print(
        f"with the store down refused in {record['refused_seconds']:.0f} s; "
        f"{PIPELINE} on the cluster: {record['seconds']:.0f} s; Spark worker killed at "
        f"{record.get('spark_kill_at', -1):.0f} s, Ray node at {record.get('ray_kill_at', -1):.0f} s"
    )
    return record


def test_nothing_of_the_project_reaches_a_node_but_what_is_shipped(cluster):
    """The nodes' Python has the dependencies and not the project: a job works only with the code it ships."""
    done = subprocess.run(
        [str(cluster.node_python), "-c", "import pyspark\nimport common"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cluster.root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert done.returncode != 0 and "No module named 'common'" in done.stderr


def test_a_pipeline_runs_through_spark_submit_as_it_runs_locally(cluster, pipeline_run, small_world):
    """Genre transfer (Spark: ingest, LDA topics, splits; Ray: generator fine-tunes, a generation actor pool,
    fastText evaluation) through spark-submit with the code shipped, a Spark worker and a Ray node lost on the way:
    every table the undisturbed local run writes, at the same version with the same rows, in the bucket (the
    generated documents row for row); Spark tasks on both workers and Ray work on both nodes; the MLflow server
    holds the runs, their artifacts in the bucket; nothing on the driver's disk."""
    assert pipeline_run["returncode"] == 0, pipeline_run["log"].read_text()[-6000:]
    local = {
        table: (
            res.version,
            res.num_rows if res.num_rows is not None else small_world.lakehouse.read(table, res.version).count(),
        )
        for result in small_world.run(PIPELINE).values()
        for table, res in result.outputs.items()
    }
    remote = cluster.tables()
    assert {t: remote.get(t) for t in local} == local
    columns = ("source_id", "sample_idx", "generated_text")
    local_rows = small_world.lakehouse.read("genre_generated", local["genre_generated"][0]).select(*columns).collect()
    assert table_rows(cluster, "genre_generated", remote["genre_generated"][0], columns) == sorted(
        tuple(str(v) for v in r) for r in local_rows
    )
    # Where the work ran: Spark's event log of this application, Ray's state API.
    spark = next(counts for app, counts in cluster.spark_tasks().items() if app.startswith(PIPELINE))
    assert all(spark.get(w, 0) > 0 for w in SPARK_WORKERS), spark
    ray = cluster.ray_work()
    assert ray.get("head") and ray.get("node-2"), ray
    print(f"Spark tasks {spark}; Ray work {ray}")
    # MLflow: the pipeline's parent run and one child per job, with the report and models as artifacts in the bucket.
    runs = mlflow_post(
        "runs/search", cluster, {"experiment_ids": [experiment_id(cluster, "cluster-tier")], "max_results": 100}
    )["runs"]
    names = {r["info"]["run_name"] for r in runs}
    assert {f"pipeline:{PIPELINE}", "ingest-documents", "genre-generate", "genre-evaluate"} <= names, names
    assert all(r["info"]["artifact_uri"].startswith("mlflow-artifacts:") for r in runs)
    keys = cluster.bucket_keys("mlflow/")
    assert any(k.endswith("/report/report.md") for k in keys), keys[:20]
    assert "lakehouse/reports/genre/report.md" in cluster.bucket_keys("lakehouse/reports/")
    # The server's registry: each genre classifier registered by genre-evaluate's run, the first version champion,
    # its files in the bucket.
    query = urllib.parse.urlencode({"filter": f"name LIKE '{WORLD_MODELS}genre_%'"})
    url = f"http://127.0.0.1:{cluster.port('mlflow')}/api/2.0/mlflow/registered-models/search?{query}"
    models = json.loads(urllib.request.urlopen(url, timeout=30).read()).get("registered_models", [])
    evaluate_run = next(r["info"]["run_id"] for r in runs if r["info"]["run_name"] == "genre-evaluate")
    assert len(models) >= 3 and all({"alias": "champion", "version": "1"} in m.get("aliases", []) for m in models)
    assert all(m["latest_versions"][0]["run_id"] == evaluate_run for m in models)
    # what a registered model carries, written by a driver that imports the suite from dist/augment.zip
    for carried in ("/data/classifier/model.json", "/code/catalog_augment_pyfunc/loader.py"):
        assert any("/artifacts/" in k and k.endswith(carried) for k in keys), (carried, keys[:20])
    # Nothing of the job on the driver's disk (its working folder), and no commit lease left behind.
    assert not list(cluster.driver_dir.iterdir())
    assert not [k for k in cluster.bucket_keys("lakehouse/") if k.endswith(".commit-lock")]


def test_a_spark_worker_killed_mid_stage(cluster, pipeline_run):
    """kill -9 of a Spark worker (its executor and Python workers with it) while its executor ran a task: Spark
    lost tasks to the dead executor and ran them again elsewhere, the job finished, and each table holds one version
    with the undisturbed local run's rows (the comparison above)."""
    assert pipeline_run.get("spark_killed"), "the second worker's executor never ran a task"
    assert pipeline_run["returncode"] == 0
    lost = cluster.spark_task_failures(PIPELINE)
    assert lost.get("ExecutorLostFailure", 0) >= 1, lost


def test_the_second_ray_node_killed_mid_generation(cluster, pipeline_run):
    """kill -9 of the second Ray node while a generation actor lived there: the stage recovers on the head, by the
    actor's restart there (``ray.actor_max_restarts``, its batch retried) or, when the node died mid-batch (which
    Ray Data's actor pool does not retry), by running the stage again from its inputs (``ray.stage_retries``); the
    generated rows equal the undisturbed local run's (the comparison above)."""
    assert pipeline_run.get("ray_killed"), "no generation actor ever lived on the second node"
    assert pipeline_run["returncode"] == 0
    there = pipeline_run["ray_actors_there"]
    restarted = [a for a in pipeline_run["actors"] if a["actor_id"] in there and int(a["num_restarts"]) > 0]
    rerun = "lost a node or an actor of the Ray cluster" in pipeline_run["log"].read_text()
    print(
        f"recovered by: {'an actor restart' if restarted else ''}{' and ' if restarted and rerun else ''}"
        f"{'the stage run again' if rerun else ''}"
    )
    assert restarted or rerun, pipeline_run["actors"]


def test_the_object_store_down_when_a_job_starts(cluster, pipeline_run):
    """The store's endpoint refuses connections when the pipeline starts: it fails at once with one line naming the
    lakehouse and the endpoint (exit code 4), before it writes anything; back up, the rerun (the pipeline run the
    tests above check) completes."""
    refused = pipeline_run["refused"]
    assert refused.returncode == 4, refused.stdout[-3000:]
    endpoint = f"http://127.0.0.1:{cluster.port('s3')}"
    assert (
        f"augment: storage unreachable: s3a://{BUCKET}/lakehouse: the object store at {endpoint} did not answer"
        in refused.stdout
    )
    assert pipeline_run["refused_seconds"] < 90
    assert pipeline_run["lakehouse_after_refusal"] == []
    assert pipeline_run["returncode"] == 0


def test_the_commit_lease_makes_a_second_writer_wait_or_fail(cluster, monkeypatch):
    """Spark's Delta log store on S3 is safe for one writing driver: a native write holds the table's commit lease
    (a conditional put on the bucket). A second writer waits for it, fails naming the holder when it waits too long,
    and breaks a lease its dead holder stopped renewing."""
    from common.platform.commit_lease import CommitLeaseTimeout, LeaseSettings, lease_key, s3_commit_lease

    for key, value in cluster.env("driver").items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    location = f"s3a://{BUCKET}/lease-test/items"
    assert lease_key(location) == (BUCKET, "lease-test/.items.commit-lock")
    holder = hold_lease(cluster, location, ttl=4, seconds=3)
    try:
        with pytest.raises(CommitLeaseTimeout, match=rf"held by \S+:{holder.pid}:"):
            with s3_commit_lease(location, "items", LeaseSettings(ttl_s=4, wait_s=1, poll_s=0.2)):
                pass
        started = time.monotonic()
        with s3_commit_lease(location, "items", LeaseSettings(ttl_s=4, wait_s=30, poll_s=0.2)):
            waited = time.monotonic() - started
        assert 0.5 < waited < 15  # until the holder let go, not its TTL
    finally:
        holder.kill()
    killed = hold_lease(cluster, location, ttl=3, seconds=60)
    killed.kill()
    killed.wait()
    started = time.monotonic()
    with s3_commit_lease(location, "items", LeaseSettings(ttl_s=3, wait_s=30, poll_s=0.2)):
        assert 2 < time.monotonic() - started < 20  # broken once its holder stopped renewing it
    assert not cluster.bucket_keys("lease-test/")


def test_the_doctor_reaches_the_cluster_and_ray_refuses_a_driver_without_its_token(cluster, cluster_conf, monkeypatch):
    """``augment doctor``'s cluster lines against the real thing: the master, Ray's head and this driver's token, the
    bucket, the MLflow server, each reached. And Ray's token authentication is on: a driver without the token is
    refused."""
    from common.config import load_config
    from common.platform.doctor import _lakehouse, cluster_checks

    for key, value in cluster.env("driver").items():
        if key.startswith(("AWS_", "RAY_", "MLFLOW_", "AUGMENT_", "SPARK_")):
            monkeypatch.setenv(key, value)
    cfg = load_config(cluster_conf)
    checks = {c.name: c for c in cluster_checks(cfg)}
    assert set(checks) == {"spark master", "ray head", "ray token", "mlflow server"}
    assert all(c.ok for c in checks.values()), checks
    lakehouse = _lakehouse(cfg)
    assert lakehouse.ok and lakehouse.detail.startswith(
        f"s3a://{BUCKET}/lakehouse answers at http://127.0.0.1:{cluster.port('s3')}"
    ), lakehouse
    started = time.monotonic()
    # Ray retries a refused GCS handshake once a second, 20 times by default: two tries show the refusal as well.
    refused = subprocess.run(
        [str(cluster.node_python), "-c", "import ray; ray.init(address='auto')"],
        env={**cluster.env("driver"), "RAY_AUTH_MODE": "disabled", "RAY_NUM_REDIS_GET_RETRIES": "2"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(f"a driver without the token refused in {time.monotonic() - started:.0f} s")
    assert refused.returncode != 0 and "InvalidAuthToken" in refused.stderr


def test_ray_on_spark_sizes_its_nodes_from_the_executors_and_never_waits_silently(cluster, cluster_conf, tmp_path):
    """``ray.mode: spark`` (the Databricks path) on the standalone master, from a driver started as ``augment run --set
    spark.master=spark://...`` starts one: the suite builds the session itself (its ``spark.default.parallelism`` 4,
    no ``spark.executor.cores``), no spark-defaults, no venv on any PATH. Ray's worker nodes are cut from what the
    two one-core executors report (the parallelism over the executors planned 2-core nodes that no executor could
    hold, and the job waited forever); a node larger than an executor is refused before Ray starts; the Ray stage
    runs on worker nodes, and the Spark stage after it gets every slot back once they idle (autoscaling from zero).
    With every slot held by another job, a Ray stage's nodes cannot start: the job's run fails within
    ``ray.spark_node_start_timeout_s`` with an error naming the executors and the keys, Ray on Spark is shut down
    (no Spark job or Ray process of it left), and the slots serve the next Spark stage at once."""
    tree = yaml.safe_load(cluster_conf.read_text())
    tree["spark"] = {
        "mode": "local",
        "master": f"spark://127.0.0.1:{cluster.port('spark-master')}",
        "delta": "rs",
        "driver_memory": "1g",
    }
    tree["ray"] = {
        "mode": "spark",
        "spark_max_worker_nodes": 2,
        "spark_idle_timeout_minutes": 0.1,
        "spark_node_start_timeout_s": 30,
    }
    conf = tmp_path / "ray_on_spark.yaml"
    conf.write_text(yaml.safe_dump(tree, sort_keys=False))
    # The environment of a user's shell: no spark-defaults (SPARK_CONF_DIR), no executor Python set (the session
    # sets the driver's), no activated venv; RAY_ADDRESS names the other Ray cluster, which must go unused. The
    # driver is the nodes' Python with the checkout on its path, whose `ray` keeps Ray on loopback here.
    env = {
        k: v for k, v in cluster.env("driver").items() if not k.startswith(("SPARK_CONF", "SPARK_HOME", "PYSPARK_"))
    }
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", os.defpath).split(os.pathsep)
        if p and not Path(p).resolve().is_relative_to(VENV.resolve())
    )
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    assert "RAY_ADDRESS" in env
    slot_wait = 120
    started = time.monotonic()
    done = subprocess.run(
        [str(cluster.node_python), str(Path(__file__).with_name("ray_on_spark_probe.py")), str(conf), str(slot_wait)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.monotonic() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    print(f"ray on spark: {seconds:.0f} s in all; {json.dumps(result)}")
    executors = "2 executors of 1 core and 1024 MiB each"
    assert result["default_parallelism"] == 4 and result["executors"] == executors
    assert result["too_large_refused"].startswith(
        f"ray.spark_num_cpus_per_node (2) is more than a Spark executor has: the application has {executors}"
    )
    assert result["plan"] == f"0-2 worker nodes of 1 CPU, 0 GPU and 1024 MB (the application has {executors})"
    ray_stage = result["pipeline_ray"]
    assert sum(ray_stage["rows_by_node"].values()) == 64 and ray_stage["head"] not in ray_stage["rows_by_node"]
    assert ray_stage["worker_nodes"], ray_stage  # the work ran on Ray-on-Spark worker nodes, not the head
    assert "starved_ray" not in result
    assert result["node_watch_error"].startswith("ray on spark: ") and executors in result["node_watch_error"]
    assert "not one of their Spark tasks scheduled within 3" in result["node_watch_error"]
    assert "(ray.spark_node_start_timeout_s 30;" in result["node_watch_error"]
    assert 30 <= result["node_watch_error_s"] < 60
    assert result["jobs_after_error"] == [] and result["ray_processes_after_error"] == []
    for key in ("slots_after_error", "slots_after_ray_stage"):
        assert result[key]["ok"] and len(result[key]["executors"]) == len(SPARK_WORKERS), result[key]
    assert result["slots_after_error"]["seconds"] < 30  # shut down, not waiting for the idle timeout
    # idle nodes end 6 s after their last task (ray.spark_idle_timeout_minutes 0.1), at the autoscaler's next round
    assert result["slots_after_ray_stage"]["seconds"] < slot_wait


# ---------------------------------------------------------------------- helpers
