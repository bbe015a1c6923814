"""The reading of a served model's response log (:mod:`common.models.generation.served.log`): the answers every
earlier run kept, indexed by request key (:class:`AnswerIndex`), read once per worker and stage run from the log's
Parquet parts; a part that cannot be read is reported, naming it, and its requests are sent again.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from common.models.generation.served.client import Outcome

log = logging.getLogger(__name__)


def _parts(root: str) -> list[str]:
    """The Parquet parts under ``root`` (any depth), as URIs of its store, oldest name first."""
    from common.platform.storage import list_files

    prefix = root.split("://", 1)[0] + "://" if "://" in root else ""
    paths = sorted(
        f.path
        for f in list_files(root)
        if f.path.endswith(".parquet") and not posixpath.basename(f.path).startswith(".")
    )
    return [prefix + p if prefix and "://" not in p else p for p in paths]


_SHARED: "OrderedDict[tuple, AnswerIndex]" = OrderedDict()
_SHARED_LOCK = threading.Lock()


class AnswerIndex:
    """Every answer kept in the log at ``root`` (and the folders :meth:`include` adds), by request key: read once per
    worker and stage run (the first time it is asked), then kept up to date with the answers this worker's log
    writes (only once they are written: a batch Ray runs again here finds them, and nothing unwritten passes for
    kept). A part that cannot be read is reported and skipped: its requests are sent again."""

    def __init__(self, root: str):
        self.roots = [root]
        self._found: Optional[dict[str, tuple[str, int, int]]] = None
        self._lock = threading.Lock()
        self.unreadable: list[str] = []

    @staticmethod
    def shared(root: str, tag: str) -> "AnswerIndex":
        """This process's index of the role's log at ``root`` for the stage run ``tag``: the generators of one role
        in a routed worker read it once between them; the next stage run reads it afresh (other workers wrote
        since). The most recently used 8 are kept."""
        key = (root, tag)
        with _SHARED_LOCK:
            if key in _SHARED:
                _SHARED.move_to_end(key)
            else:
                while len(_SHARED) >= 8:
                    _SHARED.popitem(last=False)
                _SHARED[key] = AnswerIndex(root)
            return _SHARED[key]

    def include(self, root: str) -> "AnswerIndex":
        """Read ``root`` too (a generator folder's own log of an earlier release); returns the index."""
        with self._lock:
            if root not in self.roots:
                self.roots.append(root)
                if self._found is not None:
                    self._read(root, self._found)
        return self

    def _read(self, root: str, found: dict[str, tuple[str, int, int]]) -> None:
        import pyarrow.parquet as pq

        from common.platform.storage import filesystem

        for part in _parts(root):
            fs, path = filesystem(part)
            try:
                table = pq.read_table(
                    path, filesystem=fs, columns=["key", "text", "prompt_tokens", "completion_tokens"]
                )
            except Exception as exc:  # a torn or foreign file: report it, send its requests again
                self.unreadable.append(part)
                log.warning(
                    "response log part %s cannot be read (%s): its requests are sent again",
                    part,
                    " ".join(str(exc).split())[:200],
                )
                continue
            for key, text, prompt, completion in zip(*(table.column(c).to_pylist() for c in table.column_names)):
                if key is not None and text is not None and key not in found:
                    found[key] = (text, prompt or 0, completion or 0)

    def _index(self) -> dict[str, tuple[str, int, int]]:
        with self._lock:
            if self._found is None:
                found: dict[str, tuple[str, int, int]] = {}
                for root in self.roots:
                    self._read(root, found)
                self._found = found
            return self._found

    def get(self, key: str) -> Optional["Outcome"]:
        """The kept answer of the request ``key`` (a request answered twice keeps its first answer), or None."""
        from common.models.generation.served.client import Outcome

        hit = self._index().get(key)
        return (
            None if hit is None else Outcome(text=hit[0], reason=None, prompt_tokens=hit[1], completion_tokens=hit[2])
        )

    def written(self, key: str, text: str, prompt_tokens: int, completion_tokens: int) -> None:
        """An answer the log has just written."""
        index = self._index()
        with self._lock:
            index.setdefault(key, (text, prompt_tokens, completion_tokens))
