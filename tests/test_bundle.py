"""The Databricks Asset Bundle, validated offline: every job parses into the typed classes of the
``databricks-bundles`` package (unknown or mistyped fields fail), runs its pipeline's jobs in pipeline order
through the wheel's ``augment`` entry point, and only names variables and clusters that exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from common.platform.runner.cli import _parser
from common.platform.runner.entry import override_list
from jobs import PIPELINES, REGISTRY

REPO = Path(__file__).resolve().parents[1]
# Every pipeline has a scheduled job but these, each for its reason: a pipeline added without a job fails the test.
UNSCHEDULED = {"foundation": "the first jobs of every pipeline, which run them", "demo": "the generated demo world"}
BUNDLED = [name for name in PIPELINES if name not in UNSCHEDULED]


@pytest.fixture(scope="module")
def bundle():
    root = yaml.safe_load((REPO / "databricks.yml").read_text())
    jobs = {}
    for pattern in root["include"]:
        for path in sorted(REPO.glob(pattern)):
            for key, job in yaml.safe_load(path.read_text())["resources"]["jobs"].items():
                assert key not in jobs, f"job {key} defined twice ({path.name})"
                jobs[key] = job
    return root, jobs


def test_every_pipeline_has_a_scheduled_job(bundle):
    _, jobs = bundle
    assert sorted(j["tags"]["pipeline"] for j in jobs.values()) == sorted(BUNDLED)
    for job in jobs.values():
        assert job["max_concurrent_runs"] == 1
        assert job["schedule"]["pause_status"] == "${var.pause_status}"
        assert job["email_notifications"]["on_failure"]
    assert "SUN" in jobs["maintenance"]["schedule"]["quartz_cron_expression"]


def test_jobs_parse_into_the_typed_bundle_classes(bundle):
    from databricks.bundles.jobs import Job

    _, jobs = bundle
    for job in jobs.values():
        parsed = Job.from_dict(job)
        assert parsed.name == f"augment-{job['tags']['pipeline']}"
        assert len(parsed.tasks) == len(job["tasks"])
    broken = dict(jobs["maintenance"], max_concurent_runs=1)
    with pytest.raises(ValueError, match="max_concurent_runs"):
        Job.from_dict(broken)


def test_task_order_is_the_pipeline_order_and_tasks_run_the_cli(bundle):
    _, jobs = bundle
    setup = (REPO / "setup.py").read_text()
    dist_name = re.search(r'name="([^"]+)"', setup).group(1).replace("-", "_")
    assert '"augment=jobs.cli:entry"' in setup
    for job in jobs.values():
        pipeline = job["tags"]["pipeline"]
        clusters = {c["job_cluster_key"] for c in job["job_clusters"]}
        # First the config checked (every job's own checks too), once, without retries (exit 2 on a config error)
        check, *tasks = job["tasks"]
        assert check["task_key"] == "check_config" and check["max_retries"] == 0 and "depends_on" not in check
        params = check["python_wheel_task"]["parameters"]
        checked = _parser(REGISTRY).parse_args(
            [
                p.replace("{{job.parameters.conf}}", "conf/databricks.yaml").replace(
                    "{{job.parameters.overrides}}", ""
                )
                for p in params
            ]
        )
        ran = [t["python_wheel_task"]["parameters"][1] for t in tasks]
        assert checked.command == "check" and list(PIPELINES.get(checked.name, [checked.name])) == ran
        names, previous = [], "check_config"
        for task in tasks:
            wheel = task["python_wheel_task"]
            assert (wheel["package_name"], wheel["entry_point"]) == (dist_name, "augment")
            params = wheel["parameters"]
            assert params[0] == "run"
            names.append(params[1])
            # The task's arguments are a valid `augment` command line once Databricks fills the parameters.
            filled = [
                p.replace("{{job.parameters.conf}}", "conf/databricks.yaml").replace(
                    "{{job.parameters.overrides}}", "cga.threshold=0.8"
                )
                for p in params
            ]
            args = _parser(REGISTRY).parse_args(filled)
            assert args.name in REGISTRY.jobs and override_list(args) == ["cga.threshold=0.8"]
            assert callable(REGISTRY.runner(args.name))
            assert task["job_cluster_key"] in clusters
            assert task.get("depends_on", []) == [{"task_key": previous}]
            assert task["max_retries"] >= 1  # every job is idempotent through its lineage
            previous = task["task_key"]
        assert names == list(PIPELINES[pipeline]), pipeline


def test_model_stages_run_on_the_gpu_cluster(bundle):
    _, jobs = bundle
    for job in jobs.values():
        for task in job["tasks"]:
            name = task["python_wheel_task"]["parameters"][1]
            expected = (
                "gpu"
                if name
                in {
                    "cga-generate",
                    "query-reformulate",
                    "query-matcher",
                    "boostaug-augment",
                    "boostaug-filter",
                    "boostaug-evaluate",
                    "genre-generate",
                    "compositional-generate",
                    "compositional-qc",
                    "compositional-evaluate",
                }
                else "cpu"
            )
            assert task["job_cluster_key"] == expected, name


def test_variables_are_declared_and_targets_pause_dev_only(bundle):
    root, jobs = bundle
    text = "\n".join(yaml.safe_dump(j) for j in jobs.values()) + yaml.safe_dump(root)
    used = set(re.findall(r"\$\{var\.([a-z_]+)\}", text))
    assert used <= set(root["variables"]), used - set(root["variables"])
    assert root["variables"]["pause_status"]["default"] == "PAUSED"
    assert root["targets"]["prod"]["variables"]["pause_status"] == "UNPAUSED"
    assert root["targets"]["dev"]["mode"] == "development" and root["targets"]["prod"]["mode"] == "production"
    assert (REPO / root["variables"]["conf"]["default"].split("${workspace.file_path}/")[1]).is_file()


def test_empty_overrides_parameter_is_no_override():
    args = _parser(REGISTRY).parse_args(shlex.split("run ingest --conf conf/local.yaml --overrides ''"))
    assert override_list(args) == []
    args = _parser(REGISTRY).parse_args(["run", "ingest", "--set", "a=1", "--overrides", "b=2 'c=x y'"])
    assert override_list(args) == ["a=1", "b=2", "c=x y"]
