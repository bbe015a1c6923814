"""The two artifacts on the same rows: the shipped candidate's classifier and the champion's, each scored by the
registered model's own loader (:mod:`common.pyfunc.loader`), on the candidate's fixed test table versions, as
:data:`~common.registry.gate.Cells` (counts of each distinct outcome: what the gate's paired bootstrap needs, and
all that reaches the driver).

A :data:`Compare` is built from the candidate's ``scoring`` (JSON, so a later run that finishes an interrupted ship
can build it again): :func:`task_compare` for the classifiers evaluated in Ray tasks (one task loads both models
once and reads the rows from the Delta version's files), or the job's own (:data:`CompareOf`: the consistency
pipeline's HFT scored in Spark on its accuracy test and title pairs). :func:`champion_cells` fetches the
champion's files from the registry, copies them where the workers read (the lakehouse's models), runs the compare
and removes the copy.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from common.evaluation.cells import Cells
from common.models.classifiers.manifest import read_manifest

if TYPE_CHECKING:
    from common.platform.runner.job_context import JobContext

log = logging.getLogger(__name__)

# (candidate folder, its manifest, champion folder, its manifest) -> both models' outcomes on the same test rows.
Compare = Callable[[str, Mapping[str, Any], str, Mapping[str, Any]], Cells]
# A candidate's ``scoring`` (JSON: its test rows, how to run) -> its Compare; the job's, where it scores in Spark.
CompareOf = Callable[[Mapping[str, Any]], Compare]


def label_set(labels: Sequence[str]) -> str:
    """A multi-label set as one cell value: its sorted distinct labels joined by ``|`` (exact-set equality is
    string equality)."""
    return "|".join(sorted(set(labels)))


def paired_cells(candidate: str, champion: str, test: Sequence[Any], multilabel: bool = False) -> dict:
    """A Ray task's body: ``{"rows": [((gold, candidate's, champion's), count), ...]}`` of the two saved
    classifiers (folders, local or object-store URIs) on ``test``'s labelled rows (row sources, (files, filters)):
    single-label ``text``/``label`` rows, or multi-label examples (``multilabel``) as :func:`label_set` values."""
    from common.platform.storage import is_local, worker_scratch
    from common.pyfunc.loader import load

    if multilabel:
        from common.models.classifiers.multilabel import read_examples

        rows = [(text, label_set(gold)) for _, text, gold in read_examples(test)]
    else:
        from common.models.classifiers.training_rows import read_rows

        rows = read_rows(test, "text", "label")
    texts = [t for t, _ in rows]
    predictions = []
    with worker_scratch("gate-") as tmp:
        for i, folder in enumerate((candidate, champion)):
            local = folder.removeprefix("file://") if is_local(folder) else _fetch(folder, f"{tmp}/{i}")
            out = load(local).predict(texts)
            predictions.append([label_set(p) for p in out["labels"]] if multilabel else [str(p) for p in out["label"]])
    counts = Counter(zip([g for _, g in rows], *predictions))
    return {"rows": [(list(k), c) for k, c in counts.items()]}


def _fetch(uri: str, target: str) -> str:
    import pyarrow.fs as pafs

    from common.platform.storage import filesystem

    fs, path = filesystem(uri)
    pafs.copy_files(path, target, source_filesystem=fs)
    return target


def task_compare(ctx: "JobContext", scoring: Mapping[str, Any]) -> Compare:
    """A :data:`Compare` running :func:`paired_cells` on ``scoring``'s test rows
    (:func:`~common.registry.candidates.task_scoring`) in one Ray
    task: in torch's workers with its CPUs and GPUs where either model is an encoder."""
    from common.models.classifiers.text_classifier import run_tasks
    from common.pyfunc.loader import ENCODER_KINDS

    test = [(files, [tuple(f) for f in filters] if filters else None) for files, filters in scoring["test"]]

    def compare(
        candidate: str, candidate_manifest: Mapping[str, Any], champion: str, champion_manifest: Mapping[str, Any]
    ) -> Cells:
        job = {"candidate": candidate, "champion": champion, "test": test, "multilabel": scoring["multilabel"]}
        if {candidate_manifest.get("kind"), champion_manifest.get("kind")} & set(ENCODER_KINDS):
            return run_tasks(ctx.ray(), paired_cells, [job], scoring["cpus"], scoring["gpus"], torch=True)[0]
        return run_tasks(ctx.ray(), paired_cells, [job])[0]

    return compare


def champion_cells(
    ctx: "JobContext",
    client,
    name: str,
    version: str,
    candidate_folder: str,
    candidate_manifest: Mapping[str, Any],
    compare: Compare,
) -> Cells:
    """``compare`` of the candidate (``candidate_folder``, its manifest) and version ``version`` of registered
    model ``name``: the version's classifier is downloaded from the registry (``client``'s), copied under the
    lakehouse's models (where Spark's executors and Ray's workers on other nodes read it), compared, and the copy
    removed. Raises :class:`~common.registry.store.RegistryUnavailable` when the registry cannot hand the files."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from common.platform.runner.job import hash_of
    from common.platform.storage import put_folder, remove_tree
    from common.registry.store import RegistryUnavailable

    with tempfile.TemporaryDirectory(prefix="augment-champion-") as tmp:
        try:
            path = mlflow.artifacts.download_artifacts(
                f"models:/{name}/{version}",
                dst_path=tmp,
                tracking_uri=client._tracking_client.tracking_uri,
                registry_uri=client._registry_uri,
            )
        except (MlflowException, OSError) as exc:
            raise RegistryUnavailable(
                f"the registry could not hand {name} v{version}'s files ({' '.join(str(exc).split())[:200]})"
            ) from None
        folder = Path(path) / "data" / "classifier"
        manifest = read_manifest(str(folder))
        # A copy of this gate's own: two runs judging against one champion never remove each other's.
        uri = ctx.models_dir("champion", hash_of(name, version, candidate_folder, uuid.uuid4().hex))
        put_folder(str(folder), uri)
    try:
        cells = compare(candidate_folder, candidate_manifest, uri, manifest)
    finally:
        remove_tree(uri)
    log.info(
        "%s v%s and the candidate compared on %s", name, version, {k: sum(c for _, c in v) for k, v in cells.items()}
    )
    return cells
