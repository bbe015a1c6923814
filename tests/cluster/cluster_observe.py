"""Where a cluster's work ran (Spark's event logs, Ray's state API) and what its bucket holds
(:class:`ClusterObserver`, a part of :class:`~cluster_lifecycle.LocalCluster`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Optional

from cluster_processes import BUCKET, REPO, SPARK_WORKERS, ClusterError


class ClusterObserver:
    """Reads what ran where on a :class:`~cluster_lifecycle.LocalCluster` (its ports, folders and clients)."""

    # ------------------------------------------------------------------ where work ran
    def spark_tasks(self) -> dict[str, dict[str, int]]:
        """Spark tasks by application and worker, from Spark's event logs: ``{app name (app id): {worker: tasks}}``.
        An executor is placed on a worker by the worker web UI its log links point to."""
        by_port = {self.port(f"{w}-ui"): w for w in SPARK_WORKERS}
        result: dict[str, dict[str, int]] = {}
        for path in sorted((self.root / "spark" / "events").glob("app-*")):
            app, executors, counts = path.name, {}, {}
            for line in path.read_text(errors="replace").splitlines():
                if '"Event":"SparkListenerApplicationStart"' in line:
                    event = json.loads(line)
                    app = f"{event['App Name']} ({event.get('App ID')})"
                elif '"Event":"SparkListenerExecutorAdded"' in line:
                    event = json.loads(line)
                    urls = " ".join(event["Executor Info"].get("Log Urls", {}).values())
                    port = re.search(r"127\.0\.0\.1:(\d+)/", urls)
                    executors[event["Executor ID"]] = by_port.get(int(port.group(1)), "?") if port else "?"
                elif '"Event":"SparkListenerTaskEnd"' in line:
                    executor = json.loads(line)["Task Info"]["Executor ID"]
                    worker = executors.get(executor, "driver" if executor == "driver" else "?")
                    counts[worker] = counts.get(worker, 0) + 1
            result[app] = counts
        return result

    def spark_task_failures(self, app_prefix: str) -> dict[str, int]:
        """{reason: failed task attempts} of the applications whose name starts with ``app_prefix`` (Spark's event
        logs: ``ExecutorLostFailure`` is a task that ran on an executor which died)."""
        counts: dict[str, int] = {}
        for path in sorted((self.root / "spark" / "events").glob("app-*")):
            text = path.read_text(errors="replace")
            start = re.search(r'"Event":"SparkListenerApplicationStart","App Name":"([^"]*)"', text)
            if not start or not start.group(1).startswith(app_prefix):
                continue
            for line in text.splitlines():
                if '"Event":"SparkListenerTaskEnd"' in line:
                    reason = json.loads(line)["Task End Reason"]["Reason"]
                    if reason != "Success":
                        counts[reason] = counts.get(reason, 0) + 1
        return counts

    def ray_work(self) -> dict[str, dict[str, int]]:
        """Ray tasks and actors by node (``head`` / ``node-2``), from Ray's state API (tasks of every job the
        cluster has run; a node started again counts under the same name)."""
        script = (
            "import json\nfrom ray.util.state import list_nodes, list_tasks\n"
            f"address = 'http://127.0.0.1:{self.port('ray-dashboard')}'\n"
            "work = {}\n"
            "for n in list_nodes(address=address, limit=1000, raise_on_missing_output=False):\n"
            "    name = 'head' if n.is_head_node else 'node-2'\n"
            "    # The state API returns at most 10,000 rows a call: counted per node, capped there.\n"
            "    for t in list_tasks(address=address, filters=[('node_id', '=', n.node_id)], limit=10000,\n"
            "                        raise_on_missing_output=False):\n"
            "        kind = {'ACTOR_TASK': 'actor tasks', 'ACTOR_CREATION_TASK': 'actors'}.get(t.type, 'tasks')\n"
            "        work.setdefault(name, {})[kind] = work.setdefault(name, {}).get(kind, 0) + 1\n"
            "print(json.dumps(work))\n"
        )
        done = subprocess.run(
            [str(self.node_python), "-c", script],
            env=self.env("driver"),
            capture_output=True,
            text=True,
            timeout=120,
            cwd=self.root / "scratch",
        )
        if done.returncode != 0:
            raise ClusterError(f"Ray's state API: {done.stderr[-1500:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def where(self) -> str:
        """Where Spark tasks and Ray tasks and actors ran, one line per application and node."""
        lines = ["Spark tasks by worker (event logs):"]
        for app, counts in self.spark_tasks().items():
            lines.append(f"  {app}: " + ", ".join(f"{w} {n}" for w, n in sorted(counts.items())))
        lines.append("Ray work by node (state API):")
        for node, counts in sorted(self.ray_work().items()):
            lines.append(f"  {node}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        return "\n".join(lines)

    # ------------------------------------------------------------------ the bucket
    def tables(self) -> dict[str, tuple[int, Optional[int]]]:
        """{table: (latest version, rows)} of the lakehouse in the bucket, read with delta-rs."""
        return lakehouse_tables(f"s3://{BUCKET}/lakehouse", self.env("driver"))

    def bucket_keys(self, prefix: str) -> list[str]:
        client, keys, token = self._s3(), [], None
        while True:
            page = client.list_objects_v2(
                Bucket=BUCKET, Prefix=prefix, **({"ContinuationToken": token} if token else {})
            )
            keys += [o["Key"] for o in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not token:
                return keys


def lakehouse_tables(root: str, env: Optional[dict[str, str]] = None) -> dict[str, tuple[int, Optional[int]]]:
    """{table: (version, rows)} of the path tables under ``root`` (delta-rs; a store's endpoint from ``env``)."""
    saved = dict(os.environ)
    try:
        if env:
            os.environ.update({k: v for k, v in env.items() if k.startswith("AWS_")})
        sys.path.insert(0, str(REPO))
        from common.platform.config import LakehouseConfig
        from common.platform.lakehouse.lakehouse import Lakehouse

        return {t.name: (t.version, t.num_rows) for t in Lakehouse(LakehouseConfig(root=root)).tables()}
    finally:
        os.environ.clear()
        os.environ.update(saved)
