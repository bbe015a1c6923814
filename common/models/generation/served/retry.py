"""The retry policy of a served model's client (:class:`~common.models.generation.served.client.EndpointClient`):
which answers say the endpoint itself is wrong (:data:`ENDPOINT_REFUSALS`: no retry helps), how long a 429 asks to
wait (:func:`retry_after`: ``retry-after-ms``, else ``Retry-After`` as seconds or an HTTP date, capped), and the
exponential backoff with a seeded jitter between the retries of a server-side failure (:func:`backoff`).
"""

from __future__ import annotations

import email.utils
import random
import time
from typing import Any, Optional

# The first backoff step (doubled each retry).
BACKOFF_S = 0.5
# Statuses that say the endpoint, not the prompt, is wrong: the key, the URL, the model (not retried).
ENDPOINT_REFUSALS = (401, 403, 404)


def retry_after(response_headers: Any, limit: float = 120.0, now: Optional[float] = None) -> Optional[float]:
    """Seconds a 429 asks to wait, from ``response_headers`` (a mapping, or the ``Retry-After`` value alone):
    ``retry-after-ms`` (milliseconds, as OpenAI's and Azure's gateways send), else ``Retry-After`` as seconds or an
    HTTP date; None when absent or unreadable; at most ``limit``."""
    if response_headers is None or isinstance(response_headers, str):
        value, millis = response_headers, None
    else:
        value, millis = response_headers.get("Retry-After"), response_headers.get("retry-after-ms")
    seconds: Optional[float] = None
    if millis:
        try:
            seconds = float(millis) / 1000.0
        except ValueError:
            seconds = None
    if seconds is None and value:
        try:
            seconds = float(value)
        except ValueError:
            try:
                seconds = email.utils.parsedate_to_datetime(value).timestamp() - (now or time.time())
            except (TypeError, ValueError):
                return None
    return None if seconds is None else min(max(0.0, seconds), limit)


def backoff(rng: random.Random, retry: int) -> float:
    """The wait before retry number ``retry`` (1 first): :data:`BACKOFF_S` doubled each retry, times a jitter in
    [0.5, 1.5) drawn from ``rng`` (the request's seeded generator, so the waits are the same on every run)."""
    return BACKOFF_S * 2 ** (retry - 1) * (0.5 + rng.random())
