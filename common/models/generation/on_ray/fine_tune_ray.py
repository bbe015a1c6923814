"""Fine-tuning as Ray tasks: :func:`fine_tune_on_ray` runs :func:`common.models.generation.kinds.seq2seq.fine_tune` as
one Ray task (``num_cpus``/``num_gpus`` from config) that reads the pairs' Parquet files, logs the loss, a checkpoint
per epoch and the final model to the MLflow run, and copies the model to the models folder;
:func:`fine_tune_many_on_ray` runs one such task per model (each on its filtered share of the pairs) at once."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Optional, Sequence

from common.models.generation.fine_tune_specs import FineTuneResult, ModelSpec, TrainSpec
from common.models.generation.kinds.batching import read_pairs
from common.models.generation.kinds.seq2seq import fine_tune
from common.platform.compute.ray_stages import TORCH_TASK_ENV, fit_cpus

if TYPE_CHECKING:
    from common.platform.compute.ray_runtime import RayRuntime

log = logging.getLogger(__name__)


def _fine_tune_task(
    files: Sequence[str],
    source_col: str,
    target_col: str,
    out_uri: str,
    model: ModelSpec,
    train: TrainSpec,
    num_cpus: int,
    tracking_uri: Optional[str],
    run_id: Optional[str],
    checkpoint_every: int,
    filters: Optional[list] = None,
) -> FineTuneResult:
    """The body of the Ray task: read, train, log to MLflow, copy the final model to ``out_uri``."""
    import shutil
    import tempfile

    import torch

    from common.platform.storage import put_folder

    torch.set_num_threads(max(1, num_cpus))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    pairs = read_pairs(files, source_col, target_col, filters)
    if not pairs:
        raise ValueError(
            f"no (source, target) pairs in {len(files)} files matching {filters}: nothing to fine-tune {out_uri} on"
        )
    client = None
    if tracking_uri and run_id:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri)
    work = tempfile.mkdtemp(prefix="t5-")
    state = {"logged_steps": 0, "start": time.perf_counter()}
    epochs = train.planned_epochs(len(pairs))

    def on_epoch_end(epoch: int, net, tokenizer, losses: list[float]) -> None:
        seconds = time.perf_counter() - state["start"]
        epoch_losses = losses[state["logged_steps"] :]
        log.info(
            "epoch %d/%d: %d steps, mean loss %.4f, %.1f steps/s",
            epoch,
            epochs,
            len(epoch_losses),
            sum(epoch_losses) / max(1, len(epoch_losses)),
            len(losses) / max(seconds, 1e-9),
        )
        if client is None:
            state["logged_steps"] = len(losses)
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [
            Metric("train_loss", v, now, step) for step, v in enumerate(losses) if step >= state["logged_steps"]
        ]
        metrics.append(Metric("epoch_loss", sum(epoch_losses) / max(1, len(epoch_losses)), now, epoch))
        for start in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[start : start + 1000])
        state["logged_steps"] = len(losses)
        # The last epoch's weights are the final model, logged once as model/.
        if checkpoint_every and epoch % checkpoint_every == 0 and epoch < epochs:
            folder = f"{work}/checkpoint-epoch-{epoch}"
            net.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
            client.log_artifacts(run_id, folder, f"checkpoints/epoch-{epoch}")
            shutil.rmtree(folder, ignore_errors=True)

    try:
        local_model = f"{work}/model"
        result = fine_tune(pairs, local_model, model, train, on_epoch_end)
        if client is not None:
            client.log_artifacts(run_id, local_model, "model")
        put_folder(local_model, out_uri)
        result.path = out_uri
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fine_tune_on_ray(
    runtime: "RayRuntime",
    files: Sequence[str],
    out_uri: str,
    model: ModelSpec,
    train: TrainSpec,
    source_col: str = "source_text",
    target_col: str = "target_text",
    num_cpus: int = 1,
    num_gpus: float = 0.0,
    tracking_uri: Optional[str] = None,
    run_id: Optional[str] = None,
    checkpoint_every: int = 1,
) -> FineTuneResult:
    """Fine-tune on the pairs in Parquet ``files`` as one Ray task with ``num_cpus``/``num_gpus``.

    The model lands in ``out_uri`` (a path or URI); with ``run_id`` the task logs ``train_loss`` per step,
    ``epoch_loss``, a checkpoint every ``checkpoint_every`` epochs (``checkpoints/epoch-<k>``) and the final
    model (``model/``) to that MLflow run. Returns the :class:`FineTuneResult` (losses, device, seconds).
    """
    task = _fine_tune_remote(runtime, num_cpus, num_gpus)
    ref = task.remote(
        list(files), source_col, target_col, out_uri, model, train, num_cpus, tracking_uri, run_id, checkpoint_every
    )
    return runtime.wait([ref], "the fine-tune task", {"CPU": fit_cpus(num_cpus, "fine-tune"), "GPU": num_gpus})[0]


def _fine_tune_remote(runtime: "RayRuntime", num_cpus: int, num_gpus: float, **options):
    """:func:`_fine_tune_task` as a Ray remote function of ``num_cpus`` (fitted to the largest node; the task's
    threads stay ``num_cpus``: the weights depend on them) and ``num_gpus`` (plus Ray ``options``), Ray started."""
    import ray

    runtime.start()
    return ray.remote(_fine_tune_task).options(
        num_cpus=fit_cpus(num_cpus, "fine-tune"), num_gpus=num_gpus or 0, runtime_env=TORCH_TASK_ENV, **options
    )


def fine_tune_many_on_ray(
    runtime: "RayRuntime",
    files: Sequence[str],
    models: Sequence[tuple[list, str]],
    model: "ModelSpec | Sequence[ModelSpec]",
    train: TrainSpec,
    source_col: str = "source_text",
    target_col: str = "target_text",
    num_cpus: int = 1,
    num_gpus: float = 0.0,
) -> list[FineTuneResult]:
    """Fine-tune one model per (pyarrow filters, out_uri) of ``models`` on the matching pairs of the Parquet
    ``files``, as concurrent Ray tasks of ``num_cpus``/``num_gpus`` each (Ray runs as many at once as the
    cluster holds); ``model`` is one spec for all, or one per model. Returns the results in ``models`` order;
    a task's error is raised here."""
    specs = [model] * len(models) if isinstance(model, ModelSpec) else list(model)
    task = _fine_tune_remote(runtime, num_cpus, num_gpus, max_retries=1)
    refs = [
        task.remote(list(files), source_col, target_col, out_uri, spec, train, num_cpus, None, None, 0, filters)
        for (filters, out_uri), spec in zip(models, specs)
    ]
    return runtime.wait(refs, "fine-tune tasks", {"CPU": fit_cpus(num_cpus, "fine-tune"), "GPU": num_gpus})
