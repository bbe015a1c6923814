"""What the pipeline notebooks (``notebooks/<pipeline>.py``) share: config from widgets, a context, display.

A notebook builds ``nb = Notebook(globals())`` in its first cell. On Databricks the config file and the
overrides come from the widgets ``conf`` and ``overrides`` (the same two parameters the bundle's jobs take),
the session is the notebook's ``spark``, and tables and charts go to ``display``/``displayHTML``. Run as a
plain script (``python notebooks/cga.py --conf conf/demo.yaml --overrides 'consistency.repeats=1'``) or from
another process, they come from ``--conf``/``--overrides``/``--set`` or ``$AUGMENT_CONF``/``$AUGMENT_OVERRIDES``
and the session is a local one built from the config (or the ``spark`` global when the caller passed one).
"""

from __future__ import annotations

import argparse
import base64
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from common.config import load_config
from common.platform.runner.entry import add_common_args, override_list
from common.platform.runner.job import build_context
from jobs import PIPELINES, run_pipeline

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from common.platform.runner.job import JobContext, JobResult

OVERRIDES_ENV = "AUGMENT_OVERRIDES"
LOCAL_CONF = "conf/demo.yaml"
DATABRICKS_CONF = "conf/databricks.yaml"


class Notebook:
    """One notebook's parameters, job context and display helpers.

    ``g`` is the notebook's ``globals()``: where Databricks puts ``spark``, ``dbutils``, ``display`` and
    ``displayHTML``. ``conf`` is the default config file off Databricks.
    """

    def __init__(self, g: dict[str, Any], conf: str = LOCAL_CONF):
        self._g = g
        self.on_databricks = "DATABRICKS_RUNTIME_VERSION" in os.environ and "dbutils" in g
        self.conf, self.overrides, force = self._parameters(conf)
        self.cfg = load_config(self.conf, self.overrides)
        self.ctx: "JobContext" = build_context(self.cfg, force=force, spark=g.get("spark"))

    def _parameters(self, conf: str) -> tuple[str, list[str], bool]:
        """(config file, overrides, force) from the widgets, the script's arguments or the environment."""
        if self.on_databricks:
            widgets = self._g["dbutils"].widgets
            widgets.text("conf", DATABRICKS_CONF, "Config file")
            widgets.text("overrides", "", "Overrides (k=v k2=v2)")
            return widgets.get("conf"), shlex.split(widgets.get("overrides")), False
        script = self._g.get("__file__")
        # Run as `python notebooks/x.py ...`: its own command line (not that of a process executing it).
        if (
            script
            and self._g.get("__name__") == "__main__"
            and sys.argv
            and Path(sys.argv[0]).resolve() == Path(script).resolve()
        ):
            parser = argparse.ArgumentParser(prog=Path(script).name)
            add_common_args(parser)
            args = parser.parse_args(sys.argv[1:])
            return args.conf or os.environ.get("AUGMENT_CONF") or conf, override_list(args), args.force
        return (os.environ.get("AUGMENT_CONF") or conf, shlex.split(os.environ.get(OVERRIDES_ENV, "")), False)

    def run(self, pipeline: str) -> list["JobResult"]:
        """Run ``pipeline`` (its jobs in ``augment jobs`` order; those whose inputs and config are unchanged
        are skipped) with a progress line per job; prints each job's summary and returns the results."""
        results = run_pipeline(self.ctx, pipeline, PIPELINES[pipeline])
        for result in results:
            print(result.summary())
        return results

    def show(self, df: "DataFrame", n: int = 20) -> None:
        """A table: ``display`` on Databricks, ``DataFrame.show`` elsewhere (at most ``n`` rows)."""
        if self.on_databricks and "display" in self._g:
            self._g["display"](df.limit(n))
        else:
            df.show(n, truncate=False)

    def chart(self, report: str, name: str) -> Optional[Path]:
        """Show the chart ``name`` of report folder ``<lakehouse.root>/reports/<report>``: inline on Databricks
        (and in Jupyter), its path elsewhere. Returns the path, or None (with a line saying so) when the job
        has not drawn it."""
        found = [chart for chart in self.ctx.reports.files(report, name) if chart.name == name]
        if not found:
            print(f"no chart {self.ctx.reports.uri(report)}/{name} yet")
            return None
        path = found[0]
        if self.on_databricks and "displayHTML" in self._g:
            data = base64.b64encode(path.read_bytes()).decode()
            self._g["displayHTML"](f'<img src="data:image/png;base64,{data}"/>')
        elif "IPython" in sys.modules and "get_ipython" in self._g:
            from IPython.display import Image, display

            display(Image(filename=str(path)))
        print(f"chart: {path}")
        return path

    def close(self) -> None:
        """Stop what the context started (Ray) and remove the charts' local copies (an object-store lakehouse's
        reports stay in the lakehouse); the SparkSession is left to its owner."""
        self.ctx.reports.discard()
        self.ctx.close()
