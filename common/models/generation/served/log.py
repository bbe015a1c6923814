"""A served model's responses, kept on the lakehouse's storage so that no request is paid for twice.

Every request a generation stage sends to an endpoint is keyed by what decides its answer (:func:`request_key`: the
served model, the API style, the sampling parameters, the prompt, the sample's index and the seed). Its outcome is
appended, as it completes, to the role's response log: Parquet parts under ``<lakehouse>/models/responses/<role>/``
(:func:`log_root`; ``<role>`` is the generator's name without its key, ``endpoint_cga``), shared by every generator
folder of that role. A worker reads the log once (:class:`~common.models.generation.served.answers.AnswerIndex`) and
looks each request up by its key, so an answer is found wherever an earlier run kept it: another batch size, an added
or removed input row, a re-partitioned input or a generator folder made again from new input versions send only the
requests that are new. Logs of earlier releases (``<generator folder>/responses/<batch>/``) are read too.

A part is written every :data:`FLUSH_EVERY` outcomes or :data:`FLUSH_S` seconds and, in a ``finally``, when the batch
ends, fails or is interrupted, so a killed worker loses at most the outcomes of its last seconds. A part is whole or
absent: locally it is written under a temporary name and renamed; an object store's put is atomic. A part that cannot
be read is reported, naming it, and its requests are sent again. An answer is kept for good; a failed request is
logged (for the stage's accounting) but sent again next time.

Each part row carries the ``tag`` of the stage run that wrote it (its MLflow run and output table), which is how
:func:`usage` finds what one stage sent: requests, retries, tokens, latency percentiles and server-side failures,
read with Spark. While a stage sends, it holds the lease of its logs (:mod:`~common.stages.served_lease`).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Optional, Sequence

if TYPE_CHECKING:
    from common.models.generation.served.answers import AnswerIndex
    from common.models.generation.served.client import Outcome, Request

RESPONSES = "responses"  # the logs' folder beside the generators (and, before, under each generator's folder)
FLUSH_EVERY = 32  # outcomes buffered before a part is written
FLUSH_S = 10.0  # ... or seconds since the last part

# The parts' columns and their Spark SQL types. A row with no ``key`` is a batch's summary: ``reused``, the answers
# it took from the log instead of sending. ``server``: a failure that was the server's (5xx, timeout, connection).
COLUMNS = (
    ("key", "string"),
    ("text", "string"),
    ("reason", "string"),
    ("prompt_tokens", "long"),
    ("completion_tokens", "long"),
    ("latency_s", "double"),
    ("retries", "long"),
    ("reused", "long"),
    ("tag", "string"),
    ("written_at", "double"),
    ("server", "boolean"),
)


def schema():
    """The parts' Arrow schema (:data:`COLUMNS`)."""
    import pyarrow as pa

    types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS])


def request_key(base_url: str, model: str, api: str, params: dict[str, Any], request: "Request") -> str:
    """The hex SHA-256 of everything that decides ``request``'s answer: the server (``base_url``: another server
    serving a model under the same name is another model), the served ``model``, the ``api`` style, the sampling
    ``params``, the prompt, the sample index and the seed."""
    body = json.dumps(
        [base_url.rstrip("/"), model, api, params, request.prompt, request.sample_idx, request.seed], sort_keys=True
    )
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def log_root(model_path: str) -> str:
    """The response log of the generator at ``model_path`` (``<models>/<role>-<key>``): ``<models>/responses/<role>``,
    shared by every generator of that role (answers are keyed by their request, not by the folder)."""
    parent, name = posixpath.split(model_path.rstrip("/"))
    return f"{parent}/{RESPONSES}/{name.split('-', 1)[0]}"


def log_roots(model_path: str) -> list[str]:
    """Where answers of the generator at ``model_path`` may be: its role's log (:func:`log_root`) and the folder's
    own ``responses/`` of earlier releases."""
    return [log_root(model_path), f"{model_path.rstrip('/')}/{RESPONSES}"]


class ResponseLog:
    """The outcomes one batch appends to the log at ``root`` (a path or an object-store URI), written by the stage
    run ``tag``: :meth:`add` buffers an outcome and writes a part every :data:`FLUSH_EVERY` of them or
    :data:`FLUSH_S` seconds; :meth:`close` writes the rest and the batch's summary. Use it as a context manager: what
    is buffered is written on every exit, an exception's included. Each answer written goes to ``index`` (an
    :class:`~common.models.generation.served.answers.AnswerIndex`). Thread-safe: the client writes from its executor's
    threads."""

    def __init__(self, root: str, tag: str, index: Optional[AnswerIndex] = None):
        self.folder, self.tag, self.index = root, tag, index
        self._rows: list[dict[str, Any]] = []
        self._last = time.monotonic()
        self._lock = threading.RLock()

    def __enter__(self) -> "ResponseLog":
        return self

    def __exit__(self, *exc_info) -> None:
        self.flush()

    def add(self, key: str, outcome: "Outcome") -> None:
        """Buffer ``outcome`` of request ``key`` (a request the breaker kept from being sent is not logged)."""
        if not outcome.sent:
            return
        with self._lock:
            self._add(key, outcome)

    def _add(self, key: str, outcome: "Outcome") -> None:
        self._rows.append(
            {
                "key": key,
                "text": outcome.text,
                "reason": outcome.reason,
                "prompt_tokens": outcome.prompt_tokens,
                "completion_tokens": outcome.completion_tokens,
                "latency_s": outcome.latency_s,
                "retries": outcome.retries,
                "reused": None,
                "server": outcome.server if not outcome.ok else None,
            }
        )
        if len(self._rows) >= FLUSH_EVERY or time.monotonic() - self._last >= FLUSH_S:
            self.flush()

    def close(self, reused: int) -> None:
        """Write what is buffered and the batch's summary row (``reused`` answers taken from the log)."""
        with self._lock:
            self._rows.append(
                {
                    "key": None,
                    "text": None,
                    "reason": None,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "latency_s": None,
                    "retries": 0,
                    "reused": reused,
                    "server": None,
                }
            )
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one Parquet part (locally through a temporary name, so a killed writer leaves
        no half file that a reader would take for a part; an object store's put is atomic)."""
        import pyarrow as pa

        with self._lock:
            self._last = time.monotonic()
            if not self._rows:
                return
            rows, now = list(self._rows), time.time()
            table = pa.Table.from_pylist(
                [{**row, "tag": self.tag, "written_at": now} for row in rows], schema=schema()
            )
            self._write(table)
            self._rows = self._rows[len(rows) :]  # (the lock is re-entrant: nothing was added meanwhile)
            if self.index is not None:  # now kept for good: a retry of this batch here finds them
                for row in rows:
                    if row["key"] is not None and row["text"] is not None:
                        self.index.written(row["key"], row["text"], row["prompt_tokens"], row["completion_tokens"])

    def _write(self, table) -> None:
        import pyarrow.parquet as pq

        from common.platform.storage import filesystem, is_local

        name = f"part-{time.time_ns()}-{uuid.uuid4().hex[:8]}.parquet"
        if is_local(self.folder):
            folder = self.folder.removeprefix("file://")
            os.makedirs(folder, exist_ok=True)
            pq.write_table(table, os.path.join(folder, f".{name}.tmp"))
            os.replace(os.path.join(folder, f".{name}.tmp"), os.path.join(folder, name))
        else:
            fs, path = filesystem(f"{self.folder.rstrip('/')}/{name}")
            pq.write_table(table, path, filesystem=fs)


def usage(spark, generator_uris: Sequence[str], tag: str) -> dict[str, float]:
    """What the stage run ``tag`` sent to the endpoints of the served generators at ``generator_uris``, read from
    their response logs with Spark: HTTP requests (first tries and retries), retries, requests answered and failed,
    each request counted once however often Ray ran its batch (``server_failed``: failed for the server's fault, no
    try answered), answers reused from earlier runs, prompt and completion tokens (the responses' ``usage``), and the
    latency percentiles (p50, p90, p99, seconds from a request's first try to its
    answer, retries included). Empty when the stage sent nothing and reused nothing (nothing logged under ``tag``)."""
    from pyspark.sql import functions as F

    from common.platform.storage import exists

    roots = [r for u in dict.fromkeys(generator_uris) for r in log_roots(u)]
    roots = [r for r in dict.fromkeys(roots) if exists(r)]
    if not roots:
        return {}
    # A torn part (a writer killed on a store without atomic puts) is skipped here too, as the workers skip it.
    rows = (
        spark.read.schema(", ".join(f"{name} {kind}" for name, kind in COLUMNS))
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .option("ignoreCorruptFiles", "true")
        .parquet(*roots)
        .filter(F.col("tag") == tag)
    )
    # By request: a batch Ray ran twice logs a request twice; it failed only if no try of it was answered.
    requests = (
        rows.filter(F.col("key").isNotNull())
        .groupBy("key")
        .agg(
            F.max(F.col("text").isNotNull().cast("int")).alias("ok"),
            F.max(F.coalesce(F.col("server"), F.lit(False)).cast("int")).alias("server"),
            F.max(F.when(F.col("text").isNotNull(), F.col("prompt_tokens"))).alias("prompt_tokens"),
            F.max(F.when(F.col("text").isNotNull(), F.col("completion_tokens"))).alias("completion_tokens"),
        )
    )
    got = requests.agg(
        F.count("*").alias("sent"),
        F.sum("ok").alias("answered"),
        F.sum(((F.col("ok") == 0) & (F.col("server") == 1)).cast("long")).alias("server_failed"),
        F.sum("prompt_tokens").alias("prompt_tokens"),
        F.sum("completion_tokens").alias("completion_tokens"),
    ).first()
    tries = rows.agg(
        F.sum("retries").alias("retries"),
        F.sum((F.col("key").isNotNull()).cast("long")).alias("tries"),
        F.sum("reused").alias("reused"),
        F.percentile_approx(F.when(F.col("key").isNotNull(), F.col("latency_s")), [0.5, 0.9, 0.99], 10_000).alias("p"),
    ).first()
    if got is None or not got["sent"] and not tries["reused"]:
        return {}
    sent_n, answered, retries = int(got["sent"] or 0), int(got["answered"] or 0), int(tries["retries"] or 0)
    out = {
        "endpoint.requests": int(tries["tries"] or 0) + retries,
        "endpoint.retries": retries,
        "endpoint.answered": answered,
        "endpoint.failed": sent_n - answered,
        "endpoint.server_failed": int(got["server_failed"] or 0),
        "endpoint.reused": int(tries["reused"] or 0),
        "endpoint.prompt_tokens": int(got["prompt_tokens"] or 0),
        "endpoint.completion_tokens": int(got["completion_tokens"] or 0),
    }
    if tries["p"]:
        out.update({f"endpoint.latency_p{q}_s": v for q, v in zip((50, 90, 99), tries["p"])})
    return {k: float(v) for k, v in out.items()}
