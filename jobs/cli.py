"""The ``augment`` console script: the platform's CLI over this suite's jobs, pipelines and config.

augment run NAME [--conf FILE] [--set KEY=VALUE ...] [--force]   a job or a pipeline
augment tables | history TABLE | jobs | config                    see ``common.platform.runner.cli``
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from common.config import load_config
from common.platform.runner import cli
from jobs import REGISTRY


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parse ``argv`` and dispatch; returns the process exit code (2 for config errors)."""
    from common.models.generation.kinds import causal_lm
    from common.models.generation.served import checks as endpoint
    from jobs.foundation.ingest import dedup_lines

    return cli.main(
        argv,
        REGISTRY,
        load_config,
        doctor_checks=[causal_lm.doctor_check, endpoint.doctor_check],
        table_reports=[dedup_lines],
    )


def entry() -> None:
    """console_scripts entry point."""
    sys.exit(main())


if __name__ == "__main__":
    entry()
