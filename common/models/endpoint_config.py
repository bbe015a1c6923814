"""Where a served generator is (the ``endpoint`` model kind's ``*.model.endpoint`` section): the config of
:mod:`common.models.generation.served`, kept apart from the models' config so both stay readable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from common.platform.config import check


@dataclass
class EndpointConfig:
    """A model served behind an OpenAI-compatible API (vLLM, SGLang, Databricks Model Serving, Ollama, llama.cpp's
    server, ``transformers serve``, a hosted provider), called by :mod:`common.models.generation.served`. The API
    key is read by reference, never written into the config: ``api_key_env`` names the environment variable."""

    # The API's root, e.g. http://127.0.0.1:8000/v1 (the /v1 included); empty: no endpoint configured.
    base_url: str = ""
    # The served model's name as the server lists it (GET <base_url>/models).
    model: str = ""
    # completions: POST /completions with the prompt as text (the method's few-shot prompt as it is); chat: POST
    # /chat/completions with the prompt as the user's message.
    api: Literal["completions", "chat"] = "completions"
    # The name of the environment variable holding the API key (sent as a bearer token); null: no key.
    api_key_env: Optional[str] = None
    # On Databricks, the key's secret as "<scope>/<key>", read with dbutils.secrets.get on the driver (instead of
    # api_key_env); null: none.
    api_key_secret: Optional[str] = None
    # The most requests in flight at once, over every actor of a stage together.
    max_concurrency: int = 8
    # Seconds one request may take before it counts as timed out (and is retried).
    timeout_s: float = 60.0
    # Retries of a request refused with 429 (after its Retry-After), a 5xx or a timeout; then it is quarantined
    # with its reason.
    max_retries: int = 5
    # The most requests started per minute, over every actor of a stage together (null: no limit).
    requests_per_minute: Optional[int] = None
    # The breaker (per endpoint, per worker): this many server-side failures in a row (refused or reset
    # connections, timeouts, 5xx, 401/403/404, a 200 that is not JSON) with no answer between them make the endpoint
    # down: every request waiting in that worker fails at once, none is sent, and the stage ends with exit code 6.
    breaker_failures: int = 8
    # ... or two or more such failures in a row spanning this many seconds (a slow trickle of failures, a hung
    # server's timeouts): the breaker opens, and closes again for one try after as long.
    breaker_s: float = 30.0
    # The share of a stage's requests that may end in a server-side failure (after their retries) and be
    # quarantined; beyond it the stage fails with exit code 6 instead of committing a version (the rerun sends
    # only what has no answer). Failures of one prompt (another 4xx, a response with no text) are quarantined
    # whatever their share.
    max_failed_share: float = 0.01
    # The longest wait a 429's Retry-After (seconds, an HTTP date or retry-after-ms) is honoured for.
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        check(
            not self.base_url or self.base_url.startswith(("http://", "https://")),
            "*.base_url",
            f"must be an http(s) URL, not {self.base_url!r}",
        )
        check(not self.base_url or bool(self.model), "*.model", "names the served model when base_url is set")
        check(self.max_concurrency >= 1, "*.max_concurrency", "must be >= 1")
        check(self.timeout_s > 0, "*.timeout_s", "must be above 0")
        check(self.max_retries >= 0, "*.max_retries", "must be >= 0")
        check(self.breaker_failures >= 1, "*.breaker_failures", "must be >= 1")
        check(self.breaker_s > 0, "*.breaker_s", "must be above 0")
        check(0 <= self.max_failed_share < 1, "*.max_failed_share", "must be in [0, 1)")
        check(self.max_retry_after_s > 0, "*.max_retry_after_s", "must be above 0")
        check(
            self.requests_per_minute is None or self.requests_per_minute >= 1,
            "*.requests_per_minute",
            "must be >= 1 (null: no limit)",
        )
        check(
            self.api_key_env is None
            or (bool(self.api_key_env) and "=" not in self.api_key_env and " " not in self.api_key_env),
            "*.api_key_env",
            "names an environment variable (the key itself never goes in a config)",
        )
        check(
            self.api_key_secret is None or (self.api_key_secret.count("/") == 1 and " " not in self.api_key_secret),
            "*.api_key_secret",
            "is <scope>/<key> of a Databricks secret (the key itself never goes in a config)",
        )
        check(
            not (self.api_key_env and self.api_key_secret),
            "*.api_key_secret",
            "set api_key_env or api_key_secret, not both",
        )
