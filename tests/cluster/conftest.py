"""The cluster tier's fixtures (test_cluster_pipeline.py, test_cluster_platform.py): the suite on a local
multi-node cluster (tests/cluster/local_cluster.py), started once per test session and shared by both files: Spark
standalone with two one-core workers, a Ray head and a second node joined with token authentication, an S3 server
holding the lakehouse, an MLflow tracking server, the code shipped as ``dist/augment.zip`` to an environment without
the project; and the small world's config on that platform. The rehearsal of every pipeline is ``make cluster-demo``
(its time is in docs/operations/cluster.md).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from local_cluster import LocalCluster


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
