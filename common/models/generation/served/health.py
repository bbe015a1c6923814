"""An endpoint's health as one worker sees it: the breaker that turns a run of server-side failures into an outage,
the pause a 429 sets for every request, and the pace of the worker's share of ``requests_per_minute``.

An outage is a state of the endpoint, not of each request. Every request a worker sends to one endpoint reports to
that endpoint's :class:`Health` (one per endpoint per process and stage run, :func:`health_of`): an answer closes
the run of failures; a server-side failure (refused or reset connection, timeout, 5xx, 401/403/404, a 200 that is no
JSON) lengthens it. ``breaker_failures`` of them in a row, or three or more spanning ``breaker_s`` seconds, open the
breaker (so do ``breaker_failures`` different prompts refused before any answer, and 429s alone for longer than
three times ``max_retry_after_s``): the client then sends nothing more, fails every request still waiting as not
sent, and the batch raises :class:`~common.platform.errors.EndpointUnreachable`. The time that takes depends on the
retry backoff, the concurrency and the request timeout, never on how many requests are pending. After
``breaker_s`` open, the breaker lets requests try again, and one more failure opens it again (a long-lived worker
recovers when the server does).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from common.models.endpoint_config import EndpointConfig


class Health:
    """The breaker and the 429 pause of one endpoint in this process, with three runs that open the breaker (it then
    stays open ``window_s``):

    - server-side failures in a row: ``failures`` of them, or three or more spanning ``window_s`` seconds;
    - ``failures`` different prompts refused (a 4xx, a 200 with no text) before the stage run's first answer: the
      request's parameters or the model are wrong for this server, not the prompts;
    - 429s with no answer between them for longer than ``throttle_s`` (a spent quota answers 429 for ever).

    An answer ends every run; a 429 ends the run of failures (the server is up). Thread-safe: a process may run
    several clients."""

    def __init__(self, failures: int, window_s: float, throttle_s: float = 120.0):
        self.failures, self.window_s, self.throttle_s = failures, window_s, throttle_s
        self._lock = threading.Lock()
        self._run = 0  # server-side failures in a row
        self._first = 0.0  # when the run began (monotonic)
        self._refused_prompts: set[str] = set()  # prompts refused before any answer
        self._answered_once = False
        self._throttled: Optional[float] = None  # when the run of 429s began
        self._opened: Optional[float] = None
        self.reason = ""  # why the breaker opened, for the batch's error
        self._pause_until = 0.0
        self._next_start = 0.0

    def blocked(self) -> Optional[str]:
        """Why nothing may be sent now (the breaker is open), or None. An open breaker older than ``window_s``
        closes with its run one short of opening again: one more failure re-opens it at once."""
        with self._lock:
            if self._opened is None:
                return None
            if time.monotonic() - self._opened < self.window_s:
                return self.reason
            self._opened, self._run, self._first = None, self.failures - 1, time.monotonic()
            return None

    def answered(self) -> None:
        """The endpoint answered with a text: every run ends."""
        with self._lock:
            self._run, self._throttled, self._answered_once = 0, None, True

    def _open(self, reason: str) -> bool:
        if self._opened is None:
            self._opened, self.reason = time.monotonic(), reason
        return True

    def vouched(self) -> None:
        """The endpoint answered this stage's requests before (answers found in the log): refusals are the prompts'."""
        with self._lock:
            self._answered_once = True

    def refused(self, reason: str, prompt: str) -> bool:
        """The endpoint refused ``prompt`` (``reason``); True when the breaker is open: ``failures`` distinct prompts
        refused while this stage run has had no answer at all (the endpoint takes none of them: its parameters or
        model are wrong for this server). Once anything was answered, refusals are the prompts' own: an over-long
        source with many samples, or a rerun's batch of the refused ones, never opens it."""
        with self._lock:
            self._run, self._throttled = 0, None
            if not self._answered_once:
                self._refused_prompts.add(prompt)
                if len(self._refused_prompts) >= self.failures:
                    return self._open(
                        f"{len(self._refused_prompts)} different prompts refused and none answered "
                        f"(the request's parameters or the model are wrong for this server), the last: "
                        f"{reason}"
                    )
            return self._opened is not None

    def throttled(self) -> bool:
        """A 429: the server is up (the run of failures ends); True when the breaker is open (429s only, for longer
        than ``throttle_s``)."""
        with self._lock:
            now = time.monotonic()
            self._run = 0
            self._throttled = now if self._throttled is None else self._throttled
            if now - self._throttled > self.throttle_s:
                return self._open(
                    f"HTTP 429 to every request for {now - self._throttled:.0f} s with no answer (a spent quota?)"
                )
            return self._opened is not None

    def failed(self, reason: str) -> bool:
        """A server-side failure (``reason``); True when the breaker is open."""
        with self._lock:
            now = time.monotonic()
            if self._run == 0:
                self._first = now
            self._run += 1
            span = now - self._first
            if self._run >= self.failures or (self._run >= 3 and span >= self.window_s):
                return self._open(
                    f"{self._run} server-side failures in a row over {span:.1f} s with no answer "
                    f"between them, the last: {reason}"
                )
            return self._opened is not None

    def pause(self, seconds: float) -> None:
        """A 429 asked every request to wait ``seconds``."""
        with self._lock:
            self._pause_until = max(self._pause_until, time.monotonic() + seconds)

    def start_delay(self, per_minute: Optional[float]) -> float:
        """Seconds the next request must wait so that this worker starts at most ``per_minute`` a minute (its share
        of the endpoint's ``requests_per_minute``; None: no limit), its start reserved. Kept across batches and
        clients: a worker running several generators of one endpoint shares one pace."""
        if not per_minute:
            return 0.0
        with self._lock:
            now = time.monotonic()
            wait = max(0.0, self._next_start - now)
            self._next_start = max(self._next_start, now) + 60.0 / per_minute
            return wait

    def paused_for(self) -> float:
        """Seconds still to wait before any request may start (0: none)."""
        with self._lock:
            return max(0.0, self._pause_until - time.monotonic())


_HEALTH: dict[tuple, Health] = {}
_HEALTH_LOCK = threading.Lock()


def health_of(cfg: "EndpointConfig", scope: str = "") -> Health:
    """This process's :class:`Health` of the endpoint ``cfg`` names (its URL and model) for ``scope`` (a stage run's
    tag: a warm worker that served an earlier stage starts the next one with a closed breaker), made on first use
    with the config's breaker settings."""
    key = (cfg.base_url.rstrip("/"), cfg.model, cfg.breaker_failures, cfg.breaker_s, cfg.max_retry_after_s, scope)
    with _HEALTH_LOCK:
        if key not in _HEALTH:
            # 429s alone for three times the longest wait a 429 may ask: a throttled server that asks for the cap
            # twice is busy, not gone.
            _HEALTH[key] = Health(cfg.breaker_failures, cfg.breaker_s, 3 * cfg.max_retry_after_s)
        return _HEALTH[key]


def share(total: Optional[int], parts: int) -> Optional[int]:
    """``total`` (an endpoint's concurrency) divided among ``parts`` workers, each at least 1 (None stays None): the
    workers together never exceed the total as long as ``parts <= total`` (the pools cap their actors so)."""
    return None if total is None else max(1, total // max(1, parts))


def rate_share(total: Optional[float], parts: int) -> Optional[float]:
    """``total`` requests a minute divided among ``parts`` workers, as a fraction (None stays None): one request a
    minute over two workers is one each two minutes, so the workers together never start more than ``total``."""
    return None if total is None else total / max(1, parts)
