"""Text classifiers trained and evaluated inside Ray tasks (BoostAug's and genre transfer's evaluation
classifiers): fastText here, the fine-tuned encoder in :mod:`common.models.classifiers.encoder_classifier`, one
dispatch
for both (:func:`evaluate_many`).

A task reads its rows straight from the Parquet files of Delta table versions (``sources``: a list of
(files, pyarrow filters) so one table can hold many folds, methods or splits;
:func:`common.models.classifiers.training_rows.read_rows`), trains with
:func:`common.models.classifiers.fasttext_training.fit_rows`, and
returns figures;
nothing passes through the driver.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Sequence

from common.models.classifiers.fasttext_training import fasttext_params, fit_rows, task_options
from common.models.classifiers.hft import HFTModel, predict_texts
from common.models.classifiers.label_metrics import scored
from common.models.classifiers.manifest import write_manifest
from common.models.classifiers.training_rows import Source, read_rows
from common.platform.storage import worker_scratch

if TYPE_CHECKING:
    from common.models.classifier_config import EncoderConfig, FastTextConfig
    from common.platform.compute.ray_runtime import RayRuntime

TEXT, LABEL = "text", "label"


def _fit(rows: Sequence[tuple[str, str]], params: dict[str, Any], seed: int, out_dir: str) -> dict[str, Any]:
    tokens, _, seconds = fit_rows(rows, params, seed, out_dir)
    return {"rows": len(rows), "tokens": tokens, "seconds": seconds}


def _evaluate(model_dir: str, rows: Sequence[tuple[str, str]], tag: Optional[dict[str, Any]] = None) -> Any:
    """The saved flat model's figures on ``rows`` (with ``tag``, and its predictions:
    :func:`~common.models.classifiers.label_metrics.scored`)."""
    predicted = [label for label, _, _ in predict_texts(HFTModel(model_dir, 1), [t for t, _ in rows])]
    return scored(rows, predicted, tag)


def fit_and_evaluate(
    train: Sequence[Source],
    test: Sequence[Source],
    params: dict[str, Any],
    seed: int,
    keep: Optional[str] = None,
    tag: Optional[dict[str, Any]] = None,
) -> Any:
    """Train a flat fastText classifier on ``train`` rows and evaluate it on ``test`` rows; it is saved in ``keep``
    (a folder URI: an HFT of depth 1, with the registered-model loader's ``model.json``) when given, else
    discarded. Returns {rows, tokens, seconds, accuracy, macro_f1, n_test}; with ``tag``, (those figures, the test
    rows' predictions: :func:`~common.models.classifiers.label_metrics.scored`). Raises TrainingDataError on no
    rows."""
    with worker_scratch("text-classifier-") as tmp:
        figures = _fit(read_rows(train, TEXT, LABEL), params, seed, keep or tmp)
        found = _evaluate(keep or tmp, read_rows(test, TEXT, LABEL), tag)
    if keep:
        write_manifest(keep, {"kind": "hft", "depth": 1})
    if tag is None:
        return figures | found
    return figures | found[0], found[1]


def run_tasks(
    runtime: "RayRuntime",
    function,
    jobs: Sequence[dict[str, Any]],
    num_cpus: int = 1,
    num_gpus: float = 0.0,
    torch: bool = False,
    outputs: int = 1,
) -> Any:
    """Run ``function(**job)`` for every job as Ray tasks of ``num_cpus`` CPUs and ``num_gpus`` GPUs each
    (fastText: one CPU, single-threaded, so deterministic per seed); results in job order. With ``outputs`` 2 the
    function returns a pair: (the first outputs, in job order; object refs of the second, left in Ray's object
    store for Ray's workers to write, :func:`common.stages.judging.write_task_predictions`).

    ``torch``: the tasks import torch, and run in torch's workers, never in fastText's
    (``fasttext_training.task_options``): fastText trains on uninitialised memory, and in a worker whose heap torch
    has shaped a later fastText model could differ from a clean process's, or hit NaN."""
    import ray

    runtime.start()
    options = task_options(torch, num_gpus, num_cpus)
    if not jobs:
        return [] if outputs == 1 else ([], [])
    remote = ray.remote(num_gpus=num_gpus or None, max_retries=2, num_returns=outputs, **options)(function)
    refs = [remote.remote(**job) for job in jobs]
    demand = {"CPU": options.get("num_cpus", 1), "GPU": num_gpus}
    if outputs == 1:
        return runtime.wait(refs, f"{function.__name__} tasks", demand)
    return runtime.wait([r[0] for r in refs], f"{function.__name__} tasks", demand), [r[1] for r in refs]


def evaluate_many(
    runtime: "RayRuntime",
    model: str,
    jobs: Sequence[dict[str, Any]],
    fasttext: "FastTextConfig",
    encoder: "EncoderConfig",
) -> Any:
    """Train and evaluate one ``model`` classifier (``fasttext`` or ``encoder``) per job ({train, test, seed}:
    row sources and a seed; with ``tag`` in every job, the constant columns naming its predictions) as Ray tasks.
    Returns each job's figures {rows, accuracy, macro_f1, n_test, ...}, in job order; where the jobs are tagged,
    (those figures, object refs of each job's test predictions: :func:`run_tasks` ``outputs`` 2)."""
    outputs = 2 if all("tag" in job for job in jobs) else 1
    if model == "encoder":
        from common.models.classifiers.encoder_classifier import fit_and_evaluate as fit_encoder_and_evaluate

        # An evaluation encoder is a plain classifier: no MLM loss, whatever its mlm_weight says.
        spec = replace(encoder, mlm_weight=0.0)
        return run_tasks(
            runtime,
            fit_encoder_and_evaluate,
            [{**job, "spec": spec} for job in jobs],
            spec.num_cpus,
            spec.num_gpus,
            torch=True,
            outputs=outputs,
        )
    params = fasttext_params(fasttext)
    return run_tasks(runtime, fit_and_evaluate, [{**job, "params": params} for job in jobs], outputs=outputs)
