"""The checks of a served generator's endpoint: a job's start check (:func:`served_preflight`, before any engine
starts), ``augment doctor``'s line (:func:`doctor_check`) and the walk of a config's served sections
(:func:`served_sections`)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, Any, Callable, Sequence

from common.models.generation.served.auth import api_key, headers
from common.models.generation.served.client import EndpointClient, Request
from common.platform.errors import EndpointUnreachable

if TYPE_CHECKING:
    from common.models.config import EndpointConfig

log = logging.getLogger(__name__)


def check_endpoint(cfg: "EndpointConfig", timeout_s: float = 30.0, complete: bool = True) -> str:
    """Check ``cfg``'s endpoint: it answers and lists the model (``GET <base_url>/models``; a server that lists
    none, such as ``transformers serve`` of a local folder, is taken at its word), and with ``complete`` (``augment
    doctor``) completes one token; a job's start check leaves that out, so a rerun that has every answer sends no
    completion. Where ``/models`` answers a 5xx or 404 (``transformers serve`` with no hub cache answers 500 while
    serving completions; some gateways route completions only), a one-token completion decides instead. Returns a
    line saying so; raises :class:`EndpointUnreachable` naming the URL and each check that failed, never the key."""
    key = api_key(cfg)
    models_url = cfg.base_url.rstrip("/") + "/models"
    listed: list = []
    try:
        with urllib.request.urlopen(urllib.request.Request(models_url, headers=headers(key)), timeout=timeout_s) as r:
            listed = [m.get("id") for m in json.loads(r.read() or b"{}").get("data", [])]
    except urllib.error.HTTPError as exc:
        if exc.code != 404 and exc.code < 500:
            raise EndpointUnreachable(f"{models_url} answered HTTP {exc.code}") from None
        # /models is broken or absent, which says nothing of completions: one token decides
        done, url = _one_token(cfg, key, timeout_s)
        if not done.ok:
            raise EndpointUnreachable(
                f"{models_url} answered HTTP {exc.code}, and {url}: a one-token completion failed: {done.reason}"
            ) from None
        return (
            f"{cfg.base_url} serves {cfg.model} (/models answered HTTP {exc.code}; a one-token completion in "
            f"{done.latency_s:.1f} s)"
        )
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as exc:
        raise EndpointUnreachable(f"{models_url} did not answer ({getattr(exc, 'reason', exc)})") from None
    if listed and cfg.model not in listed:
        raise EndpointUnreachable(
            f"{models_url} does not list the model {cfg.model!r} (it lists {', '.join(map(str, listed[:10]))})"
        )
    if not complete:
        return f"{cfg.base_url} answers and {'lists' if listed else 'lists no model but may serve'} {cfg.model}"
    done, url = _one_token(cfg, key, timeout_s)
    if not done.ok:
        raise EndpointUnreachable(f"{url}: a one-token completion failed: {done.reason}")
    return (
        f"{cfg.base_url} serves {cfg.model} ({'listed' if listed else 'not listed by /models'}; a one-token "
        f"completion in {done.latency_s:.1f} s)"
    )


def _one_token(cfg: "EndpointConfig", key, timeout_s: float):
    """(the outcome of a one-token completion, its URL), with no retry and at most ``timeout_s``."""
    from dataclasses import replace

    quick = replace(cfg, max_retries=0, timeout_s=min(cfg.timeout_s, timeout_s))
    client = EndpointClient(quick, {"max_tokens": 1, "temperature": 0.0}, concurrency=1, key=key)
    return client.run([Request("Hello", 0, 0)])[0], client.url


def served_preflight(*sections: Callable[[Any], Any]) -> Callable[[Any], None]:
    """A job's start check (``job(name, preflight=...)``) of the generator model sections ``sections`` pick from the
    config (``lambda cfg: cfg.cga.model``): each served one's endpoint answers (:func:`check_endpoint`, no
    completion), before any Spark or Ray work; else :class:`EndpointUnreachable` naming the URL."""

    def check(cfg: Any) -> None:
        for section in sections:
            model = section(cfg)
            if model.served:
                log.info(
                    "generator: %s", check_endpoint(model.endpoint, timeout_s=model.endpoint.timeout_s, complete=False)
                )

    return check


def served_sections(cfg: Any) -> list[tuple[str, "EndpointConfig"]]:
    """(dotted config key, endpoint) of every generator model section of ``cfg`` whose kind is ``endpoint``
    (:func:`common.models.config.model_sections`)."""
    from common.models.config import model_sections

    return [(key, model.endpoint) for key, model in model_sections(cfg) if model.served]


def doctor_check(cfg: Any):
    """``augment doctor``'s endpoint line: each served model the config names answers, lists the model and completes
    one token (:func:`check_endpoint`); required when a section uses one. Never prints a key."""
    from common.platform.doctor.checks import Check

    sections = served_sections(cfg)
    if not sections:
        return Check("endpoint", True, "no section of this config uses a served model (model.kind: endpoint)")
    lines, failed = [], []
    for endpoint, keys in _by_endpoint(sections):
        try:
            lines.append(f"{check_endpoint(endpoint, timeout_s=min(endpoint.timeout_s, 30.0))}; used by {keys}")
        except EndpointUnreachable as exc:
            failed.append(f"{exc}; used by {keys}")
    if failed:
        return Check(
            "endpoint",
            False,
            "; ".join(failed),
            "start the server, or fix *.model.endpoint (base_url, model, api_key_env)",
            required=True,
        )
    return Check("endpoint", True, "; ".join(lines))


def _by_endpoint(sections: Sequence[tuple[str, "EndpointConfig"]]) -> list[tuple["EndpointConfig", str]]:
    """The sections' endpoints, each once, with the keys that use it."""
    groups: list[tuple["EndpointConfig", list[str]]] = []
    for key, endpoint in sections:
        match = next((g for g in groups if g[0] == endpoint), None)
        if match is None:
            groups.append((endpoint, [key]))
        else:
            match[1].append(key)
    return [(endpoint, ", ".join(keys)) for endpoint, keys in groups]
