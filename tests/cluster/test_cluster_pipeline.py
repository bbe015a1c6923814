"""The cluster tier's pipeline (the cluster of conftest.py): nothing of the project reaches a node but what is
shipped; one pipeline with Spark and Ray stages (genre transfer on the small world's settings) runs end to end
through spark-submit and must give the tables the local run gives; then the faults: a Spark worker SIGKILLed in the
middle of a Spark stage, the second Ray node SIGKILLed in the middle of a generation stage, the object store down
when a job starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest
from cluster_probes import (
    executor_busy,
    experiment_id,
    map_actors,
    mlflow_post,
    second_node_actors,
    table_rows,
    when_busy,
)
from local_cluster import BUCKET, SPARK_WORKERS, free_port
from worlds import WORLD_MODELS

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

PIPELINE = "genre-transfer"


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
