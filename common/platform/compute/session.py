"""The one SparkSession factory. It is called by jobs and test fixtures, never at import time.

Local mode builds a loopback-only session tuned for a laptop or CI box; cluster and Databricks modes
take the session that spark-submit or the notebook already created.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from common.platform.config import SparkConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SparkCapabilities:
    """What the session's classpath offers: Spark's own Delta reader/writer and GraphFrames."""

    native_delta: bool
    graphframes: bool


DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


# Runtime SQL settings the suite's jobs rely on, set on every session (local ones at build, a cluster's or a
# notebook's when the job takes it; ``spark.conf`` may still override them): UTC for dates and windows, Arrow for
# pandas conversions, and INT64 microsecond timestamps in Parquet, which Delta and delta-rs expect (not Spark's
# legacy INT96).
SESSION_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


class DeltaJarsMissing(RuntimeError):
    """``spark.delta: native`` on a local session, but Spark's Delta jars were never resolved."""


def jars_dir(cfg: SparkConfig) -> str:
    """Where ``make install`` puts the JVM dependencies of ``jvm/pom.xml``: ``spark.jars_dir``, else
    ``<venv>/jars``."""
    return cfg.jars_dir or os.path.join(sys.prefix, "jars")


def class_archive(cfg: SparkConfig) -> str:
    """The driver JVM's class-data-sharing archive (``<jars_dir>/spark-driver.jsa``; :mod:`jvm_archive`
    dumps it), whether or not it exists."""
    return os.path.join(jars_dir(cfg), "spark-driver.jsa")


def driver_java_options(cfg: SparkConfig, checkpoint_dir: str, cpus: Optional[int] = None) -> str:
    """``spark.driver.extraJavaOptions`` of a local session: Derby's home in ``checkpoint_dir``, the class
    archive when ``spark.class_data_sharing`` is on and the archive exists, the serial garbage collector on a
    machine of at most two CPUs (``cpus``, default this process's) unless the options below name a collector,
    then ``spark.java_options`` and any ``spark.driver.extraJavaOptions`` of ``spark.conf`` (appended, so they
    cannot drop Derby's home)."""
    options, archive = [f"-Dderby.system.home={checkpoint_dir}"], class_archive(cfg)
    if cfg.class_data_sharing and os.path.isfile(archive):
        options.append(f"-XX:SharedArchiveFile={archive}")
    extra = [cfg.java_options, cfg.conf.get("spark.driver.extraJavaOptions", "")]
    # The JVM picks G1 on two CPUs; its concurrent threads then compete with Spark's two task threads and
    # Python for the same cores. The serial collector ran the test session's six small-world pipelines 9%
    # faster (349 s -> 317 s, each pipeline 8-13% but one) on 2 cores; a local driver heap of a few GB keeps
    # its pauses short. The JVM itself goes serial below two CPUs.
    if (cpus or _available_cpus()) <= 2 and not re.search(r"-XX:[+]Use\w*GC\b", " ".join(extra)):
        options.append("-XX:+UseSerialGC")
    return " ".join(o for o in options + extra if o)


def _available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def delta_jars(cfg: SparkConfig) -> list[str]:
    """The Delta Lake jars (delta-spark, delta-storage, antlr4-runtime) in :func:`jars_dir`; [] when
    delta-spark is absent. scala-library is never handed to Spark: pyspark ships its own Scala."""
    folder = jars_dir(cfg)
    if not glob.glob(os.path.join(folder, "delta-spark_*.jar")):
        return []
    return sorted(
        j
        for j in glob.glob(os.path.join(folder, "*.jar"))
        if not os.path.basename(j).startswith(("scala-library", "graphframes"))
    )


def graphframes_jars(cfg: SparkConfig) -> list[str]:
    """A GraphFrames jar in :func:`jars_dir` (none can be resolved on these machines; a cluster may ship one)."""
    return sorted(glob.glob(os.path.join(jars_dir(cfg), "graphframes*.jar")))


def _uses_native_jars(cfg: SparkConfig) -> bool:
    if cfg.delta in ("rs", "delta-rs"):
        return False
    jars = delta_jars(cfg)
    if cfg.delta == "native" and not jars:
        raise DeltaJarsMissing(
            f"spark.delta is 'native' but no delta-spark jar is in {jars_dir(cfg)}: run `make install` (it "
            "resolves jvm/pom.xml with mvn), or use the delta-rs path with --set spark.delta=rs"
        )
    return bool(jars)


_FORK_GUARD: list[bool] = []


def _keep_py4j_sockets_in_forked_children() -> None:
    """Registered once per process: a child forked from the driver inherits a py4j that closes sockets
    without shutting them down. Ray starts its head processes with ``subprocess`` and a ``preexec_fn``, so
    Python runs in the child before ``exec``, and its thread clean-up there (``threading``'s own fork
    handler, which runs before any registered later) finalises the other threads' py4j connections; py4j's
    close calls ``shutdown``, which acts on the connection the driver shares, not on the child's descriptor:
    the driver's next Spark call on it was reset (logged with a traceback, then resent). So the parent swaps
    the no-op in just before the fork and its own back just after; the child keeps the no-op."""
    if _FORK_GUARD:
        return
    _FORK_GUARD.append(True)
    saved: dict[str, object] = {}

    def before() -> None:
        for name in ("py4j.clientserver", "py4j.java_gateway"):  # pinned-thread and classic connections
            module = sys.modules.get(name)
            if module is not None:
                saved[name] = module.quiet_shutdown
                module.quiet_shutdown = _no_shutdown

    def after_in_parent() -> None:
        for name, function in saved.items():
            sys.modules[name].quiet_shutdown = function
        saved.clear()

    os.register_at_fork(before=before, after_in_parent=after_in_parent)


def _no_shutdown(_socket) -> None:
    """py4j's ``quiet_shutdown`` in a forked child: nothing (the descriptor is still closed)."""


def configure_session(spark: "SparkSession", cfg: SparkConfig) -> "SparkSession":
    """Apply what the suite's code relies on to a cluster's session (``spark.mode`` cluster/databricks): the
    suite's runtime SQL settings, ``spark.shuffle_partitions`` (when set), then ``cfg.conf``, and the checkpoint
    folder. Runtime SQL settings hold for this session only. Returns ``spark``."""
    # What the suite's code relies on, whatever the cluster's defaults.
    for key, value in SESSION_SQL_CONF.items():
        spark.conf.set(key, value)
    # The config's value replaces the cluster's default (Spark's is 200) for this job.
    if cfg.shuffle_partitions is not None:
        spark.conf.set("spark.sql.shuffle.partitions", str(cfg.shuffle_partitions))
    for key, value in cfg.conf.items():
        spark.conf.set(key, value)
    if cfg.checkpoint_dir:
        spark.sparkContext.setCheckpointDir(cfg.checkpoint_dir)
    return spark


def get_spark(cfg: SparkConfig) -> "SparkSession":
    """Return the SparkSession for ``cfg``.

    ``local``: a new (or the running) local session bound to 127.0.0.1 with few shuffle partitions,
    Arrow on, the UI off and a checkpoint dir; with Spark's Delta Lake (the jars ``make install`` resolved,
    the Delta SQL extension and catalog) unless ``spark.delta`` is ``rs``. Raises :class:`DeltaJarsMissing`
    for ``spark.delta: native`` without the jars. ``cluster``/``databricks``: ``getOrCreate()`` of the
    existing session, with ``spark.shuffle_partitions`` (when set) and then ``cfg.conf`` applied on top.
    """
    from pyspark.sql import SparkSession

    _keep_py4j_sockets_in_forked_children()
    if cfg.mode != "local":
        return configure_session(SparkSession.builder.getOrCreate(), cfg)

    # pandas UDF workers must run this interpreter (the venv's), not whatever python is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Keep the JVM's own servers (block manager, shuffle) on loopback too, not the external interface.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")  # pandas-on-Spark asks for it on both sides
    checkpoint_dir = cfg.checkpoint_dir or tempfile.mkdtemp(prefix="spark-checkpoint-")
    partitions = cfg.local_partitions
    builder = (
        SparkSession.builder.master(cfg.master)
        .appName(cfg.app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", cfg.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(max(2, partitions)))
        # Delta's VACUUM lists a table's folders with this many tasks (default 10,000: ~40 s per tiny table on
        # 2 cores, 4 s with this).
        .config("spark.sql.sources.parallelPartitionDiscovery.parallelism", str(max(2, partitions)))
        .config("spark.sql.warehouse.dir", os.path.join(checkpoint_dir, "warehouse"))
    )
    for key, value in SESSION_SQL_CONF.items():
        builder = builder.config(key, value)
    if _uses_native_jars(cfg):
        # The same settings as delta-spark's configure_spark_with_delta_pip, with jars Maven resolved at
        # install time instead of Ivy at every session start.
        builder = (
            builder.config("spark.jars", ",".join(delta_jars(cfg) + graphframes_jars(cfg)))
            .config("spark.sql.extensions", DELTA_EXTENSION)
            .config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
            # Delta rebuilds a table's state in 50 partitions by default; a local session has a few cores.
            .config("spark.databricks.delta.snapshotPartitions", str(partitions))
        )
    for key, value in cfg.conf.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.driver.extraJavaOptions", driver_java_options(cfg, checkpoint_dir))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.setCheckpointDir(os.path.join(checkpoint_dir, "checkpoints"))
    return spark


def detect_capabilities(spark: "SparkSession", cfg: SparkConfig) -> SparkCapabilities:
    """Probe the session for Delta and GraphFrames, honouring ``spark.delta`` / ``spark.graphframes``.

    Delta is probed through the data source registry (works on classic and Spark Connect sessions);
    GraphFrames through its JVM class. Forced settings (``native``/``on``) are trusted as given.
    """
    if cfg.delta == "native":
        native_delta = True
    elif cfg.delta in ("rs", "delta-rs"):
        native_delta = False
    else:
        native_delta = _has_delta_source(spark)
    if cfg.graphframes == "on":
        graphframes = True
    elif cfg.graphframes == "off":
        graphframes = False
    else:
        graphframes = _has_jvm_class(spark, "org.graphframes.GraphFrame")
    caps = SparkCapabilities(native_delta=native_delta, graphframes=graphframes)
    log.info("spark capabilities: %s", caps)
    return caps


def _has_delta_source(spark: "SparkSession") -> bool:
    missing_dir = os.path.join(tempfile.gettempdir(), "augment-delta-probe-does-not-exist")
    try:
        _ = spark.read.format("delta").load(missing_dir).schema  # resolving the schema is what fails or not
    except Exception as exc:  # the message tells "no such source" apart from "no such table"
        text = str(exc)
        return not ("DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text)
    return True


def _has_jvm_class(spark: "SparkSession", name: str) -> bool:
    try:
        jvm = spark.sparkContext._jvm  # classic sessions only; Connect sessions report False
        jvm.java.lang.Class.forName(name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        return True
    except Exception:
        return False
