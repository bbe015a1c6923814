"""The API key of a served model's endpoint (:class:`~common.models.config.EndpointConfig`): read on the driver from
the environment variable or the Databricks secret the config names (:func:`api_key`), held as a :class:`Secret` whose
repr is a fingerprint (never the key) while it travels to the pool's workers, and sent only as the bearer token of
the requests' headers (:func:`headers`).
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING, Optional

from common.platform.errors import EndpointUnreachable

if TYPE_CHECKING:
    from common.models.config import EndpointConfig


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
            raise EndpointUnreachable(
                f"{cfg.base_url}: the API key's Databricks secret {cfg.api_key_secret} could "
                f"not be read ({type(exc).__name__})"
            ) from None
    if not cfg.api_key_env:
        return None
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise EndpointUnreachable(f"{cfg.base_url}: the API key's variable {cfg.api_key_env} is not set")
    return Secret(key)


def headers(key: Optional[Secret]) -> dict[str, str]:
    """The JSON content type, and with a ``key`` its bearer token: every request's headers (never logged)."""
    return {"Content-Type": "application/json", **({"Authorization": f"Bearer {key.reveal()}"} if key else {})}
