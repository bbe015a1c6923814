"""A served model's responses, kept where its generator lives, so that no request is paid for twice.

Every request a generation stage sends to an endpoint is keyed by what decides its answer (:func:`request_key`: the
served model, the API style, the sampling parameters, the prompt, the sample's index and the seed). Its outcome is
appended, as it completes, to the response log of its input batch: Parquet parts under
``<generator folder>/responses/<batch>/``, where ``<batch>`` is a hash of the batch's (source_id, source_text) rows,
so a batch finds its responses by reading its own folder, however many the stage has (generation batches are the
same on every run of the same input: see :func:`common.models.generation.pool.generate`). A part is written every
:data:`FLUSH_EVERY` outcomes and when the batch ends or fails, so a stage killed halfway loses at most the outcomes
of its last seconds; run again, each batch sends only the requests with no answer in its log. An answer is kept for
good; a failed request is logged (for the stage's accounting) but sent again next time.

Each part row carries the ``tag`` of the stage run that wrote it (its MLflow run and output table), which is how
:func:`usage` finds what one stage sent: requests, retries, tokens and latency percentiles, read with Spark.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from common.models.generation.endpoint import Outcome, Request

RESPONSES = "responses"  # the log's folder under a served generator's folder
FLUSH_EVERY = 32  # outcomes buffered before a part is written
FLUSH_S = 10.0  # ... or seconds since the last part


# The parts' columns and their Spark SQL types. A row with no ``key`` is a batch's summary: ``reused``, the answers
# it took from the log instead of sending.
COLUMNS = (("key", "string"), ("text", "string"), ("reason", "string"), ("prompt_tokens", "long"),
           ("completion_tokens", "long"), ("latency_s", "double"), ("retries", "long"), ("reused", "long"),
           ("tag", "string"), ("written_at", "double"))


def schema():
    """The parts' Arrow schema (:data:`COLUMNS`)."""
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def request_key(model: str, api: str, params: dict[str, Any], request: "Request") -> str:
    """The hex SHA-256 of everything that decides ``request``'s answer: the served ``model``, the ``api`` style, the
    sampling ``params``, the prompt, the sample index and the seed."""
    body = json.dumps([model, api, params, request.prompt, request.sample_idx, request.seed], sort_keys=True)
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def batch_folder(root: str, sources: Sequence[tuple[str, str]]) -> str:
    """The log folder under ``root`` of the batch of (source_id, source_text) ``sources``: named by their hash, in
    sorted order (a batch's rows may arrive in another order)."""
    digest = hashlib.sha256(json.dumps(sorted(sources)).encode("utf-8")).hexdigest()[:32]
    return f"{root.rstrip('/')}/{digest}"


class ResponseLog:
    """The response log of one batch at ``folder`` (a path or an object-store URI), written by the stage run
    ``tag``. :meth:`answers` reads what earlier runs kept; :meth:`add` buffers an outcome and writes a part every
    :data:`FLUSH_EVERY` of them or :data:`FLUSH_S` seconds; :meth:`close` writes the rest and the batch's summary."""

    def __init__(self, folder: str, tag: str):
        self.folder, self.tag = folder, tag
        self._rows: list[dict[str, Any]] = []
        self._last = time.monotonic()

    def answers(self) -> dict[str, "Outcome"]:
        """Every answered request in the log, by key (a request answered twice, by two runs killed at the same
        point, keeps its first answer)."""
        from common.models.generation.endpoint import Outcome
        from common.platform.storage import list_files, read_parquet_files

        parts = sorted(f.path for f in list_files(self.folder) if f.path.endswith(".parquet"))
        if not parts:
            return {}
        prefix = self.folder.split("://", 1)[0] + "://" if "://" in self.folder else ""
        table = read_parquet_files([prefix + p if prefix and "://" not in p else p for p in parts],
                                   ["key", "text", "prompt_tokens", "completion_tokens"])
        found: dict[str, Outcome] = {}
        for row in table.to_pylist():
            if row["key"] is not None and row["text"] is not None and row["key"] not in found:
                found[row["key"]] = Outcome(text=row["text"], reason=None, prompt_tokens=row["prompt_tokens"],
                                            completion_tokens=row["completion_tokens"])
        return found

    def add(self, key: str, outcome: "Outcome") -> None:
        self._rows.append({"key": key, "text": outcome.text, "reason": outcome.reason,
                           "prompt_tokens": outcome.prompt_tokens, "completion_tokens": outcome.completion_tokens,
                           "latency_s": outcome.latency_s, "retries": outcome.retries, "reused": None})
        if len(self._rows) >= FLUSH_EVERY or time.monotonic() - self._last >= FLUSH_S:
            self.flush()

    def close(self, reused: int) -> None:
        """Write what is buffered and the batch's summary row (``reused`` answers taken from the log)."""
        self._rows.append({"key": None, "text": None, "reason": None, "prompt_tokens": 0, "completion_tokens": 0,
                           "latency_s": None, "retries": 0, "reused": reused})
        self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one Parquet part (locally through a temporary name, so a killed writer leaves
        no half file that a reader would take for a part; an object store's put is atomic)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from common.platform.storage import filesystem, is_local

        self._last = time.monotonic()
        if not self._rows:
            return
        now = time.time()
        table = pa.Table.from_pylist([{**row, "tag": self.tag, "written_at": now} for row in self._rows],
                                     schema=schema())
        name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
        if is_local(self.folder):
            folder = self.folder.removeprefix("file://")
            os.makedirs(folder, exist_ok=True)
            pq.write_table(table, os.path.join(folder, f".{name}.tmp"))
            os.replace(os.path.join(folder, f".{name}.tmp"), os.path.join(folder, name))
        else:
            fs, path = filesystem(f"{self.folder.rstrip('/')}/{name}")
            pq.write_table(table, path, filesystem=fs)
        self._rows = []


def usage(spark, generator_uris: Sequence[str], tag: str) -> dict[str, float]:
    """What the stage run ``tag`` sent to the endpoints of the served generators at ``generator_uris``, read from
    their response logs with Spark: HTTP requests (first tries and retries), retries, requests answered and failed,
    answers reused from earlier runs, prompt and completion tokens (the responses' ``usage``), and the latency
    percentiles (p50, p90, p99, seconds from a request's first try to its answer, retries included). Empty when
    the stage sent nothing and reused nothing (nothing logged under ``tag``)."""
    from pyspark.sql import functions as F

    from common.platform.storage import exists

    roots = [f"{u.rstrip('/')}/{RESPONSES}" for u in dict.fromkeys(generator_uris)]
    roots = [r for r in roots if exists(r)]
    if not roots:
        return {}
    rows = spark.read.schema(", ".join(f"{name} {kind}" for name, kind in COLUMNS)) \
        .option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet") \
        .parquet(*roots).filter(F.col("tag") == tag)
    sent = F.col("key").isNotNull()
    got = rows.agg(F.sum(sent.cast("long")).alias("sent"), F.sum("retries").alias("retries"),
                   F.sum((sent & F.col("text").isNull()).cast("long")).alias("failed"),
                   F.sum("reused").alias("reused"), F.sum("prompt_tokens").alias("prompt_tokens"),
                   F.sum("completion_tokens").alias("completion_tokens"),
                   F.percentile_approx(F.when(sent, F.col("latency_s")), [0.5, 0.9, 0.99], 10_000).alias("p")).first()
    if got is None or got["sent"] is None:
        return {}
    sent_n, retries = int(got["sent"] or 0), int(got["retries"] or 0)
    out = {"endpoint.requests": sent_n + retries, "endpoint.retries": retries,
           "endpoint.answered": sent_n - int(got["failed"] or 0), "endpoint.failed": int(got["failed"] or 0),
           "endpoint.reused": int(got["reused"] or 0), "endpoint.prompt_tokens": int(got["prompt_tokens"] or 0),
           "endpoint.completion_tokens": int(got["completion_tokens"] or 0)}
    if got["p"]:
        out.update({f"endpoint.latency_p{q}_s": v for q, v in zip((50, 90, 99), got["p"])})
    return {k: float(v) for k, v in out.items()}
