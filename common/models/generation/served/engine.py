"""A served generator as a generation pool's engine: the folder the fine-tune stage writes for ``model.kind:
endpoint`` (:func:`common.models.generation.kinds.in_context.save_endpoint`), read once on the driver into a
:class:`ServedGenerator` and run in the pool's workers by :class:`EndpointGenerator`, which sends its requests with
:class:`~common.models.generation.served.client.EndpointClient` and keeps its answers in the role's response log
(:mod:`common.models.generation.served.log`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ray.exceptions import UserCodeException

from common.models.generation.served.auth import Secret, api_key
from common.models.generation.served.client import EndpointClient, Outcome, Request, sampling_params
from common.models.generation.served.health import rate_share, share
from common.platform.errors import EndpointUnreachable

if TYPE_CHECKING:
    from common.models.config import EndpointConfig

log = logging.getLogger(__name__)


class EndpointDown(EndpointUnreachable, UserCodeException):
    """The outage a pool's batch raises: an :class:`EndpointUnreachable` (exit code 6, not retried by Ray) that Ray
    Data also takes for what it is, an error of the stage's own code (not of Ray's), and hands to the driver as it is
    (the stage's dataset sets ``raise_original_map_exception``, so its message is not lost on the way)."""


@dataclass(frozen=True)
class ServedGenerator:
    """A served generator's ``generator.json``, parsed: where it was read (``path``), the endpoint, the few-shot
    prompt template, the stop, and how many training pairs the prompt holds."""

    path: str
    endpoint: "EndpointConfig"
    prompt: str
    stop: str
    in_context: int

    @staticmethod
    def read(model_path: str) -> Optional["ServedGenerator"]:
        """The served generator saved at ``model_path``, or None when the folder holds another kind."""
        from common.models.config import EndpointConfig
        from common.models.generation.formats import GENERATOR_FILE
        from common.platform.storage import exists, read_text

        path = f"{model_path.rstrip('/')}/{GENERATOR_FILE}"
        if not exists(path):
            return None
        settings = json.loads(read_text(path))
        if settings.get("kind") != "endpoint":
            return None
        return ServedGenerator(
            model_path.rstrip("/"),
            EndpointConfig(**settings["endpoint"]),
            settings["prompt"],
            settings["stop"],
            int(settings.get("in_context", 0)),
        )


def served_generators(generator_uris: Sequence[str]) -> dict[str, ServedGenerator]:
    """The served ones among the generators at ``generator_uris``, by path, read once (on the driver)."""
    found = {uri: ServedGenerator.read(uri) for uri in dict.fromkeys(generator_uris)}
    return {uri: generator for uri, generator in found.items() if generator is not None}


def served_key(generators: Sequence[ServedGenerator]) -> Optional[Secret]:
    """The API key of the first of ``generators`` (:func:`api_key`, read on the driver for the pool's workers), None
    when there is none or its endpoint takes no key."""
    return api_key(generators[0].endpoint) if generators else None


def pool_size(concurrency: int, generators: Sequence[ServedGenerator]) -> int:
    """How many workers a pool of ``concurrency`` may run when ``generators`` are served: at most the smallest
    ``max_concurrency`` among them, so that each worker's share (:func:`share`) is at least one request and the
    workers together never hold more than ``max_concurrency`` in flight."""
    return min([concurrency] + [g.endpoint.max_concurrency for g in generators])


class EndpointGenerator:
    """The Ray Data callable of a generation pool whose model is served: ``generator`` (a :class:`ServedGenerator`
    read on the driver) called for each input ``n_samples`` times (one request a sample), its samples returned as
    generated rows (:data:`~common.models.generation.formats.OUTPUT_COLUMNS`, ``generated_tokens`` the response's
    completion tokens). A pool of ``actors`` of these shares the endpoint's concurrency and rate (:func:`share`,
    :func:`rate_share`); ``key`` is the API key the driver read (:func:`api_key`; None: this process reads it).

    Each outcome goes to the role's response log (tagged ``tag``) as it completes, and a request whose answer the log
    already holds (:class:`~common.models.generation.served.answers.AnswerIndex`) is not sent. An input whose every
    sample came back gives its samples; an empty one, or one with a request that failed (the prompt refused, or the
    server's failure after its retries), gives one row with the ``reason`` (``endpoint: HTTP 503 after 5 retries``),
    which the stage quarantines (and counts against ``max_failed_share`` when the server failed). When the endpoint's
    breaker opens, the batch raises :class:`EndpointUnreachable` instead, its answers kept: an outage is not the rows'
    fault, and the run started again sends only what is missing."""

    def __init__(
        self,
        generator: ServedGenerator,
        model_version: str,
        spec,
        actors: int = 1,
        tag: str = "",
        key: Optional[Secret] = None,
    ):
        from common.models.generation.served.answers import AnswerIndex
        from common.models.generation.served.log import RESPONSES, log_root

        endpoint = generator.endpoint
        self.generator, self.model_version, self.spec = generator, model_version, spec
        self.client = EndpointClient(
            endpoint,
            sampling_params(spec),
            concurrency=share(endpoint.max_concurrency, actors),
            requests_per_minute=rate_share(endpoint.requests_per_minute, actors),
            key=key,
            scope=tag,
        )
        self.responses, self.tag = log_root(generator.path), tag
        self.kept = AnswerIndex.shared(self.responses, tag).include(f"{generator.path}/{RESPONSES}")

    def __call__(self, batch: dict[str, Any]):
        import pyarrow as pa

        from common.models.generation.formats import OUTPUT_COLUMNS, output_schema, prompt_text
        from common.models.generation.served.log import FLUSH_S, ResponseLog, request_key

        ids = [str(x) for x in batch["source_id"]]
        texts = ["" if x is None else str(x) for x in batch["source_text"]]
        good = [i for i, text in enumerate(texts) if text.strip()]
        n = self.spec.n_samples
        template = self.generator.prompt
        requests = [Request(prompt_text(template, texts[i]), k, self.spec.seed) for i in good for k in range(n)]
        cfg = self.client.cfg
        keys = [request_key(cfg.base_url, cfg.model, cfg.api, self.client.params, r) for r in requests]
        outcomes: list[Optional[Outcome]] = [self.kept.get(key) for key in keys]
        todo: list[int] = []  # each missing request once, though a source may come twice in a batch
        asked: set[str] = set()
        for j, key in enumerate(keys):
            if outcomes[j] is None and key not in asked:
                asked.add(key)
                todo.append(j)

        if len(todo) < len(requests):  # answers of this stage in the log: the endpoint took these parameters
            self.client.health.vouched()
        # What was paid for is written on every exit, and joins the index once written.
        with ResponseLog(self.responses, self.tag, self.kept) as responses:
            sent = (
                self.client.run(
                    [requests[j] for j in todo],
                    on_done=lambda i, o: responses.add(keys[todo[i]], o),
                    tick=responses.flush,
                    tick_s=FLUSH_S,
                )
                if todo
                else []
            )
            responses.close(reused=len(requests) - len(todo))
        by_key = {keys[j]: outcome for j, outcome in zip(todo, sent)}
        outcomes = [o if o is not None else by_key[key] for o, key in zip(outcomes, keys)]
        unsent = sum(not o.sent for o in sent)
        if unsent:
            answered = sum(o.ok for o in sent)
            raise EndpointDown(
                f"{self.client.url} is down: {self.client.health.reason}; {unsent} of this batch's {len(todo)} "
                f"requests not sent, the {answered} answered kept under {self.responses} (the run started again "
                f"sends only the requests still missing)"
            )
        rows: list[tuple] = [
            (ids[i], texts[i], None, -1, self.model_version, 0, "empty input")
            for i, text in enumerate(texts)
            if not text.strip()
        ]
        stop = self.generator.stop
        for j, i in enumerate(good):
            samples = outcomes[j * n : (j + 1) * n]
            failed = next((o for o in samples if not o.ok), None)
            if failed is not None:
                rows.append((ids[i], texts[i], None, -1, self.model_version, 0, f"endpoint: {failed.reason}"[:300]))
                continue
            # (a server that ignores `stop` writes on: the sample ends at the line break, as in-context engines cut)
            rows += [
                (ids[i], texts[i], o.text.split(stop, 1)[0].strip(), k, self.model_version, o.completion_tokens, None)
                for k, o in enumerate(samples)
            ]
        columns = list(zip(*rows)) if rows else [[] for _ in OUTPUT_COLUMNS]
        return pa.table({name: list(values) for name, values in zip(OUTPUT_COLUMNS, columns)}, schema=output_schema())


def failed_share_check(spark, generator_uris: Sequence[str], tag: str, stage: str):
    """A check to run before ``stage``'s version is committed (``write_ray(before_commit=...)``): the share of the
    stage run ``tag``'s requests that ended in a server-side failure, read from the response logs
    (:func:`~common.models.generation.served.log.usage`); beyond the endpoint's ``max_failed_share`` it raises
    :class:`EndpointUnreachable` (exit code 6) so that no version is written from a broken server. Answers reused
    from earlier runs count as requests. None when no generator is served."""
    generators = served_generators(generator_uris)
    if not generators:
        return None

    def check() -> None:
        from common.models.generation.served.log import usage

        counts = usage(spark, list(generators), tag)
        failed = counts.get("endpoint.server_failed", 0.0)
        total = (
            counts.get("endpoint.answered", 0.0)
            + counts.get("endpoint.failed", 0.0)
            + counts.get("endpoint.reused", 0.0)
        )
        limit = min(g.endpoint.max_failed_share for g in generators.values())
        if total and failed / total > limit:
            endpoint = next(iter(generators.values())).endpoint
            raise EndpointUnreachable(
                f"{endpoint.base_url}: {failed:.0f} of {stage}'s {total:.0f} requests failed on the server's side "
                f"after their retries ({failed / total:.1%}, more than max_failed_share {limit:.1%}): no version "
                f"written; the run started again sends only the requests with no answer"
            )

    return check
