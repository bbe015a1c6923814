"""Every pipeline notebook runs, in Databricks source format, on a tiny config with the test session's Spark."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from jobs import PIPELINES

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
# In pipeline order: later notebooks skip the jobs earlier ones wrote (same config, same inputs).
ORDER = ["foundation", "consistency", "query_graph", "cga", "query_reformulation", "boostaug", "genre_transfer",
         "compositional", "maintenance"]
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
def notebook_env(monkeypatch, tmp_path, tracking_uri):
    """conf/demo.yaml made tiny, with this test's lakehouse, passed the way a scheduled run passes it."""
    overrides = [
        f"lakehouse.root={tmp_path / 'lakehouse'}", f"tracking.uri={tracking_uri}",
        f"tracking.experiment=test-{tmp_path.name}",
        "demo.n_labeled=600", "demo.n_groups=300", "demo.n_sessions=1500",
        "consistency.repeats=1", "consistency.consistency_test=60", "consistency.methods=[baseline,cst_ss]",
        "cga.sweep.sizes=[100]", "cga.sweep.fixed_size=100", "cga.threshold=0.3", "cga.sweep.thresholds=[0.3]",
        "cga.sweep.fixed_threshold=0.3", "query_reformulation.fine_tune.epochs=1",
        "boostaug.n_aug=2", "boostaug.folds=3", "boostaug.eval.repeats=1", "boostaug.eval.curve=[0,2]",
        "boostaug.surrogate.epochs=[50]", "boostaug.filter.confidence_threshold=0.6", "boostaug.backends=[eda,split]",
        "genre.topic_model.topics=5", "genre.topic_model.max_iter=5", "genre.split.sizes=[4]", "genre.eval.repeats=1",
        "compositional.split.compositions=4", "compositional.qc.target=40", "compositional.eval.repeats=1",
        "compositional.eval.curve=[]",
        "maintenance.tables=[consistency_results,query_clusters]",
    ]
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("AUGMENT_CONF", "conf/demo.yaml")
    monkeypatch.setenv("AUGMENT_OVERRIDES", " ".join(overrides))
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    return tmp_path / "lakehouse"


def _run(name: str, spark, **g) -> dict:
    return runpy.run_path(str(NOTEBOOKS / f"{name}.py"), init_globals={"spark": spark, **g},
                          run_name="notebook")  # as an executed notebook, not a script with arguments


@pytest.mark.slow  # a whole pipeline, minutes on 2 cores: make test runs it, make test-fast not
def test_notebooks_run_every_pipeline(spark, ray_runtime, notebook_env, capsys):
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
    for name in ORDER:
        namespace = _run(name, spark)
        out = capsys.readouterr().out
        for text in expected[name]:
            assert text in out, f"notebook {name}: {text!r} not in its output"
        results = namespace["results"]
        assert results and all(r.job for r in results), name
        if name in PREFIX:
            # Jobs an earlier notebook ran are skipped through lineage: same config, same input versions.
            earlier = [o for r in results if r.job in PIPELINES[PREFIX[name]] for o in r.outputs.values()]
            assert earlier and all(o.skipped for o in earlier), name
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

    widgets = _Widgets({"conf": "conf/demo.yaml", "overrides": os.environ["AUGMENT_OVERRIDES"]})
    monkeypatch.delenv("AUGMENT_OVERRIDES")
    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    shown = []
    namespace = _run("foundation", spark, dbutils=types.SimpleNamespace(widgets=widgets), display=shown.append)
    assert widgets.declared == {"conf": "conf/databricks.yaml", "overrides": ""}
    assert namespace["nb"].cfg.lakehouse.root == str(notebook_env)
    assert len(shown) == 2 and {"reason", "count"} <= set(shown[0].columns)
    assert "labeled_products" in capsys.readouterr().out
