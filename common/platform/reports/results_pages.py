"""Results pages: each pipeline's results as a Markdown page written from one results-table version.

``results-summary`` aggregates every results table that exists into :class:`ResultsTable` sections (a title,
column names and display rows). The same sections print as the one-screen summary (:func:`text_block`) and
become one page per pipeline (:func:`page`): the Markdown table, the report charts, and the provenance every
number on it traces to, namely the results table and its version, the job, MLflow run, config hash and input
versions of that version's commit, and the commit's date. A page is a pure function of the table version and
the config's name, so rerunning the summary on unchanged tables writes the same page again: pages kept in the
docs site (``results_pages_dir``) change only when a pipeline wrote new results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from common.platform.reports.cards import commit_time


@dataclass(frozen=True)
class ResultsTable:
    """One pipeline's aggregated results: what the summary prints and its page shows.

    ``pipeline`` names the page (``consistency``, ``query-reformulation``...), ``table`` and ``version`` the
    results-table version the ``rows`` were computed from; ``columns`` and each row's cells are display
    strings. ``facts`` are figures of the run behind the results (a figure, its value, and the table version
    it was counted from: the results table or one of the inputs its commit names), shown under the rows."""

    pipeline: str
    title: str
    table: str
    version: int
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    facts: Sequence[tuple[str, str, str]] = ()


def text_block(section: ResultsTable) -> str:
    """The section as fixed-width text for the terminal: its title, then the columns aligned (the first
    left, the rest right)."""
    widths = [max(len(str(c)) for c in column) for column in zip(section.columns, *section.rows)]

    def line(cells: Sequence[str]) -> str:
        return "  " + " ".join(
            str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    lines = [section.title, line(section.columns), *(line(r) for r in section.rows)]
    return "\n".join(lines + [f"  {figure}: {value} ({source})" for figure, value, source in section.facts])


def page(section: ResultsTable, commit: Any, config_name: str, charts: Sequence[str] = ()) -> str:
    """The pipeline's results page in Markdown.

    Takes the section, the :class:`~common.platform.lakehouse.tables.Commit` of ``section.version`` (its lineage and
    time; None when unknown), the config's name and the chart file names to show (relative to the page).
    Returns the page's text."""
    lineage: Mapping[str, Any] = commit.lineage if commit is not None and commit.lineage else {}
    when = commit_time(getattr(commit, "timestamp_ms", None))
    inputs = ", ".join(f"`{name}` v{version}" for name, version in sorted(lineage.get("inputs", {}).items()))
    lines = [
        f"# {section.pipeline} results ({config_name})",
        "",
        "Written by the `results-summary` job from a results table version; rerun the pipeline, then "
        "`augment run results-summary`, to update it. Do not edit by hand.",
        "",
        "| | |",
        "|---|---|",
        f"| results table | `{section.table}` version {section.version} |",
        f"| written | {when} |",
        f"| job | {lineage.get('job', 'unknown')} (MLflow run `{lineage.get('run_id') or '-'}`) |",
        f"| config | `{config_name}`, hash `{lineage.get('config_hash', '-')}` |",
        f"| inputs | {inputs or '-'} |",
        "",
        section.title,
        "",
        "| " + " | ".join(section.columns) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(section.columns))) + "|",
    ]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in section.rows]
    if section.facts:
        lines += [
            "",
            "The run behind these results, each figure counted from the table version beside it:",
            "",
            "| figure | value | counted from |",
            "|---|---:|---|",
        ]
        lines += [f"| {_cell(figure)} | {_cell(value)} | {source} |" for figure, value, source in section.facts]
    lines += [""] + [f"![{name}]({name})" for name in charts]
    return "\n".join(lines).rstrip() + "\n"


def _cell(text: str) -> str:
    """``text`` as one Markdown table cell: its pipes escaped (a catalog title holds `| Ages 6+ |`)."""
    return str(text).replace("|", "\\|")


def fmt_mean(mean: Optional[float], std: Optional[float]) -> str:
    """``0.6901 ± 0.0008`` (a missing std, one run's, as 0); ``-`` when there is no mean."""
    return "-" if mean is None else f"{mean:.4f} ± {std or 0.0:.4f}"


def beyond_std(mean: Optional[float], std: Optional[float], base: Optional[float], base_std: Optional[float]) -> str:
    """``yes`` when ``mean`` differs from ``base`` by more than both rows' seed std (a missing std, one run's, as
    0), else ``no``; ``-`` when there is no base (or the row is the base: pass None)."""
    if mean is None or base is None:
        return "-"
    return "yes" if abs(mean - base) > max(std or 0.0, base_std or 0.0) else "no"


def points(value: Optional[float], signed: bool = False) -> str:
    """A rate's value in points (``1.2``, signed ``+1.2``); ``-`` when there is none (or NaN)."""
    if value is None or value != value:
        return "-"
    return f"{100 * value:+.1f}" if signed else f"{100 * value:.1f}"


def effect_cell(row: Optional[Mapping[str, Any]]) -> str:
    """An evidence row's effect and 95% interval in points: ``+1.2 [-0.3, +2.7]``; ``-`` when there is none."""
    if not row:
        return "-"
    return f"{points(row['effect'], True)} [{points(row['effect_low'], True)}, {points(row['effect_high'], True)}]"


def lift(value: Optional[float], base: Optional[float]) -> str:
    """``+3.10%`` relative to ``base``; ``-`` when there is no base."""
    if value is None or not base:
        return "-"
    return f"{(value - base) / base:+.2%}"
