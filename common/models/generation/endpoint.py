"""A client for a model served behind an OpenAI-compatible API (:class:`~common.models.config.EndpointConfig`): the
engine a generative stage calls when the model is a user's server rather than weights loaded here.

One :class:`EndpointClient` sends a batch of :class:`Request` s (a prompt, its sample index, the stage's seed) with
at most ``concurrency`` in flight and at most ``requests_per_minute`` started a minute, over one aiohttp session; a
stage's actors share the endpoint's ``max_concurrency`` and rate by dividing them (:func:`share`). Each request
comes back as an :class:`Outcome`: the text with the response's ``usage`` and the latency, or the reason it failed.
Faults are paid once:

- HTTP 429 waits what ``Retry-After`` says (seconds or an HTTP date; else the backoff), then retries;
- a 5xx, a timeout or a refused connection retries after an exponential backoff with a seeded jitter;
- after ``max_retries`` retries, or at once for another 4xx (a bad request is not retried), the request's outcome is
  its reason (``HTTP 503 after 5 retries``, ``timeout after 60 s, 5 retries``): the stage quarantines that row.

Servers differ in what they honour: ``transformers serve`` ignores ``n`` (one sample a request, so the sample index is
a request of its own, which also makes each sample's response a unit that is kept or sent again) and a ``seed`` where
it samples; vLLM honours both. The API key is read from the environment variable the config names, sent as a bearer
token, and never written into an outcome, a log line or an error.
"""
from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from common.platform.errors import EndpointUnreachable

if TYPE_CHECKING:
    from common.models.config import EndpointConfig

log = logging.getLogger(__name__)

# The longest a Retry-After is honoured, and the first backoff step (doubled each retry).
MAX_RETRY_AFTER_S = 120.0
BACKOFF_S = 0.5


@dataclass(frozen=True)
class Request:
    """One completion to ask for: ``prompt`` (the method's few-shot prompt with the source filled in), the sample's
    index among the source's samples, and the stage's seed (the request's own seed is derived from both)."""

    prompt: str
    sample_idx: int
    seed: int

    def request_seed(self) -> int:
        """The seed sent with the request: distinct per sample, the same on every run."""
        return (self.seed * 1_000_003 + self.sample_idx) % 2**31


@dataclass(frozen=True)
class Outcome:
    """What came back for a :class:`Request`: ``text`` (None when it failed) or ``reason``; the response's token
    counts, the seconds from the first try to the answer, and the retries it took."""

    text: Optional[str]
    reason: Optional[str]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0
    # Failed because nothing answered at the URL (refused, reset, the server gone), not for what the server said.
    unreachable: bool = False

    @property
    def ok(self) -> bool:
        return self.text is not None


def share(total: Optional[int], parts: int) -> Optional[int]:
    """``total`` (an endpoint's concurrency or rate) divided among ``parts`` actors, each at least 1 (None stays
    None): the actors together never exceed the total as long as ``parts <= total``."""
    return None if total is None else max(1, total // max(1, parts))


class Secret:
    """An API key in memory: what the driver hands the pool's actors (their environments do not hold the driver's
    variables, and on Databricks only the driver reads secrets). Its repr and str are a fingerprint, never the key,
    so no log line, error, Ray task description or cache key built from it holds the key; :meth:`reveal` gives it
    to the one place that needs it, the Authorization header."""

    def __init__(self, value: str):
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        import hashlib

        return f"Secret(sha256:{hashlib.sha256(self._value.encode()).hexdigest()[:8]})"

    __str__ = __repr__


def api_key(cfg: "EndpointConfig") -> Optional[Secret]:
    """The key ``cfg`` refers to: the environment variable ``cfg.api_key_env`` names, or on Databricks the secret
    ``cfg.api_key_secret`` (``<scope>/<key>``, through ``dbutils.secrets``); None when it names none. Raises
    :class:`EndpointUnreachable` naming the variable or secret, never a value, when it cannot be read."""
    if cfg.api_key_secret:
        scope, name = cfg.api_key_secret.split("/", 1)
        try:
            from pyspark.dbutils import DBUtils  # Databricks runtimes only
            from pyspark.sql import SparkSession

            return Secret(DBUtils(SparkSession.getActiveSession()).secrets.get(scope=scope, key=name))
        except Exception as exc:  # not on Databricks, no such scope or key, no permission
            raise EndpointUnreachable(f"{cfg.base_url}: the API key's Databricks secret {cfg.api_key_secret} could "
                                      f"not be read ({type(exc).__name__})") from None
    if not cfg.api_key_env:
        return None
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise EndpointUnreachable(f"{cfg.base_url}: the API key's variable {cfg.api_key_env} is not set")
    return Secret(key)


def headers(key: Optional[Secret]) -> dict[str, str]:
    """The JSON content type, and with a ``key`` its bearer token: every request's headers (never logged)."""
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key.reveal()}"} if key else {})}


def retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Seconds to wait from a ``Retry-After`` header: a number of seconds or an HTTP date (None when absent or
    unreadable), at most :data:`MAX_RETRY_AFTER_S`."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - (now or time.time())
        except (TypeError, ValueError):
            return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER_S)


class EndpointClient:
    """Sends :class:`Request` s to ``cfg``'s endpoint with sampling ``params`` (``max_tokens``, ``temperature``,
    ``top_p``, ``stop``), at most ``concurrency`` at once and ``requests_per_minute`` a minute (this client's share;
    defaults: the endpoint's own). Use :meth:`run`; counts of requests and retries are in :attr:`stats`."""

    def __init__(self, cfg: "EndpointConfig", params: dict[str, Any], concurrency: Optional[int] = None,
                 requests_per_minute: Optional[int] = None, key: Optional[Secret] = None):
        self.cfg, self.params = cfg, dict(params)
        self.concurrency = concurrency or cfg.max_concurrency
        self.requests_per_minute = requests_per_minute if requests_per_minute is not None else cfg.requests_per_minute
        self._headers = headers(key or api_key(cfg))
        self.stats = {"requests": 0, "retries": 0, "failed": 0}

    def __repr__(self) -> str:  # never the headers: they hold the key
        return f"EndpointClient({self.cfg.base_url!r}, model={self.cfg.model!r}, concurrency={self.concurrency})"

    @property
    def url(self) -> str:
        return self.cfg.base_url.rstrip("/") + ("/chat/completions" if self.cfg.api == "chat" else "/completions")

    def body(self, request: Request) -> dict[str, Any]:
        """The JSON body of ``request``: the model, the prompt (as the user's message for the chat API), the
        sampling parameters and the request's seed."""
        body: dict[str, Any] = {"model": self.cfg.model, "seed": request.request_seed(), **self.params}
        if self.cfg.api == "chat":
            body["messages"] = [{"role": "user", "content": request.prompt}]
        else:
            body["prompt"] = request.prompt
        return body

    def run(self, requests: Sequence[Request], on_done: Optional[Callable[[int, Outcome], None]] = None
            ) -> list[Outcome]:
        """Send every request; returns their outcomes in order (never raises for a request that failed).
        ``on_done(index, outcome)`` is called as each completes (the response log keeps it at once)."""
        return asyncio.run(self._run(list(requests), on_done))

    async def _run(self, requests: list[Request], on_done=None) -> list[Outcome]:
        import aiohttp

        gate = asyncio.Semaphore(self.concurrency)
        interval = 60.0 / self.requests_per_minute if self.requests_per_minute else 0.0
        next_start = [time.monotonic()]
        lock = asyncio.Lock()

        async def paced() -> None:  # request starts at least `interval` apart
            if not interval:
                return
            async with lock:
                wait = next_start[0] - time.monotonic()
                next_start[0] = max(next_start[0], time.monotonic()) + interval
            if wait > 0:
                await asyncio.sleep(wait)

        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=self._headers) as session:
            async def one(index: int, request: Request) -> Outcome:
                async with gate:
                    outcome = await self._send(session, request, paced)
                if on_done is not None:
                    on_done(index, outcome)
                return outcome

            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))

    async def _send(self, session, request: Request, paced) -> Outcome:
        import aiohttp

        rng = random.Random(request.request_seed())
        started, retries, last, gone = time.monotonic(), 0, "", False
        body = json.dumps(self.body(request))
        while True:
            await paced()
            self.stats["requests"] += 1
            wait: Optional[float] = None
            gone = False
            try:
                async with session.post(self.url, data=body) as response:
                    if response.status == 200:
                        return self._outcome(await response.json(content_type=None), started, retries)
                    text = (await response.text())[:200]
                    last = f"HTTP {response.status}"
                    if response.status == 429:
                        wait = retry_after(response.headers.get("Retry-After"))
                    elif response.status < 500 and response.status != 408:
                        return self._failed(f"{last}: {' '.join(text.split())}", started, retries)
            except asyncio.TimeoutError:
                last = f"timeout after {self.cfg.timeout_s:g} s"
            except aiohttp.ClientError as exc:
                last, gone = f"connection error ({type(exc).__name__})", True
            if retries >= self.cfg.max_retries:
                return self._failed(f"{last} after {retries} retries", started, retries, unreachable=gone)
            retries += 1
            self.stats["retries"] += 1
            await asyncio.sleep(wait if wait is not None else BACKOFF_S * 2 ** (retries - 1) * (0.5 + rng.random()))

    def _outcome(self, payload: dict[str, Any], started: float, retries: int) -> Outcome:
        choice = (payload.get("choices") or [{}])[0]
        text = choice.get("message", {}).get("content") if self.cfg.api == "chat" else choice.get("text")
        usage = payload.get("usage") or {}
        if text is None:
            return self._failed("a response with no text", started, retries)
        return Outcome(text=text, reason=None, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                       completion_tokens=int(usage.get("completion_tokens") or 0),
                       latency_s=time.monotonic() - started, retries=retries)

    def _failed(self, reason: str, started: float, retries: int, unreachable: bool = False) -> Outcome:
        self.stats["failed"] += 1
        return Outcome(text=None, reason=reason, latency_s=time.monotonic() - started, retries=retries,
                       unreachable=unreachable)


def check_endpoint(cfg: "EndpointConfig", timeout_s: float = 30.0, complete: bool = True) -> str:
    """Check ``cfg``'s endpoint: it answers and lists the model (``GET <base_url>/models``; a server that lists
    none, such as ``transformers serve`` of a local folder, is taken at its word), and with ``complete`` (``augment
    doctor``) completes one token; a job's start check leaves that out, so a rerun that has every answer sends no
    completion. Returns a line saying so; raises :class:`EndpointUnreachable` naming the URL and what failed, never
    the key."""
    key = api_key(cfg)
    models_url = cfg.base_url.rstrip("/") + "/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(models_url, headers=headers(key)), timeout=timeout_s) as r:
            listed = [m.get("id") for m in json.loads(r.read() or b"{}").get("data", [])]
    except urllib.error.HTTPError as exc:
        raise EndpointUnreachable(f"{models_url} answered HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EndpointUnreachable(f"{models_url} did not answer ({getattr(exc, 'reason', exc)})") from None
    if listed and cfg.model not in listed:
        raise EndpointUnreachable(f"{models_url} does not list the model {cfg.model!r} (it lists "
                                  f"{', '.join(map(str, listed[:10]))})")
    if not complete:
        return f"{cfg.base_url} answers and {'lists' if listed else 'lists no model but may serve'} {cfg.model}"
    client = EndpointClient(cfg, {"max_tokens": 1, "temperature": 0.0}, concurrency=1, key=key)
    done = client.run([Request("Hello", 0, 0)])[0]
    if not done.ok:
        raise EndpointUnreachable(f"{client.url}: a one-token completion failed: {done.reason}")
    return (f"{cfg.base_url} serves {cfg.model} ({'listed' if listed else 'not listed by /models'}; a one-token "
            f"completion in {done.latency_s:.1f} s)")


def served_preflight(*sections: Callable[[Any], Any]) -> Callable[[Any], None]:
    """A job's start check (``job(name, preflight=...)``) of the generator model sections ``sections`` pick from the
    config (``lambda cfg: cfg.cga.model``): each served one's endpoint answers (:func:`check_endpoint`, no
    completion), before any Spark or Ray work; else :class:`EndpointUnreachable` naming the URL."""
    def check(cfg: Any) -> None:
        for section in sections:
            model = section(cfg)
            if model.served:
                log.info("generator: %s", check_endpoint(model.endpoint, timeout_s=model.endpoint.timeout_s,
                                                         complete=False))
    return check


def sampling_params(spec) -> dict[str, Any]:
    """The request parameters of a generation spec (:class:`~common.models.generation.hf_engine.GenerationSpec`):
    ``max_tokens``, ``temperature`` 1 with the spec's ``top_p`` when it samples (0 for beam search, which an
    endpoint does not offer: its greedy answer), and the in-context stop, the line break after a sample
    (:data:`common.models.generation.in_context.STOP`). ``top_k`` is no standard parameter and is not sent."""
    from common.models.generation.in_context import STOP

    sampling = spec.mode == "sample"
    return {"max_tokens": spec.max_new_tokens, "temperature": 1.0 if sampling else 0.0,
            **({"top_p": spec.top_p} if sampling else {}), "stop": [STOP]}


def served_sections(cfg: Any) -> list[tuple[str, "EndpointConfig"]]:
    """(dotted config key, endpoint) of every generator model section of ``cfg`` whose kind is ``endpoint``
    (:func:`common.models.config.model_sections`)."""
    from common.models.config import model_sections

    return [(key, model.endpoint) for key, model in model_sections(cfg) if model.served]


def doctor_check(cfg: Any):
    """``augment doctor``'s endpoint line: each served model the config names answers, lists the model and completes
    one token (:func:`check_endpoint`); required when a section uses one. Never prints a key."""
    from common.platform.doctor import Check

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
        return Check("endpoint", False, "; ".join(failed), "start the server, or fix *.model.endpoint (base_url, "
                     "model, api_key_env)", required=True)
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
