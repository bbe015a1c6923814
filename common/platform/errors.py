"""The errors a job reports as one line, without a traceback: a bad config (:class:`ConfigError`, exit code
2), a bad input (:class:`InputError`, exit code 3) and an object store that does not answer
(:class:`~common.platform.storage.StorageUnreachable`, exit code 4). Anything else is a bug and keeps its
traceback."""
from __future__ import annotations

from common.platform.config_loader import ConfigError
from common.platform.storage import StorageUnreachable


class InputError(ValueError):
    """An input cannot be used as it is; the message names the file or table, the column and, where there
    is one, the row. Domain packages subclass it for their own input checks."""


# (error class, exit code, what the CLI calls it), most specific first. An unreachable object store is the
# operator's to fix (an endpoint, a credential, an outage), not a bug: one line naming the path and the endpoint.
USER_ERRORS = ((ConfigError, 2, "config error"), (InputError, 3, "input error"),
               (StorageUnreachable, 4, "storage unreachable"))


def one_line(text: object, limit: int = 600) -> str:
    """``text`` (or an exception's message) on one line, whitespace runs collapsed, at most ``limit``
    characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
