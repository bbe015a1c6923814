"""A client for a model served behind an OpenAI-compatible API (:class:`~common.models.config.EndpointConfig`): the
engine a generative stage calls when the model is a user's server rather than weights loaded here.

One :class:`EndpointClient` sends a batch of :class:`Request` s (a prompt, its sample index, the stage's seed) with
at most ``concurrency`` in flight and at most ``requests_per_minute`` started a minute, over one aiohttp session; a
stage's workers share the endpoint's ``max_concurrency`` and rate by dividing them
(:func:`~common.models.generation.served.health.share`). Each request comes back as an :class:`Outcome`: the text
with the response's ``usage`` and the latency, or the reason it failed, and whether the fault was the server's.

- HTTP 429 pauses every request of this worker to the endpoint for what ``Retry-After`` (seconds or an HTTP date) or
  ``retry-after-ms`` says (else the backoff), at most ``max_retry_after_s``, then retries (a 429 is no failure and
  uses none of ``max_retries``; 429s alone for three times that cap open the breaker; ``insufficient_quota`` is the
  endpoint's refusal);
- a server-side failure (5xx, 408, a timeout, a refused or reset connection, a 200 whose body is no JSON) retries
  after an exponential backoff with a seeded jitter, up to ``max_retries`` times; 401, 403 and 404 (the key, the URL
  or the model is wrong: no retry helps) fail at once; all of them count towards the endpoint's breaker
  (:mod:`~common.models.generation.served.health`);
- a refusal of that one prompt (another 4xx) or a 200 with no text fails at once, as the prompt's fault;
- when the breaker opens, every request still waiting (for a slot, a backoff, a pause) ends at once as not sent, and
  nothing new is sent; the requests in flight end with their try (``timeout_s`` at most).

Servers differ in what they honour: ``transformers serve`` ignores ``n`` (one sample a request, so the sample index is
a request of its own, which also makes each sample's response a unit that is kept or sent again) and a ``seed`` where
it samples; vLLM honours both. The waits, and which statuses are retried, are the retry policy's
(:mod:`~common.models.generation.served.retry`). The API key (:mod:`~common.models.generation.served.auth`) is read
from the environment variable the config names, sent as a bearer token, and never written into an outcome, a log line
or an error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from common.models.generation.served.auth import Secret, api_key, headers
from common.models.generation.served.health import health_of
from common.models.generation.served.retry import ENDPOINT_REFUSALS, backoff, retry_after

if TYPE_CHECKING:
    from common.models.config import EndpointConfig

log = logging.getLogger(__name__)


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
    counts, the seconds from the first try to the answer, and the retries it took. ``server``: it failed for the
    server's fault (counted against ``max_failed_share``), not the prompt's; ``sent`` False: the breaker was open
    and it never left the worker."""

    text: Optional[str]
    reason: Optional[str]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0
    server: bool = False
    sent: bool = True

    @property
    def ok(self) -> bool:
        return self.text is not None


class _BreakerOpen(Exception):
    """Raised inside a run when the endpoint's breaker opened while a request waited."""


class EndpointClient:
    """Sends :class:`Request` s to ``cfg``'s endpoint with sampling ``params`` (``max_tokens``, ``temperature``,
    ``top_p``, ``stop``), at most ``concurrency`` at once and ``requests_per_minute`` a minute (this worker's share;
    defaults: the endpoint's own), reporting to the endpoint's breaker of ``scope`` (the stage run's tag). Use
    :meth:`run`; counts of requests and retries are in :attr:`stats`."""

    def __init__(
        self,
        cfg: "EndpointConfig",
        params: dict[str, Any],
        concurrency: Optional[int] = None,
        requests_per_minute: Optional[float] = None,
        key: Optional[Secret] = None,
        scope: str = "",
    ):
        self.cfg, self.params = cfg, dict(params)
        self.concurrency = concurrency or cfg.max_concurrency
        self.requests_per_minute = requests_per_minute if requests_per_minute is not None else cfg.requests_per_minute
        self._headers = headers(key or api_key(cfg))
        self.health = health_of(cfg, scope)
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

    def run(
        self,
        requests: Sequence[Request],
        on_done: Optional[Callable[[int, Outcome], None]] = None,
        tick: Optional[Callable[[], None]] = None,
        tick_s: float = 10.0,
    ) -> list[Outcome]:
        """Send every request; returns their outcomes in order (never raises for a request that failed; a request
        the open breaker kept from being sent is an outcome with ``sent`` False). ``on_done(index, outcome)`` is
        called as each completes (the response log keeps it at once), ``tick()`` every ``tick_s`` seconds while
        requests are out (the log writes what it holds); an error of either is logged, never the run's end."""
        return asyncio.run(self._run(list(requests), on_done, tick, tick_s))

    async def _run(self, requests: list[Request], on_done=None, tick=None, tick_s: float = 10.0) -> list[Outcome]:
        import aiohttp

        loop = asyncio.get_running_loop()

        async def ticking() -> None:
            while True:
                await asyncio.sleep(tick_s)
                await loop.run_in_executor(None, _safely, tick)

        gate = asyncio.Semaphore(self.concurrency)
        opened = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_s)
        connector = aiohttp.TCPConnector(limit=self.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=self._headers) as session:

            async def one(index: int, request: Request) -> Outcome:
                started = time.monotonic()
                try:
                    async with gate:
                        outcome = await self._send(session, request, opened, started)
                except _BreakerOpen:
                    outcome = self._unsent(started)
                if on_done is not None:  # (a log write off the event loop: a slow put stalls no other request)
                    await loop.run_in_executor(None, _safely, on_done, index, outcome)
                return outcome

            ticker = asyncio.ensure_future(ticking()) if tick is not None else None
            try:
                return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(requests))))
            finally:
                if ticker is not None:
                    ticker.cancel()

    async def _wait(self, seconds: float, opened: asyncio.Event) -> None:
        """Sleep ``seconds``, or raise :class:`_BreakerOpen` as soon as the breaker opens."""
        if opened.is_set():
            raise _BreakerOpen
        if seconds <= 0:
            return
        try:
            await asyncio.wait_for(opened.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            return
        raise _BreakerOpen

    async def _send(self, session, request: Request, opened: asyncio.Event, started: float) -> Outcome:
        rng = random.Random(request.request_seed())
        retries = throttles = 0
        body = json.dumps(self.body(request))
        while True:
            if self.health.blocked() is not None:
                opened.set()
            await self._wait(self.health.paused_for(), opened)  # a 429 pauses every request to the endpoint
            await self._wait(self.health.start_delay(self.requests_per_minute), opened)
            self.stats["requests"] += 1
            kind, result, wait = await self._try(session, body, started, retries + throttles)
            if kind == "ok":
                self.health.answered()
                return result
            if kind == "prompt":  # the server answered: that prompt is refused or empty
                if self.health.refused(result, request.prompt):  # ... or every prompt is: the endpoint's fault
                    opened.set()
                return self._failed(result, started, retries + throttles, server=False)
            if kind == "throttled":  # not a failure: wait as asked (jittered, so the waiters do not wake as one)
                self.health.pause(wait if wait is not None else backoff(rng, throttles + 1))
                throttles += 1
                self.stats["retries"] += 1
                if self.health.throttled():
                    opened.set()
                await self._wait(self.health.paused_for() * (1 + 0.1 * rng.random()), opened)
                continue
            if self.health.failed(result):
                opened.set()
            if kind == "refused" or retries >= self.cfg.max_retries:
                return self._failed(
                    result if kind == "refused" else f"{result} after {retries} retries",
                    started,
                    retries + throttles,
                    server=True,
                )
            retries += 1
            self.stats["retries"] += 1
            await self._wait(backoff(rng, retries), opened)

    async def _try(self, session, body: str, started: float, retries: int) -> tuple[str, Any, Optional[float]]:
        """One try: ("ok", the outcome), ("prompt", why that prompt failed), ("throttled", "HTTP 429", the wait it
        asked for), ("refused", why the endpoint refused) or ("server", what failed)."""
        import aiohttp

        try:
            async with session.post(self.url, data=body) as response:
                raw = await response.read()
                status = response.status
                if status == 200:
                    return self._answer(raw, started, retries)
                last = f"HTTP {status}"
                text = " ".join(raw[:200].decode("utf-8", "replace").split())
                if status == 429 and "insufficient_quota" in text:  # no wait brings a spent quota back
                    return "refused", f"{last}: {text}", None
                if status == 429:
                    return "throttled", last, retry_after(response.headers, self.cfg.max_retry_after_s)
                if status in ENDPOINT_REFUSALS:
                    return "refused", f"{last}: {text}", None
                if status < 500 and status != 408:
                    return "prompt", f"{last}: {text}", None
                return "server", last, None
        except asyncio.TimeoutError:
            return "server", f"timeout after {self.cfg.timeout_s:g} s", None
        except aiohttp.ClientError as exc:
            return "server", f"connection error ({type(exc).__name__})", None

    def _answer(self, raw: bytes, started: float, retries: int) -> tuple[str, Any, Optional[float]]:
        """A 200's body read as a completion: ("ok", its outcome); ("server", why) when the body is empty or no JSON
        (a proxy's HTML page: the server did not answer); ("prompt", why) when it is JSON without a text."""
        try:
            payload = json.loads(raw) if raw.strip() else None
        except ValueError:
            payload = None
        if not isinstance(payload, dict):
            shown = " ".join(raw[:60].decode("utf-8", "replace").split()) or "empty"
            return "server", f"HTTP 200 with a body that is no JSON object ({shown})", None
        if payload.get("error") and not payload.get("choices"):  # some gateways wrap an upstream error in a 200
            return "server", f"HTTP 200 with an error: {' '.join(str(payload['error']).split())[:150]}", None
        choices = payload.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = message.get("content") if self.cfg.api == "chat" else choice.get("text")
        if not isinstance(text, str):
            return "prompt", "a response with no text", None
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else {}
        return (
            "ok",
            Outcome(
                text=text,
                reason=None,
                prompt_tokens=_count(usage.get("prompt_tokens")),
                completion_tokens=_count(usage.get("completion_tokens")),
                latency_s=time.monotonic() - started,
                retries=retries,
            ),
            None,
        )

    def _failed(self, reason: str, started: float, retries: int, server: bool) -> Outcome:
        self.stats["failed"] += 1
        return Outcome(text=None, reason=reason, latency_s=time.monotonic() - started, retries=retries, server=server)

    def _unsent(self, started: float) -> Outcome:
        return Outcome(
            text=None,
            reason=f"not sent: the endpoint's breaker is open ({self.health.reason})",
            latency_s=time.monotonic() - started,
            server=True,
            sent=False,
        )


def _safely(call: Callable[..., None], *args: Any) -> None:
    """``call(*args)``, an error logged instead of raised: a callback that fails (a log part that cannot be written
    now) must not cancel the requests in flight, whose answers are paid for."""
    try:
        call(*args)
    except Exception as exc:
        log.warning(
            "%s failed (%s: %s); the requests go on",
            getattr(call, "__name__", "a callback"),
            type(exc).__name__,
            " ".join(str(exc).split())[:200],
        )


def _count(value: Any) -> int:
    """A usage count as an int (0 when absent or not a number)."""
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def sampling_params(spec) -> dict[str, Any]:
    """The request parameters of a generation spec
    (:class:`~common.models.generation.engines.hf_engine.GenerationSpec`):
    ``max_tokens``, ``temperature`` 1 with the spec's ``top_p`` when it samples (0 for beam search, which an
    endpoint does not offer: its greedy answer), and the in-context stop, the line break after a sample
    (:data:`common.models.generation.formats.STOP`). ``top_k`` is no standard parameter and is not sent."""
    from common.models.generation.formats import STOP

    sampling = spec.mode == "sample"
    return {
        "max_tokens": spec.max_new_tokens,
        "temperature": 1.0 if sampling else 0.0,
        **({"top_p": spec.top_p} if sampling else {}),
        "stop": [STOP],
    }
