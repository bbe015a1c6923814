"""A job's report files (Markdown, charts) under ``<lakehouse.root>/reports/<name>``, on a local disk or an object
store.

Jobs write reports into local folders (matplotlib and friends write files). On a local lakehouse that folder is
the report's own; on an object store it is a scratch folder whose files are copied to the store when the job ends,
so that a cluster's driver keeps nothing on its own disk. Reading reports back (the results pages' charts) copies
them from the store into scratch the same way.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from common.platform.storage import exists, filesystem, is_local, list_files, local_copy, put_folder


class Reports:
    """The report folders of one lakehouse root (``root``: a folder or an object-store URI), with the scratch
    folders handed out while a job writes them."""

    def __init__(self, root: str):
        self.root = root
        self._scratch: dict[str, str] = {}  # report name -> local scratch folder (object-store roots)
        self._copies: list[str] = []  # local copies of reports read back from the store

    def uri(self, name: str = "") -> str:
        """Where report ``name`` lives: ``<root>/reports/<name>``; ``""``: the reports' own root (summary.md,
        results/)."""
        return f"{self.root.rstrip('/')}/reports" + (f"/{name}" if name else "")

    def folder(self, name: str) -> str:
        """A local folder for report ``name``'s files: :meth:`uri` itself on a local lakehouse (created), a scratch
        folder that :meth:`publish` copies there on an object store."""
        if is_local(self.root):
            path = Path(self.uri(name))
            path.mkdir(parents=True, exist_ok=True)
            return str(path)
        if name not in self._scratch:
            self._scratch[name] = tempfile.mkdtemp(prefix=f"augment-report-{name or 'root'}-")
        return self._scratch[name]

    def publish(self) -> None:
        """Copy the scratch folders handed out to the object store, then remove them (nothing to do locally)."""
        for name, folder in list(self._scratch.items()):
            put_folder(folder, self.uri(name))
        self.discard()

    def discard(self) -> None:
        """Remove the scratch folders and copies without publishing them (a job that failed, or after
        :meth:`publish`)."""
        for folder in [*self._scratch.values(), *self._copies]:
            shutil.rmtree(folder, ignore_errors=True)
        self._scratch.clear()
        self._copies.clear()

    def names(self) -> list[str]:
        """The names of the report folders written so far (``results`` aside), sorted."""
        base = filesystem(self.uri())[1].rstrip("/") + "/"
        names = {
            info.path[len(base) :].split("/")[0]
            for info in list_files(self.uri())
            if info.path.startswith(base) and "/" in info.path[len(base) :]
        }
        return sorted(names - {"results"})

    def files(self, name: str, suffix: str) -> list[Path]:
        """Local paths of report ``name``'s files ending in ``suffix``: the files themselves on a local lakehouse,
        copies in scratch (removed with :meth:`discard`) from an object store."""
        uri = self.uri(name)
        if is_local(uri):
            folder = Path(uri.removeprefix("file://"))
            return sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []
        if not exists(uri):
            return []
        folder = Path(local_copy(uri))
        self._copies.append(str(folder))
        return sorted(folder.glob(f"*{suffix}"))
