"""The cluster tier's platform checks (the cluster of conftest.py, after the pipeline of
test_cluster_pipeline.py): the commit lease that makes a second writer of a table wait or fail, ``augment
doctor``'s cluster checks and Ray's token authentication, and Ray on Spark (``ray.mode: spark``) on the same master
from a driver whose session the suite builds: nodes cut from the executors, Spark -> Ray -> Spark with the slots
given back, nodes that cannot start ending the job with an error (tests/cluster/ray_on_spark_probe.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from cluster_probes import hold_lease
from local_cluster import BUCKET, SPARK_WORKERS, VENV

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


def test_the_commit_lease_makes_a_second_writer_wait_or_fail(cluster, monkeypatch):
    """Spark's Delta log store on S3 is safe for one writing driver: a native write holds the table's commit lease
    (a conditional put on the bucket). A second writer waits for it, fails naming the holder when it waits too long,
    and breaks a lease its dead holder stopped renewing."""
    from common.platform.lakehouse.commit_lease import CommitLeaseTimeout, LeaseSettings, lease_key, s3_commit_lease

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
    from common.platform.doctor.checks import _lakehouse
    from common.platform.doctor.cluster import cluster_checks

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
