"""Jobs on the local cluster: ``make dist``'s archive that spark-submit ships, input files uploaded to the bucket,
and ``augment`` or a driver script submitted through spark-submit from the driver's folder (:class:`ClusterJobs`, a
part of :class:`~cluster_lifecycle.LocalCluster`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Optional, Sequence

from cluster_inputs import demo_inputs
from cluster_processes import BUCKET, CONF, REPO


class ClusterJobs:
    """What a :class:`~cluster_lifecycle.LocalCluster` runs: its jobs, submitted with the code shipped (its layout's
    folders, environments and clients)."""

    def build_dist(self) -> Path:
        """``make dist``: the archive of the suite's packages that spark-submit ships."""
        subprocess.run(["make", "-s", "dist"], cwd=REPO, check=True, capture_output=True, timeout=120)
        self.dist.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "dist" / "augment.zip", self.dist)
        return self.dist

    def upload_inputs(self, inputs: Optional[dict[str, Path]] = None) -> None:
        """Copy input files into the bucket (``{key: local file}``; default: :func:`demo_inputs`), as a landing zone
        would receive them."""
        inputs = demo_inputs(self.bucket_uri) if inputs is None else inputs
        client = self._s3()
        for key, path in inputs.items():
            client.upload_file(str(path), BUCKET, key)

    def submit_command(
        self, args: Sequence[str], name: str, ui_port: Optional[int] = None, conf: Path = CONF
    ) -> list[str]:
        """The spark-submit command line of ``augment ARGS --conf conf`` (jobs/cli.py) with the code shipped."""
        command = [str(self.spark_home / "bin" / "spark-submit"), "--name", name, "--py-files", str(self.dist)]
        if ui_port:
            command += ["--conf", f"spark.ui.port={ui_port}"]
        return command + [str(REPO / "jobs" / "cli.py"), *args, "--conf", str(conf)]

    def submit_script(
        self, script: Path, args: Sequence[str], name: str, timeout: float = 900, env: Optional[dict[str, str]] = None
    ) -> subprocess.CompletedProcess:
        """Run a driver script through spark-submit with the code shipped (``--py-files dist/augment.zip``), from the
        driver's folder, in ``env`` (default the driver's); output in ``logs/submit-<name>.log`` and returned."""
        log = self.log(f"submit-{name}")
        command = [
            str(self.spark_home / "bin" / "spark-submit"),
            "--name",
            name,
            "--py-files",
            str(self.dist),
            str(script),
            *args,
        ]
        with open(log, "w") as handle:
            # its own process group: on a timeout the driver (a child of spark-submit's JVM launcher) goes too
            job = subprocess.Popen(
                command,
                cwd=self.driver_dir,
                env=env or self.env("driver"),
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                returncode = job.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGTERM)  # the driver's SIGTERM handler shuts Ray on Spark down
                try:
                    job.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
                returncode = -signal.SIGTERM
        return subprocess.CompletedProcess(command, returncode, log.read_text(errors="replace"), "")

    def submit(
        self,
        args: Sequence[str],
        name: str,
        timeout: float = 3600,
        log: Optional[Path] = None,
        ui_port: Optional[int] = None,
        conf: Path = CONF,
    ) -> subprocess.CompletedProcess:
        """Run ``augment ARGS`` through spark-submit from the driver's folder; its output goes to ``log`` (default
        ``logs/submit-<name>.log``) and is returned."""
        log = log or self.log(f"submit-{name}")
        with open(log, "w") as handle:
            done = subprocess.run(
                self.submit_command(args, name, ui_port, conf),
                cwd=self.driver_dir,
                env=self.env("driver"),
                stdout=handle,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
        return subprocess.CompletedProcess(done.args, done.returncode, log.read_text(errors="replace"), "")

    def submit_background(
        self, args: Sequence[str], name: str, ui_port: Optional[int] = None, conf: Path = CONF
    ) -> subprocess.Popen:
        """Start ``augment ARGS`` through spark-submit and return at once (output in ``logs/submit-<name>.log``)."""
        log = open(self.log(f"submit-{name}"), "w")
        return subprocess.Popen(
            self.submit_command(args, name, ui_port, conf),
            cwd=self.driver_dir,
            env=self.env("driver"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
