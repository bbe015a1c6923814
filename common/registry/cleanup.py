"""Kept classifier folders the registry holds: what ``augment run maintain`` removes.

A shipping job keeps each method's seed-0 classifier under ``<lakehouse>/models/`` until it is registered: the
registered version is a copy of its files in MLflow's artifact store, tagged with the folder it came from
(:data:`~common.registry.naming.FOLDER_TAG`). After that the folder serves nothing (a rerun of the same config
returns early; a new config trains anew) and holds encoders twice. A folder is removed only when a registered version
names it and no unfinished shipping ledger does; every other folder under ``models/`` (generators, surrogates, topic
models: the caches a rerun reuses; classifiers not yet shipped) is left, and a registry that does not answer leaves
them all.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from common.registry.naming import FOLDER_TAG

if TYPE_CHECKING:
    from common.platform.runner.job_context import JobContext

log = logging.getLogger(__name__)

ShippedModels = Literal["remove", "list", "keep"]


def shipped_folders(root: str, client) -> list[tuple[str, str]]:
    """(folder, ``<registered name> v<version>``) for each folder directly under ``<root>/models`` that a READY
    registered version of the registry ``client`` names in its :data:`FOLDER_TAG` (checked on the version itself,
    whatever the registry's search matched), that no unfinished ledger entry names and that no writer is writing
    (its ``_WRITING`` mark). The registry is asked once per folder without the client's retries; the first question
    it does not answer ends the listing with what was found before it (logged): nothing is removed on a guess."""
    import pyarrow.fs as pafs

    from common.platform.storage import filesystem, folder_state
    from common.platform.tracking.status import quick_mlflow

    base = f"{root.rstrip('/')}/models"
    fs, path = filesystem(base)
    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return []
    waiting = _unfinished(base)
    found = []
    with quick_mlflow(10.0):  # a registry that is down found at the first folder
        for info in sorted(fs.get_file_info(pafs.FileSelector(path)), key=lambda i: i.base_name):
            folder = f"{base}/{info.base_name}"
            if (
                info.type != pafs.FileType.Directory
                or info.base_name == "shipping"
                or folder in waiting
                or "'" in folder
                or folder_state(folder) == "incomplete"
            ):
                continue
            try:
                versions = client.search_model_versions(f"tags.`{FOLDER_TAG}` = '{folder}'")
            except Exception as exc:  # the registry down or refusing: this folder and the rest stay
                log.warning(
                    "shipped classifier folders: the registry did not answer (%s); %s and the folders after it kept",
                    str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                    folder,
                )
                break
            shipped = [v for v in versions if v.tags.get(FOLDER_TAG) == folder and v.status == "READY"]
            if shipped:
                found.append((folder, f"{shipped[0].name} v{shipped[0].version}"))
    return found


def _unfinished(base: str) -> set[str]:
    """The classifier folders that entries not done of any job's ledger under ``<base>/shipping`` name; a ledger
    that cannot be read keeps every folder (the caller then removes nothing)."""
    from common.platform.storage import list_files
    from common.registry import ledger

    folders: set[str] = set()
    for info in list_files(f"{base}/shipping"):
        if info.base_name.endswith(".json"):
            uri = f"{base}/shipping/{info.path.rsplit('/shipping/', 1)[1]}"
            try:
                folders |= {e.candidate.folder for e in ledger.load(uri) if not e.done}
            except FileNotFoundError:  # finished and removed meanwhile
                continue
            except (ValueError, OSError) as exc:  # no ledger, or the store would not hand it: keep everything
                raise RuntimeError(f"shipped classifier folders kept: {exc}") from exc
    return folders


def clean_shipped(ctx: "JobContext", mode: ShippedModels) -> list[str]:
    """Remove (``remove``) or only list (``list``) the kept classifier folders of ``ctx``'s lakehouse that are
    registered (:func:`shipped_folders`); ``keep`` does nothing. Returns one line per folder."""
    from common.platform.storage import exists, remove_tree
    from common.registry.store import registry_client

    if mode == "keep":
        return []
    try:
        shipped = shipped_folders(ctx.cfg.lakehouse.root, registry_client(ctx))
    except RuntimeError as exc:  # a ledger that cannot be read: nothing is removed
        log.warning("%s", exc)
        return [str(exc)]
    lines = []
    for folder, version in shipped:
        if mode == "list":
            lines.append(f"would remove {folder} (registered as {version})")
            continue
        remove_tree(folder)  # logs what it could not remove
        done = not exists(folder)
        lines.append(f"{'removed' if done else 'could not remove'} {folder} (registered as {version})")
    return lines
