"""A served generator as a generation pool's engine: the folder the fine-tune stage writes for ``model.kind:
endpoint`` (:func:`common.models.generation.in_context.save_endpoint`) run by :class:`EndpointGenerator`, which
sends its requests with :class:`~common.models.generation.endpoint.EndpointClient` and keeps its answers in the
batch's response log (:mod:`common.models.generation.responses`).
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from common.models.generation.endpoint import EndpointClient, Outcome, Request, Secret, api_key, sampling_params, share
from common.platform.errors import EndpointUnreachable


def endpoint_settings(model_path: str) -> Optional[dict[str, Any]]:
    """The ``generator.json`` of a served generator's folder
    (:func:`common.models.generation.in_context.save_endpoint`), or None when ``model_path`` holds another kind."""
    from common.models.generation.causal_lm import GENERATOR_FILE
    from common.platform.storage import exists, read_text

    path = f"{model_path.rstrip('/')}/{GENERATOR_FILE}"
    if not exists(path):
        return None
    settings = json.loads(read_text(path))
    return settings if settings.get("kind") == "endpoint" else None


def served_key(generator_uris: Sequence[str]) -> Optional[Secret]:
    """The API key of the first served generator among ``generator_uris`` (:func:`api_key`, read on the driver for
    the pool's actors), None when none is served or its endpoint takes no key."""
    from common.models.config import EndpointConfig

    for uri in generator_uris:
        settings = endpoint_settings(uri)
        if settings is not None:
            return api_key(EndpointConfig(**settings["endpoint"]))
    return None


class EndpointGenerator:
    """The Ray Data callable of a generation pool whose model is served: the generator saved at ``model_path``
    (:func:`endpoint_settings`: the endpoint, the few-shot prompt template) called for each input ``n_samples``
    times (one request a sample), its samples returned as generated rows
    (:data:`~common.models.generation.hf_engine.OUTPUT_COLUMNS`, ``generated_tokens`` the response's completion
    tokens). A pool of ``actors`` of these shares the endpoint's concurrency and rate (:func:`share`); ``key`` is
    the API key the driver read (:func:`api_key`; None: this process reads it).

    Each batch's outcomes go to its response log (:class:`~common.models.generation.responses.ResponseLog`, under
    the generator's folder, tagged ``tag``) as they complete, and a request the log already answered is not sent.
    An input whose every sample came back gives its samples; an empty one, or one with a request the server
    refused or failed after its retries, gives one row with the ``reason`` (``endpoint: HTTP 503 after 5
    retries``), which the stage quarantines. When nothing answers at the URL any more (refused or reset after the
    retries), the batch raises :class:`EndpointUnreachable` instead, its answers kept: an outage is not the rows'
    fault, and the run started again sends only what is missing."""

    def __init__(self, model_path: str, model_version: str, spec, actors: int = 1, tag: str = "",
                 key: Optional[Secret] = None):
        from common.models.config import EndpointConfig
        from common.models.generation.responses import RESPONSES

        settings = endpoint_settings(model_path)
        if settings is None:
            raise ValueError(f"{model_path} holds no served generator (generator.json of kind endpoint)")
        endpoint = EndpointConfig(**settings["endpoint"])
        self.template, self.stop, self.model_version, self.spec = settings["prompt"], settings["stop"], \
            model_version, spec
        self.client = EndpointClient(endpoint, sampling_params(spec),
                                     concurrency=share(endpoint.max_concurrency, actors),
                                     requests_per_minute=share(endpoint.requests_per_minute, actors), key=key)
        self.responses, self.tag = f"{model_path.rstrip('/')}/{RESPONSES}", tag

    def __call__(self, batch: dict[str, Any]):
        import pyarrow as pa

        from common.models.generation.causal_lm import prompt_text
        from common.models.generation.hf_engine import OUTPUT_COLUMNS, output_schema
        from common.models.generation.responses import ResponseLog, batch_folder, request_key

        ids = [str(x) for x in batch["source_id"]]
        texts = ["" if x is None else str(x) for x in batch["source_text"]]
        good = [i for i, text in enumerate(texts) if text.strip()]
        n = self.spec.n_samples
        requests = [Request(prompt_text(self.template, texts[i]), k, self.spec.seed) for i in good for k in range(n)]
        cfg = self.client.cfg
        keys = [request_key(cfg.model, cfg.api, self.client.params, r) for r in requests]
        responses = ResponseLog(batch_folder(self.responses, [(ids[i], texts[i]) for i in good]), self.tag)
        outcomes: list[Optional[Outcome]] = [None] * len(requests)
        kept = responses.answers() if requests else {}
        for j, key in enumerate(keys):
            outcomes[j] = kept.get(key)
        todo = [j for j, o in enumerate(outcomes) if o is None]
        sent = self.client.run([requests[j] for j in todo],
                               on_done=lambda i, outcome: responses.add(keys[todo[i]], outcome))
        responses.close(reused=len(requests) - len(todo))
        for j, outcome in zip(todo, sent):
            outcomes[j] = outcome
        gone = [o for o in sent if o.unreachable]
        if gone:
            raise EndpointUnreachable(
                f"{self.client.url} stopped answering: {len(gone)} of {len(todo)} requests of a batch found nothing "
                f"there ({gone[0].reason}); the {len(todo) - len(gone)} answered are kept under {self.responses}, and "
                f"the run started again sends only the requests still missing")
        rows: list[tuple] = [(ids[i], texts[i], None, -1, self.model_version, 0, "empty input")
                             for i, text in enumerate(texts) if not text.strip()]
        for j, i in enumerate(good):
            samples = outcomes[j * n:(j + 1) * n]
            failed = next((o for o in samples if not o.ok), None)
            if failed is not None:
                rows.append((ids[i], texts[i], None, -1, self.model_version, 0, f"endpoint: {failed.reason}"[:300]))
                continue
            # (a server that ignores `stop` writes on: the sample ends at the line break, as in-context engines cut)
            rows += [(ids[i], texts[i], o.text.split(self.stop, 1)[0].strip(), k, self.model_version,
                      o.completion_tokens, None) for k, o in enumerate(samples)]
        columns = list(zip(*rows)) if rows else [[] for _ in OUTPUT_COLUMNS]
        return pa.table({name: list(values) for name, values in zip(OUTPUT_COLUMNS, columns)}, schema=output_schema())
