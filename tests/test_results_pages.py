"""Results pages (common.platform.reports.results_pages): one section prints as fixed-width text and becomes a Markdown
page naming the results-table version its numbers come from. The end-to-end summary test checks the pages the
job writes for every pipeline against their tables."""

from __future__ import annotations

from common.platform.lakehouse.tables import Commit
from common.platform.reports.results_pages import ResultsTable, beyond_std, fmt_mean, lift, page, text_block

SECTION = ResultsTable(
    pipeline="consistency",
    title="Consistency paper (...):",
    table="consistency_results",
    version=4,
    columns=["method", "F1", "lift", "R"],
    rows=[
        ["baseline", fmt_mean(0.69012, 0.00081), lift(0.69012, 0.69012), "3"],
        ["cst_full", fmt_mean(0.6858, None), lift(0.6858, 0.69012), "1"],
    ],
)


def test_a_section_prints_aligned_and_formats_means_and_lifts():
    text = text_block(SECTION).splitlines()
    assert text[0] == "Consistency paper (...):"
    assert text[1] == "  method                F1   lift R"
    assert text[2] == "  baseline 0.6901 ± 0.0008 +0.00% 3"
    assert text[3] == "  cst_full 0.6858 ± 0.0000 -0.63% 1"
    assert fmt_mean(None, 0.1) == "-" and lift(0.5, None) == "-" and lift(None, 0.5) == "-"
    # beyond the std: the difference must clear the larger of the two rows' std (one run's, missing, as 0)
    assert beyond_std(0.70, 0.01, 0.68, 0.015) == "yes" and beyond_std(0.70, 0.01, 0.68, 0.025) == "no"
    assert beyond_std(0.66, None, 0.68, None) == "yes" and beyond_std(0.70, 0.01, None, None) == "-"


def test_a_page_names_its_table_version_and_provenance_and_shows_the_rows_and_charts():
    commit = Commit(
        version=4,
        timestamp_ms=1_795_000_000_000,
        operation="WRITE",
        lineage={
            "job": "consistency-train",
            "run_id": "r1",
            "config_hash": "beef",
            "inputs": {"train_baseline": "2", "consistency_test": "0"},
        },
    )
    text = page(SECTION, commit, "real-toys-wdc", ["consistency/f1_vs_consistency.png"])
    assert text.splitlines()[0] == "# consistency results (real-toys-wdc)"
    for line in (
        "| results table | `consistency_results` version 4 |",
        "| written | 2026-11-18 11:06 UTC |",
        "| job | consistency-train (MLflow run `r1`) |",
        "| config | `real-toys-wdc`, hash `beef` |",
        "| inputs | `consistency_test` v0, `train_baseline` v2 |",
        "| method | F1 | lift | R |",
        "|---|---:|---:|---:|",
        "| baseline | 0.6901 ± 0.0008 | +0.00% | 3 |",
        "![consistency/f1_vs_consistency.png](consistency/f1_vs_consistency.png)",
    ):
        assert line in text.splitlines(), line
    # A pure function of the version and the config name: a rerun on unchanged tables writes the same page.
    assert page(SECTION, commit, "real-toys-wdc", ["consistency/f1_vs_consistency.png"]) == text
    assert "| written | unknown |" in page(SECTION, None, "demo")


def test_a_sections_facts_follow_its_rows_with_the_table_version_each_was_counted_from():
    from dataclasses import replace

    section = replace(
        SECTION,
        facts=[
            ("held-out queries", "131", "`matcher_results` v0"),
            ("reformulation pairs (query graph)", "3,490", "`reformulation_pairs` v2"),
            ("a title added", "Toy | Ages 6+ -> Toy | Ages 4+", "`cga_augmented` v0"),
        ],
    )
    text = text_block(section).splitlines()
    assert text[-3:-1] == [
        "  held-out queries: 131 (`matcher_results` v0)",
        "  reformulation pairs (query graph): 3,490 (`reformulation_pairs` v2)",
    ]
    lines = page(section, None, "demo").splitlines()
    table = lines.index("| figure | value | counted from |")
    assert lines[table + 1 : table + 4] == [
        "|---|---:|---|",
        "| held-out queries | 131 | `matcher_results` v0 |",
        "| reformulation pairs (query graph) | 3,490 | `reformulation_pairs` v2 |",
    ]
    # a title's pipes would split the Markdown row: escaped
    assert lines[table + 4] == "| a title added | Toy \\| Ages 6+ -> Toy \\| Ages 4+ | `cga_augmented` v0 |"
    assert lines.index("| cst_full | 0.6858 ± 0.0000 | -0.63% | 1 |") < table
    assert "| figure | value | counted from |" not in page(SECTION, None, "demo")
