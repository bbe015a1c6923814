"""Every pipeline notebook runs, in Databricks source format, on a tiny config with the test session's Spark."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from jobs import PIPELINES

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
# In pipeline order: later notebooks skip the jobs earlier ones wrote (same config, same inputs).
ORDER = [
    "foundation",
    "consistency",
    "query_graph",
    "cga",
    "query_reformulation",
    "boostaug",
    "genre_transfer",
    "compositional",
    "maintenance",
]
PREFIX = {"cga": "consistency", "query_reformulation": "query-graph"}  # the pipeline each one extends


def test_every_pipeline_has_a_notebook_in_databricks_source_format():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.py")) == sorted(ORDER)
    assert {name.replace("-", "_") for name in PIPELINES} - {"demo"} == set(ORDER)
    for name in ORDER:
        text = (NOTEBOOKS / f"{name}.py").read_text(encoding="utf-8")
        assert text.startswith("# Databricks notebook source\n# MAGIC %md\n"), name
        assert text.count("\n# COMMAND ----------\n") >= 3, name
        pipeline = "query-graph" if name == "query_graph" else name.replace("_", "-")
        assert f'nb.run("{pipeline}")' in text, name


@pytest.fixture
def notebook_env(monkeypatch, small_world):
    """The small world's config file, passed the way a scheduled run passes it: every notebook reads the
    world's lakehouse (tests/worlds.py), where each pipeline has run once on this same config."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("AUGMENT_CONF", str(small_world.config_file()))
    monkeypatch.setenv("AUGMENT_OVERRIDES", "")
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    return Path(small_world.cfg.lakehouse.root)


def _run(name: str, spark, **g) -> dict:
    return runpy.run_path(
        str(NOTEBOOKS / f"{name}.py"), init_globals={"spark": spark, **g}, run_name="notebook"
    )  # as an executed notebook, not a script with arguments


@pytest.mark.slow  # every pipeline's world, minutes on 2 cores: make test runs it, make test-fast not
def test_notebooks_run_every_pipeline(spark, small_world, notebook_env, capsys):
    expected = {  # what each notebook's result cells must print
        "foundation": ["labeled_products_quarantine", "|reason"],
        "consistency": ["consistency_results", "cst_ss", "f1_vs_consistency.png"],
        "query_graph": ["reformulation_pairs", "internal_edges", "histograms.png"],
        "cga": ["cga_sweep_results", "source_title", "figure2.png"],
        "query_reformulation": ["augmented_interactions", "precision"],
        "boostaug": ["eda+boostaug", "not among the 2 most confident", "accuracy_vs_n_aug.png"],
        "genre_transfer": ["genre_results", "off_topic", "augmented"],
        "compositional": ["compositional_results", "label_prefix", "no_aug", "cg_synthetic"],
        "maintenance": ["maintain", "reformulation_pairs"],
    }
    small_world.run_every_pipeline()  # what the end-to-end tests read; built here when this test runs first
    for name in ORDER:
        namespace = _run(name, spark)
        out = capsys.readouterr().out
        for text in expected[name]:
            assert text in out, f"notebook {name}: {text!r} not in its output"
        results = namespace["results"]
        assert results and all(r.job for r in results), name
        if name != "maintenance":
            # The notebook's config file is the one the pipelines ran on: every job is skipped through its
            # lineage (same config, same input versions), so a notebook rerun retrains and rewrites nothing.
            outputs = [o for r in results for o in r.outputs.values()]
            assert outputs and all(o.skipped for o in outputs), name
    assert (notebook_env / "reports" / "cga" / "figure2.png").is_file()


class _Widgets:
    """The slice of ``dbutils.widgets`` a notebook uses: ``text`` declares a widget, ``get`` reads it."""

    def __init__(self, values: dict[str, str]):
        self.values, self.declared = values, {}

    def text(self, name: str, default: str, label: str) -> None:
        self.declared[name] = default

    def get(self, name: str) -> str:
        return self.values.get(name, self.declared[name])


def test_notebook_reads_widgets_and_displays_on_databricks(spark, ray_runtime, notebook_env, monkeypatch, capsys):
    import os
    import types

    widgets = _Widgets({"conf": os.environ["AUGMENT_CONF"], "overrides": "tracking.experiment=widgets"})
    monkeypatch.delenv("AUGMENT_OVERRIDES")
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    shown = []
    namespace = _run("foundation", spark, dbutils=types.SimpleNamespace(widgets=widgets), display=shown.append)
    assert widgets.declared == {"conf": "conf/databricks.yaml", "overrides": ""}
    assert namespace["nb"].cfg.lakehouse.root == str(notebook_env)
    assert namespace["nb"].cfg.tracking.experiment == "widgets"  # the overrides widget reached the config
    assert len(shown) == 2 and {"reason", "count"} <= set(shown[0].columns)
    assert "labeled_products" in capsys.readouterr().out
