"""One SparkSession, one Ray runtime and one MLflow database for the whole test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

REPO = Path(__file__).resolve().parents[1]


def pytest_configure(config):
    # Ray Data logs its executor's per-operator statistics at DEBUG: a failing test's report would be tens
    # of kilobytes of them, with the assertion far above. Capture from INFO unless --log-level says otherwise.
    if config.getoption("log_level") is None and not config.getini("log_level"):
        config.option.log_level = "INFO"
    config.addinivalue_line(
        "markers",
        "slow: minutes-long tests, fault injection and whole pipelines (make test "
        "runs them; make test-fast leaves them out)",
    )
    config.addinivalue_line(
        "markers",
        "cluster: the cluster tier (tests/cluster): a local multi-node cluster, started "
        "once per session (also marked slow)",
    )


def pytest_collection_modifyitems(config, items):
    # The cluster tier last: its cluster wants the machine's two cores to itself, and the small world's pipelines
    # it compares against are built by the tests before it.
    items.sort(key=lambda item: item.get_closest_marker("cluster") is not None)


_SECONDS = {"slow": 0.0, "other": 0.0}
_BY_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report):
    # Setup, call and teardown of each test, session fixtures included where a test first asks for them.
    _SECONDS["slow" if "slow" in report.keywords else "other"] += report.duration
    path = report.nodeid.split("::", 1)[0]
    _BY_FILE[path] = _BY_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    """Where the run's time went: the tests marked slow and the rest (what ``make test-fast`` runs), and the
    twelve test files that took longest (a session fixture counts in the file whose test first asked for it)."""
    terminalreporter.write_line(
        f"time in tests marked slow: {_SECONDS['slow'] / 60:.1f} min; in the rest "
        f"(make test-fast): {_SECONDS['other'] / 60:.1f} min"
    )
    top = sorted(_BY_FILE.items(), key=lambda item: -item[1])[:12]
    if top:
        terminalreporter.write_line(
            "longest files: " + ", ".join(f"{path.removeprefix('tests/')} {seconds:.0f} s" for path, seconds in top)
        )


SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from common.platform.compute.session import get_spark
    from common.platform.config import SparkConfig

    session = get_spark(
        SparkConfig(
            master="local[2]",
            shuffle_partitions=2,
            driver_memory="2g",
            checkpoint_dir=str(tmp_path_factory.mktemp("spark")),
        )
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def capabilities(spark):
    from common.platform.compute.session import detect_capabilities
    from common.platform.config import SparkConfig

    return detect_capabilities(spark, SparkConfig())


@pytest.fixture(scope="session")
def ray_runtime(request):
    import ray

    from common.platform.compute.ray_runtime import RayRuntime
    from common.platform.config import RayConfig

    runtime = RayRuntime(RayConfig(num_cpus=2)).start()
    node = ray._private.worker._global_node  # the local head this runtime started
    session_dir = node.get_session_dir_path() if node is not None else None
    yield runtime
    runtime.stop()
    # Ray keeps every session's folder (logs, spilled objects) under /tmp/ray for good; a green session's goes
    # with it, as its tmp_path folders do (pytest.ini), a failing one's stays for the post-mortem.
    _remove_when_green(request.session, session_dir)


def _remove_when_green(session, folder) -> None:
    """Remove ``folder`` (a path or None) when no test of ``session`` has failed so far."""
    import shutil

    if folder and session.testsfailed == 0:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def remove_when_green(request):
    """A function of one folder: removes it when no test of the session has failed so far (a failing session
    keeps it for the post-mortem). For folders outside pytest's base folder, which pytest.ini's policy misses."""
    return lambda folder: _remove_when_green(request.session, folder)


@pytest.fixture(scope="session")
def tracking_uri(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def app_config(tmp_path, tracking_uri):
    """A small-world config with its own lakehouse folder and the session's MLflow database."""
    from worlds import DEMO

    from common.config import load_config

    # Its own registered models' names: the session's tests share one registry, and a test's first version of a
    # model must not meet another test's champion.
    return load_config(
        None,
        [
            f"lakehouse.root={tmp_path / 'lakehouse'}",
            f"tracking.uri={tracking_uri}",
            f"tracking.experiment=test-{tmp_path.name}",
            f"registry.name_prefix={tmp_path.name}_",
            *DEMO,
        ],
    )


@pytest.fixture
def ctx(spark, capabilities, app_config):
    from common.platform.runner.job_context import build_context

    context = build_context(app_config, spark=spark, capabilities=capabilities)
    yield context
    context.close()


@pytest.fixture(params=["native", "rs"])
def write_path(request, capabilities) -> str:
    """Both write paths of the lakehouse: Spark's Delta writer and delta-rs commits (one session serves both)."""
    if request.param == "native" and not capabilities.native_delta:
        pytest.skip(
            "no native Delta in this session: run `make install` (mvn resolves jvm/pom.xml into "
            ".venv/jars) to test Spark's Delta writer"
        )
    return request.param


@pytest.fixture
def lakehouse(spark, write_path, tmp_path):
    from common.platform.config import LakehouseConfig
    from common.platform.lakehouse.lakehouse import Lakehouse

    return Lakehouse(LakehouseConfig(root=str(tmp_path / "lh")), spark, native_delta=write_path == "native")


@pytest.fixture(scope="session")
def small_world(spark, capabilities, ray_runtime, tracking_uri, tmp_path_factory):
    """Every pipeline's end-to-end world in one session lakehouse, each pipeline run once when first asked for
    (``small_world.run("cga")``): see tests/worlds.py."""
    from worlds import SmallWorld

    world = SmallWorld(spark, capabilities, tmp_path_factory.mktemp("small_world"), tracking_uri)
    yield world
    world.close()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """``transformers serve`` of the packaged SmolLM2 on loopback (tests/model_server.py), started on first use for
    the endpoint tests of every file and killed at the session's end."""
    from model_server import Server

    from common.models.generation.kinds.smollm2 import materialise_smollm2

    server = Server(str(materialise_smollm2()), tmp_path_factory.mktemp("serve"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def live_server(server):
    """The session's model server, started again if a test killed it."""
    if not server.running():
        server.start()
    return server


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent on this machine")
    return SHARED_DATA
