"""What a generation stage (:mod:`common.stages.generation`) reports once it has written: the counts and
throughput of its table version (:class:`GenerationStats`, logged as MLflow metrics) and, for a served generator,
what the stage run sent to the endpoint (:func:`endpoint_accounting`: the metrics, the tags and the dataset card).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

if TYPE_CHECKING:
    from common.platform.lakehouse.lakehouse import WriteResult
    from common.platform.runner.job import JobContext
    from common.platform.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GenerationStats:
    """Counts and throughput of one generation table version."""

    inputs: int
    quarantined_inputs: int
    sequences: int
    tokens: int
    seconds: Optional[float]

    def metrics(self) -> dict[str, float]:
        out = {
            "generation.inputs": self.inputs,
            "generation.quarantined_inputs": self.quarantined_inputs,
            "generation.sequences": self.sequences,
            "generation.tokens": self.tokens,
        }
        if self.seconds:
            out.update(
                {
                    "generation.seconds": self.seconds,
                    "generation.sequences_per_second": self.sequences / self.seconds,
                    "generation.tokens_per_second": self.tokens / self.seconds,
                }
            )
        return {k: float(v) for k, v in out.items()}


def endpoint_accounting(
    ctx: JobContext,
    tr: "TrackedRun",
    generator_uris: Sequence[str],
    tag: str,
    out_table: str,
    written: WriteResult,
    quarantine_rows: int = 0,
) -> dict[str, float]:
    """For a stage whose generators are served
    (:class:`~common.models.generation.served.engine.ServedGenerator` of the first of ``generator_uris``): what the
    stage run ``tag`` sent (:func:`common.models.generation.served.log.usage`) logged to the MLflow run and, when it
    wrote a version of ``out_table``, that version's dataset card (the served model, its prompt, the counts). Returns
    the counts ({} for a local model or a stage that wrote nothing)."""
    from common.models.generation.served.engine import ServedGenerator
    from common.models.generation.served.log import usage

    served = ServedGenerator.read(generator_uris[0]) if generator_uris else None
    if served is None or written.skipped:
        return {}
    counts, endpoint = usage(ctx.spark, generator_uris, tag), served.endpoint
    tr.log_metrics(counts)
    tr.set_tags({"generator.served_model": endpoint.model, "generator.endpoint": endpoint.base_url})
    log.info(
        "%s: %s at %s: %s",
        out_table,
        endpoint.model,
        endpoint.base_url,
        ", ".join(f"{k.removeprefix('endpoint.')} {v:g}" for k, v in counts.items()),
    )
    tr.result.outputs[out_table] = written
    tr.write_card(
        out_table,
        {
            "model": endpoint.model,
            "kind": "endpoint (a served model, not trained here)",
            "endpoint": endpoint.base_url,
            "api": endpoint.api,
            "in-context examples": served.in_context,
            "prompt": served.prompt if len(generator_uris) == 1 else f"one per generator ({len(generator_uris)})",
        },
        {
            "quarantined": "requests refused or failed after their retries, and empty inputs",
            "quarantined inputs": quarantine_rows,
        },
        {k.removeprefix("endpoint."): v for k, v in counts.items()},
    )
    return counts
