"""The platform's config sections (where Spark, Ray, the lakehouse and MLflow run, and the maintenance job) and
the value checks every section uses (:func:`check`, :func:`is_uri`, :func:`absolute`).

:mod:`common.platform.base_config` composes them into ``BaseConfig``, the base every application config extends,
and loads any config class from YAML + ``--set``. Domain packages own their sections (``common/<domain>/config.py``);
``common/config.py`` composes them. Every value is validated at start-up, so a job never fails halfway on a typo.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional

from common.platform.config_loader import ConfigError


def is_uri(path: str) -> bool:
    """True for URIs (``s3://``, ``abfss://``, ``dbfs:``), False for local paths."""
    return "://" in path or path.startswith("dbfs:")


def absolute(path: str) -> str:
    """Local relative paths become absolute (so Spark executors and Ray workers agree); URIs stay."""
    return path if is_uri(path) else str(Path(path).expanduser().resolve())


def check(condition: bool, key: str, message: str) -> None:
    """Raise :class:`ConfigError` ``"<key>: <message>"`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(f"{key}: {message}")


LOCAL_SHUFFLE_PARTITIONS = 4


@dataclass
class SparkConfig:
    """How to get the SparkSession. ``local`` builds one; ``cluster``/``databricks`` take the existing one."""

    # local: build a local SparkSession; cluster/databricks: use the session spark-submit or the notebook already has.
    mode: Literal["local", "cluster", "databricks"] = "local"
    # Local sessions: Spark's master URL (local[*]: one task slot per core).
    master: str = "local[*]"
    # The Spark application name (the Spark UI, the cluster's application list).
    app_name: str = "catalog-augment"
    # spark.sql.shuffle.partitions. null: 4 in a local session (suits 2-4 cores), the session's own setting on a
    # cluster or Databricks; a cluster wants about 2-3 per executor core.
    shuffle_partitions: Optional[int] = None
    # native: Spark's own Delta writer (locally from the jars `make install` resolved into jars_dir);
    # rs: delta-rs commits (machines without the jars); auto: native when the jars or the session have it.
    # "delta-rs" is the older spelling of rs.
    delta: Literal["auto", "native", "rs", "delta-rs"] = "auto"
    # Local sessions: the folder of JVM jars (default <venv>/jars, filled from jvm/pom.xml by make install).
    jars_dir: Optional[str] = None
    # Catalog grouping's connected components: on: GraphFrames (its jar must be on the cluster); off: the suite's
    # DataFrame algorithm; auto: GraphFrames when importable.
    graphframes: Literal["auto", "on", "off"] = "auto"
    # Spark's checkpoint folder (iterative graph algorithms; locally also Derby's home); null: a temporary folder
    # locally, none on a cluster.
    checkpoint_dir: Optional[str] = None
    # Local sessions: spark.driver.memory (on a cluster, the cluster's own setting applies).
    driver_memory: str = "4g"
    # Local sessions: start the driver JVM with the class-data-sharing archive `make install` dumps into
    # jars_dir (Spark's classes mapped, not parsed and verified again: ~3 s less per JVM start on 2 cores).
    # A missing or stale archive only costs that time: the JVM checks it and runs without it.
    class_data_sharing: bool = True
    # Local sessions: more options for the driver JVM, e.g. "-XX:TieredStopAtLevel=1" (the quick compiler
    # only), which starts short jobs ~20% sooner but runs long ones (LDA, CGA) 10-20% slower. On a machine of
    # at most two CPUs the driver gets the serial garbage collector (-XX:+UseSerialGC) unless these options
    # name a collector (G1's concurrent threads compete with Spark's tasks for the two cores).
    java_options: str = ""
    # More Spark settings, passed to the session builder as they are (e.g. spark.sql.adaptive.enabled).
    conf: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(
            self.shuffle_partitions is None or self.shuffle_partitions >= 1, "spark.shuffle_partitions", "must be >= 1"
        )

    @property
    def local_partitions(self) -> int:
        """The shuffle partitions a local session gets: ``shuffle_partitions``, or 4 when it is unset."""
        return self.shuffle_partitions or LOCAL_SHUFFLE_PARTITIONS


@dataclass
class RayConfig:
    """Where Ray runs: a local runtime, an existing cluster address, or Ray on Spark (Databricks)."""

    # local: start Ray in this process; address: join the cluster at ray.address; spark: Ray on Spark (Databricks,
    # ray.util.spark).
    mode: Literal["local", "address", "spark"] = "local"
    # The Ray cluster to join when mode is address (ray://host:10001 or auto).
    address: Optional[str] = None
    # Local Ray: CPUs it may use (null: all of the machine's).
    num_cpus: Optional[int] = None
    # Local Ray: GPUs it may use (null: all it detects).
    num_gpus: Optional[int] = None
    # Local Ray: object-store size in MB (null: Ray's default, 30% of memory).
    object_store_memory_mb: Optional[int] = None
    # address and spark modes: ship these packages to the Ray nodes in the job's runtime environment (Ray's
    # py_modules: uploaded once per driver, cached by content on each node), so the nodes need the dependencies,
    # not the project, and always run the driver's version of it. From a zip on spark-submit's --py-files they are
    # unpacked first. Empty: the nodes import the project themselves (installed in their image).
    code_packages: list[str] = field(default_factory=lambda: ["common", "jobs"])
    # Ray on Spark (ray.util.spark.setup_ray_cluster): the most Ray worker nodes it starts, each one a Spark task
    # holding spark_num_cpus_per_node cores while it lives.
    spark_max_worker_nodes: int = 2
    # Ray on Spark: the fewest worker nodes. 0 (autoscaling from zero): nodes start when a Ray stage asks for
    # resources and end after spark_idle_timeout_minutes idle, giving their Spark slots back to the next Spark stage;
    # equal to spark_max_worker_nodes: a fixed cluster that holds its slots until the job ends.
    spark_min_worker_nodes: int = 0
    # Ray on Spark: minutes a worker node may stay idle before it ends and frees its Spark slots.
    spark_idle_timeout_minutes: float = 0.5
    # Ray on Spark: CPUs per Ray worker node (null: the cores of the application's smallest executor, as its running
    # executors report them; Ray's own default, a whole worker machine's CPUs, never fits a smaller executor). More
    # than an executor has is refused before Ray starts: such a node's Spark task would never be scheduled.
    spark_num_cpus_per_node: Optional[int] = None
    # Ray on Spark: a worker node's memory in MB, heap and object store together (30% of it the object store, Ray's
    # own share). null: its executor's share, spark.executor.memory x node CPUs / executor cores (Ray's own default,
    # the whole machine's memory over its cores, gave 14 GB nodes on 3 GB standalone workers).
    spark_memory_per_node_mb: Optional[int] = None
    # Ray on Spark: seconds a Ray stage may wait with worker nodes asked for and none of their Spark tasks scheduled
    # (twice that once a task runs and its `ray start` has not joined) before the job ends with an error naming the
    # executors' size and these keys, and Ray on Spark is shut down. Never a silent wait.
    spark_node_start_timeout_s: float = 300.0
    # Ray on Spark: GPUs per Ray worker node (null: none). A stage that asks for a GPU on a Ray cluster without one
    # fails before it starts, naming this key.
    spark_num_gpus_per_node: Optional[int] = None
    # Fault tolerance of the suite's Ray actors (generation and scoring pools): a killed actor (OOM,
    # preempted node, ray.kill) is restarted up to actor_max_restarts times (-1: no limit) and its in-flight
    # task retried up to actor_task_retries times. Bounded, so a model that kills its actor on every batch
    # fails the stage instead of looping.
    actor_max_restarts: int = 3
    # Retries of a killed actor's in-flight batch (see actor_max_restarts), and of an HFT training task
    # whose worker died.
    actor_task_retries: int = 3
    # Seconds a wait on the suite's Ray tasks (classifier training and scoring, fine-tunes, conversions) may go with
    # nothing finished and no live node able to hold what they ask for (the GPU node gone in address mode), before
    # the job ends with an error naming the tasks and the nodes (exit 5). A task that runs is never cut short. Not on
    # Ray on Spark (mode: spark), whose nodes start on demand under spark_node_start_timeout_s's node watch.
    unschedulable_timeout_s: float = 600.0
    # Also retry a batch whose code raised (a transient CUDA OOM, a flaky object-store read), up to
    # actor_task_retries times; a deterministic error then fails the stage, and no version is written.
    retry_exceptions: bool = True
    # A Ray Data stage (generation, scoring) that failed because the cluster lost a node, or an actor for a moment
    # (a node's death mid-batch reaches Ray Data as ActorUnavailableError, which its actor pool does not retry), is
    # run again from its inputs, up to this many times; its output is written once (the stages are deterministic).
    # A stage whose code failed, or whose actors died of themselves past their restarts, is not.
    stage_retries: int = 2
    # Local mode: how many worker processes Ray keeps (idle ones included) before it ends idle ones (Ray's
    # num_workers_soft_limit; None: Ray's own, num_cpus). A worker that ran a fine-tune or a conversion has
    # torch imported; kept, the next stage's task starts at once instead of paying ~2.5 s for a process and
    # torch's import. Each idle one holds ~0.3-0.5 GB. conf/demo.yaml and conf/local.yaml set 6. Not the
    # default yet: the shared test runtime hung with it (see README, Ray).
    max_workers: Optional[int] = None
    # Which of Ray Data's Parquet readers reads the suite's table versions. v1: read tasks open the files
    # they are given (the suite always hands over a Delta version's own file list). v2 (Ray 2.60's default)
    # first reads every footer on a pool of RAY_DATA_PARQUET_FOOTER_NUM_ACTORS (32) new actors, a process
    # each, per read: 1-2 s of a small cluster's CPUs for every read of a few files (README, Ray Data reads);
    # worth it for directories of thousands of object-store files.
    parquet_datasource: Literal["v1", "v2"] = "v1"
    # A CPU generation stage whose input has at most this many rows runs as Ray tasks in the torch workers
    # the run already warmed (the fine-tune's), each keeping its loaded generator for the next batch, instead
    # of starting a fresh actor pool whose processes import torch and load the model again (4-6 s a stage on
    # 2 cores: most of a small stage). The outputs are the same either way (same batches, same seeds). Larger
    # inputs and GPU stages keep the actor pool (its actors hold their device for the whole stage). 0: always
    # the actor pool.
    warm_task_rows: int = 10000
    # Threads of each CPU generation actor or task (CTranslate2's intra-op threads; torch's on the hf engine).
    # 0: the largest node's CPUs shared among the stage's actors. A CPU pool leaves one CPU to Ray Data's read
    # and write tasks, which idle while the model generates: on 2 cores the one actor then runs 2 threads.
    # A deployment setting, not a method's: CTranslate2 int8's samples are the same at 1 and 2 threads (measured
    # on SmolLM2), so it is in no table's lineage key.
    generation_threads: int = 0

    def __post_init__(self) -> None:
        check(self.max_workers is None or self.max_workers >= 1, "ray.max_workers", "must be >= 1")
        check(self.warm_task_rows >= 0, "ray.warm_task_rows", "must be >= 0")
        check(self.generation_threads >= 0, "ray.generation_threads", "must be >= 0 (0: the node's CPUs shared)")
        check(self.parquet_datasource in ("v1", "v2"), "ray.parquet_datasource", "must be v1 or v2")
        check(self.stage_retries >= 0, "ray.stage_retries", "must be >= 0")
        check(
            self.spark_memory_per_node_mb is None or self.spark_memory_per_node_mb >= 256,
            "ray.spark_memory_per_node_mb",
            "must be at least 256 (MB)",
        )
        check(self.spark_node_start_timeout_s > 0, "ray.spark_node_start_timeout_s", "must be above 0")
        for name in ("actor_max_restarts", "actor_task_retries"):
            check(getattr(self, name) >= -1, f"ray.{name}", "must be >= -1 (-1: no limit)")
        if self.mode == "address":
            check(bool(self.address), "ray.address", "is required when ray.mode is 'address'")
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            check(value is None or value >= 0, f"ray.{name}", "must be >= 0")


@dataclass
class LakehouseConfig:
    """Where Delta tables live: path tables under ``root``, or catalog tables ``<catalog>.<name>``."""

    # The lakehouse folder or URI (s3://, abfss://, dbfs:/): one Delta table per folder under it, models under
    # models/, reports under reports/.
    root: str = "./lakehouse"
    # e.g. "main.augment" on Databricks Unity Catalog; when set, tables are catalog tables (native Delta).
    catalog: Optional[str] = None
    # delta-rs storage options for object stores (credentials as ${ENV_VAR} references, never literal). Its bound on
    # a failing store: max_retries (10) and retry_timeout ("3m") per request, after which the write fails (exit 4).
    storage_options: dict[str, str] = field(default_factory=dict)
    # S3 tables written with Spark's Delta writer: its log store is safe for one writing driver at a time, so each
    # write holds the table's commit lease (common/platform/lakehouse/commit_lease.py). A lease not renewed for this
    # many seconds (its writer died) is broken by the next writer.
    commit_lease_s: float = 60.0
    # How long a writer waits for another driver's commit lease (S3) or commit lock (a local table) on the same
    # table before it fails, naming it.
    commit_wait_s: float = 600.0

    def __post_init__(self) -> None:
        check(bool(self.root), "lakehouse.root", "must not be empty")
        check(self.commit_lease_s >= 3, "lakehouse.commit_lease_s", "must be >= 3 (renewed every third of it)")
        check(self.commit_wait_s >= 0, "lakehouse.commit_wait_s", "must be >= 0")
        self.root = absolute(self.root)

    @property
    def lease(self):
        """The commit lease settings of this lakehouse
        (:class:`common.platform.lakehouse.commit_lease.LeaseSettings`)."""
        from common.platform.lakehouse.commit_lease import LeaseSettings

        return LeaseSettings(ttl_s=self.commit_lease_s, wait_s=self.commit_wait_s)


@dataclass
class TrackingConfig:
    """MLflow tracking. With no ``uri`` the local default is SQLite inside the lakehouse folder."""

    # The MLflow tracking URI (databricks, http://...); null: SQLite at <lakehouse.root>/mlflow.db.
    uri: Optional[str] = None
    # The MLflow experiment every run goes to (a workspace path on Databricks).
    experiment: str = "catalog-augmentation"
    # The model registry's URI ("databricks-uc" for Unity Catalog); null: the tracking URI's own registry (the
    # MLflow server's, or SQLite's locally).
    registry_uri: Optional[str] = None
    # How long an MLflow server (an http(s) URI) may take to answer the start check's GET /health before the run
    # ends as tracking unreachable (exit code 8), instead of each call of the run waiting out the client's retries.
    start_timeout_s: float = 10.0
    # How long a signalled run (SIGTERM, SIGINT) may take to cancel its work and mark its MLflow runs KILLED before
    # it exits without finishing that (exit code 143 or 130 either way); a second signal exits at once.
    shutdown_grace_s: float = 30.0

    def __post_init__(self) -> None:
        check(self.start_timeout_s > 0, "tracking.start_timeout_s", "must be > 0")
        check(self.shutdown_grace_s > 0, "tracking.shutdown_grace_s", "must be > 0")


# Delta's safety default for VACUUM (delta.deletedFileRetentionDuration): files a reader of a version up to
# 7 days old may still need are never deleted below it unless forced.
DELTA_SAFE_RETENTION_HOURS = 168.0


@dataclass
class MaintenanceConfig:
    """``augment run maintain``: compaction and VACUUM of the lakehouse's tables."""

    tables: list[str] = field(default_factory=list)  # empty: every table in the lakehouse
    # Rewrite a table's small files into larger ones (OPTIMIZE), as a new version.
    compact: bool = True
    # Tables with fewer live files than this are left as they are (compaction would only add a version).
    min_files: int = 8
    # Delete files no version within retention_hours needs (VACUUM).
    vacuum: bool = True
    # VACUUM keeps files that versions younger than this still read (Delta's safety default: 168).
    retention_hours: float = DELTA_SAFE_RETENTION_HOURS
    # Allow retention_hours below Delta's safety default: versions older than it may stop being readable.
    force_retention: bool = False
    # Kept classifier folders under <lakehouse.root>/models whose models the registry holds (a registered version
    # names the folder; no unfinished shipping names it): remove them, only list them (a dry run), or keep them.
    shipped_models: Literal["remove", "list", "keep"] = "remove"

    def __post_init__(self) -> None:
        check(self.min_files >= 2, "maintenance.min_files", "must be >= 2")
        check(self.retention_hours >= 0, "maintenance.retention_hours", "must be >= 0")
        check(
            self.retention_hours >= DELTA_SAFE_RETENTION_HOURS or self.force_retention,
            "maintenance.retention_hours",
            f"{self.retention_hours:g} is below Delta's safety default of {DELTA_SAFE_RETENTION_HOURS:g} hours "
            "(readers of older versions would lose files); set maintenance.force_retention=true to allow it",
        )
