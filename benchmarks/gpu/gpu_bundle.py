"""What both halves of the GPU replay share (``gpu_stage.py`` records a pipeline's stages on this machine,
``gpu_box.py`` runs them on the GPU box): the bundle folder and the JSON form of a classifier job's sources. Its own
module so that the two halves import it and not each other."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

SOURCES = ("train", "predict", "test")  # a classifier job's (files, filters) lists


def _local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


class Bundle:
    """The bundle folder: per stage a ``request.json``, the input files it names (``files/``, relative paths)
    and the GPU's outputs (``results/``)."""

    def __init__(self, root: str):
        self.root = Path(root)

    def stage(self, name: str) -> Path:
        return self.root / name

    def results(self, name: str) -> list[Path]:
        folder = self.stage(name) / "results"
        return sorted(p for p in folder.iterdir() if p.suffix in (".parquet", ".json")) if folder.is_dir() else []

    def copy_files(self, name: str, uris, copied: dict) -> list[str]:
        """Copy each of ``uris`` into the stage's ``files/`` once; returns their paths relative to the stage."""
        out = []
        for uri in uris:
            if uri not in copied:
                target = self.stage(name) / "files" / f"{len(copied):05d}.parquet"
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(_local(uri), target)
                copied[uri] = str(target.relative_to(self.stage(name)))
            out.append(copied[uri])
        return out

    def write_request(self, name: str, request: dict) -> None:
        path = self.stage(name) / "request.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(request, indent=1, default=str))

    def request(self, name: str) -> dict:
        return json.loads((self.stage(name) / "request.json").read_text())


def _filters(value):
    """pyarrow filters back from JSON (tuples became lists)."""
    return [tuple(f) for f in value] if value else None


def _sources(stage: Path, sources) -> list:
    return [([str(stage / f) for f in files], _filters(filters)) for files, filters in sources]
