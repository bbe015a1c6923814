"""The loader's manifest (``model.json``, :data:`common.pyfunc.loader.MANIFEST`) of a saved classifier folder: what
each classifier writes beside its files when it is kept, and what the registry and the loader read."""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional


def write_manifest(folder: str, manifest: Mapping[str, Any]) -> None:
    """``manifest`` as the loader's ``model.json`` in ``folder`` (a local path or an object-store URI)."""
    from common.platform.storage import write_text
    from common.pyfunc.loader import MANIFEST

    write_text(f"{str(folder).rstrip('/')}/{MANIFEST}", json.dumps(dict(manifest), indent=1, sort_keys=True))


def read_manifest(folder: str, required: bool = True) -> Optional[dict[str, Any]]:
    """The loader's ``model.json`` of ``folder`` (a local path or an object-store URI). Where it has none: raises
    FileNotFoundError naming the folder, or returns None when not ``required``."""
    from common.platform.storage import exists, read_text
    from common.pyfunc.loader import MANIFEST

    path = f"{str(folder).rstrip('/')}/{MANIFEST}"
    if exists(path):
        return json.loads(read_text(path))
    if required:
        raise FileNotFoundError(f"{folder}: the classifier folder has no {MANIFEST} (its loader manifest)")
    return None
