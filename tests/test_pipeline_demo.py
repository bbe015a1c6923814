"""End to end: the demo pipeline writes versioned Delta tables, tracked in MLflow, idempotently."""

from __future__ import annotations

import json
import subprocess
from importlib.metadata import version
from pathlib import Path

import mlflow
import pytest
from deltalake import DeltaTable
from worlds import WORLD_MODELS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def demo_run(small_world):
    """The small world's context and its foundation run's (generate-demo, ingest) results."""
    results = small_world.run("foundation")
    return small_world.ctx, (results["generate-demo"], results["ingest"])


def test_demo_pipeline_writes_accounted_tables(demo_run):
    ctx, (generated, ingested) = demo_run
    cfg = ctx.cfg.demo
    planted = round(cfg.n_labeled * cfg.bad_row_fraction)
    out = ingested.outputs
    assert out["labeled_products"].num_rows == cfg.n_labeled
    assert out["labeled_products_quarantine"].num_rows == planted == generated.metrics["rows.labeled_products_bad"]
    for kind, table in (
        ("labeled", "labeled_products"),
        ("catalog", "catalog"),
        ("interactions", "interactions"),
        ("products", "products"),
    ):
        m = ingested.metrics
        assert m[f"{kind}.rows_in"] == m[f"{kind}.rows_kept"] + m[f"{kind}.rows_quarantined"]
        assert m[f"{kind}.rows_quarantined"] > 0  # the planted bad rows were caught
        assert out[table].num_rows == m[f"{kind}.rows_kept"]
        assert DeltaTable(ctx.lakehouse.location(table)).to_pyarrow_table().num_rows == m[f"{kind}.rows_kept"]
    reasons = {r.reason for r in ctx.lakehouse.read("labeled_products_quarantine").collect()}
    assert reasons == {
        "empty title",
        "malformed category path: empty level",
        "empty category",
        "invalid text in title: control or undecodable characters",
    }
    catalog = ctx.lakehouse.read("catalog")
    assert catalog.columns == ["item_id", "title", "group_id", "gtin", "mpn", "brand"]
    assert catalog.filter("group_id IS NULL").count() > 0
    # Lineage links each table version to the landing files' fingerprint and the taxonomy version.
    lineage = ctx.lakehouse.history("labeled_products")[0].lineage
    assert lineage["job"] == "ingest" and lineage["inputs"]["taxonomy"] == "0"
    assert any(v.startswith("files:") for v in lineage["inputs"].values())


def test_rerun_creates_no_new_versions_and_force_does(demo_run, small_world, tmp_path):
    ctx, _ = demo_run
    before = {t.name: t.version for t in ctx.lakehouse.tables()}
    _, ingested = small_world.rerun("foundation")
    assert all(r.skipped for r in ingested.outputs.values())
    assert {t.name: t.version for t in ctx.lakehouse.tables()} == before
    copied = small_world.copy(tmp_path)  # a forced write is a new version: not in the shared world
    copied.force = True
    from jobs.foundation import ingest

    try:
        forced = ingest.run(copied)
    finally:
        copied.close()
    assert forced.outputs["catalog"].version == before["catalog"] + 1


def test_runs_are_tracked_as_parent_and_children(demo_run):
    ctx, (generated, ingested) = demo_run
    client = mlflow.tracking.MlflowClient(ctx.cfg.tracking_uri)
    child = client.get_run(ingested.run_id)
    parent = client.get_run(child.data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == "pipeline:foundation"
    assert client.get_run(generated.run_id).data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert child.data.params["demo.seed"] == str(ctx.cfg.demo.seed)
    assert child.data.params["lakehouse.root"] == ctx.cfg.lakehouse.root
    assert child.data.tags["output.labeled_products.version"] == "0"
    # The code that ran: this checkout's commit (MLflow's own tag) and whether tracked files differed from it.
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert child.data.tags["mlflow.source.git.commit"] == head and len(head) == 40
    dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=REPO).returncode == 1
    assert child.data.tags["code.dirty"] == str(dirty).lower()
    assert child.data.tags["code.version"] == version("catalog-augment")
    assert child.data.metrics["labeled.rows_in"] == ctx.cfg.demo.n_labeled * 1.05
    # Output tables are MLflow datasets too (context "output"); the digest carries the Delta version
    # (MLflow drops a version of 0 from the source JSON).
    datasets = {
        (d.dataset.name, {t.key: t.value for t in d.tags}["mlflow.data.context"]): d.dataset
        for d in child.inputs.dataset_inputs
    }
    written = datasets[("labeled_products", "output")]
    assert written.digest == "v0" and written.source_type == "delta_table"
    assert json.loads(written.source)["path"] == ctx.lakehouse.location("labeled_products")
    artifact = client.download_artifacts(child.info.run_id, "ingest/labeled_products.json")
    summary = json.loads(open(artifact).read())
    assert summary["rows_in"] == summary["kept"] + summary["quarantined"]


def test_user_inputs_replace_the_demo(ctx, tmp_path):
    from jobs.foundation import ingest

    path = tmp_path / "mine.csv"
    path.write_text("sku,name,cat\ns1,Red mug 350ml,Home > Mugs\ns2,,Home > Mugs\n")
    from common.data.config import InputSpec

    ctx.cfg.inputs.labeled = InputSpec(path=str(path), rename={"sku": "item_id", "name": "title", "cat": "category"})
    result = ingest.run(ctx)
    # Once any input is configured, the demo landing files are not used for the others.
    assert set(result.outputs) == {"labeled_products", "labeled_products_quarantine"}
    assert result.metrics["labeled.rows_kept"] == 1 and result.metrics["labeled.rows_quarantined"] == 1


def test_demo_generation_runs_beside_configured_documents_but_not_beside_catalog_inputs(ctx, tmp_path):
    from common.data.config import InputSpec
    from jobs.foundation.generate_demo import run as generate_demo

    # documents and multi-label texts never come from the demo world: configuring them must not stop it
    # (conf/demo.yaml does)
    ctx.cfg.inputs.documents = InputSpec(path=str(tmp_path / "documents.csv"))
    ctx.cfg.inputs.multilabel = InputSpec(path=str(tmp_path / "multilabel.csv"))
    generated = generate_demo(ctx)
    assert generated.metrics and all(v > 0 for v in generated.metrics.values())
    # configured texts (BoostAug's own data) stop it by default, not with demo.generate: catalog (conf/demo.yaml)
    ctx.cfg.inputs.texts = InputSpec(path=str(tmp_path / "texts.csv"))
    assert not generate_demo(ctx).metrics
    ctx.cfg.demo.generate = "catalog"
    assert generate_demo(ctx).metrics == generated.metrics  # the same world, already written: not written again
    # a catalog input of the user's own replaces the demo world: nothing is generated
    ctx.cfg.inputs.labeled = InputSpec(path=str(tmp_path / "labeled.csv"))
    assert not generate_demo(ctx).metrics


@pytest.mark.slow  # every pipeline's world: make test runs it, make test-fast not
def test_results_summary_shows_every_result_and_one_sample_per_generator(small_world, capsys, monkeypatch, tmp_path):

    from pyspark.sql import functions as F

    from common.models.generator_summary import describe_generator
    from jobs import run_pipeline
    from jobs.summary.summary_tables import GENERATED, PAGES

    small_world.run_every_pipeline()
    lake = small_world.lakehouse
    monkeypatch.setattr(small_world.ctx.cfg, "results_pages_dir", str(tmp_path / "docs-results"))
    summary = run_pipeline(small_world.ctx, "summary", ["results-summary"])[0]
    assert summary.outputs == {}  # the summary writes no table
    text = (Path(small_world.cfg.lakehouse.root) / "reports" / "summary.md").read_text(encoding="utf-8")
    assert text.split("```\n")[1].strip() in capsys.readouterr().out
    for heading in (
        "Consistency paper",
        "Query reformulation paper",
        "BoostAug paper",
        "Genre transfer paper",
        "Compositional paper",
        "Generated samples",
    ):
        assert heading in text, heading
    # Every results section gives its figures as mean ± std with the number of runs (R or seeds) they rest on.
    blocks = text.split("```\n")[1].split("\n\n")
    for heading in (
        "Consistency paper",
        "Query reformulation paper",
        "BoostAug paper",
        "Genre transfer paper",
        "Compositional paper",
    ):
        block = next(b for b in blocks if heading in b)
        assert " ± " in block and block.splitlines()[1].split()[-1] in ("R", "seeds"), heading
        assert "\n  for comparison, the paper (" in block, heading  # what the paper reports, to place the figure
        # each difference judged: on the same rows with its interval and MDE (the evaluation layer's, where the
        # section is on it), or against the seed std (a column, or the gain paired by seed); and the test size
        header = block.splitlines()[1]
        assert "MDE" in header or "> std" in header or "gain (points)" in header, heading
        assert "\n  test examples per figure" in block or "\n  held-out queries: " in block, heading
    # one line per registered model: its champion with the gate's metric over its seeds
    models = text.split("Registered models")[1].split("\n\n")[0]
    assert f"\n  {WORLD_MODELS}consistency_cst_ss: @champion v" in models and "consistency_rate " in models
    assert f"\n  {WORLD_MODELS}compositional_no_aug: @champion v" in models and " accuracy " in models
    samples = text.split("Generated samples")[1]
    for table, method, _, _, section in GENERATED:
        if table == "boostaug_infill_generated":
            continue
        written = lake.read(table).filter("sample_idx >= 0 AND reason IS NULL AND length(trim(generated_text)) > 0")
        versions = {r[0] for r in written.select("model_version").distinct().collect()}
        lines = [line for line in samples.splitlines() if line.startswith(f"  {method} (")]
        assert versions and len(lines) == min(len(versions), 6), method
        # each sample names the generator that wrote it: the model, how it learned, its version
        named = describe_generator(section(small_world.cfg).model, section(small_world.cfg).fine_tune)
        assert all(
            f"written by {named} [" in line and line.split("[")[-1].rstrip("]:") in versions for line in lines
        ), (method, lines)
        # the sample is the row whose source is of median length among the generator's (ties: source id,
        # sample): the same one in every run
        version = min(versions)
        rows = (
            written.filter(F.col("model_version") == version)
            .orderBy(F.length("source_text"), "source_id", "sample_idx")
            .select("generated_text")
            .collect()
        )
        median = rows[(len(rows) + 1) // 2 - 1]
        assert " ".join(median["generated_text"].split())[:100] in samples, method
    assert "BoostAug contextual" not in samples  # the world's BoostAug has no contextual backend
    assert summary.metrics["cga.f1_weighted"] == pytest.approx(
        lake.read("consistency_results").filter(F.col("method") == "cga").toPandas().f1_weighted.mean()
    )
    # One results page per results table, in the lakehouse and in results_pages_dir (the docs site's folder),
    # naming the table version its numbers come from.
    pages = Path(small_world.cfg.lakehouse.root) / "reports" / "results"
    for table, (pipeline, _) in PAGES.items():
        text = (pages / f"{pipeline}.md").read_text(encoding="utf-8")
        assert (tmp_path / "docs-results" / f"{pipeline}.md").read_text(encoding="utf-8") == text, pipeline
        assert f"| results table | `{table}` version {lake.version(table)} |" in text, pipeline
        assert f"| config | `{small_world.cfg.name}`, hash `" in text and "| inputs | `" in text, pipeline
    consistency = (pages / "consistency.md").read_text(encoding="utf-8")
    cga = lake.read("consistency_results", lake.version("consistency_results")).filter(F.col("method") == "cga")
    assert f"| cga | {cga.toPandas().f1_weighted.mean():.4f} ± " in consistency
    # CGA's run behind its rows: D_aug from the results version, the generator's samples and model from the
    # cga_generated version that version's commit names.
    results_at = lake.version("consistency_results")
    aug = int(cga.toPandas().n_augmented.max())
    assert f"| CGA titles added to D_L (D_aug) | {aug:,} | `consistency_results` v{results_at} |" in consistency
    # two of D_aug's titles beside the titles they were written from, from the same run's cga_augmented version
    added = [
        line for line in consistency.splitlines() if line.startswith("| a title added to D_aug, beside its source")
    ]
    assert len(added) == min(2, aug) and all(" -> " in line and "| `cga_augmented` v" in line for line in added)
    generated_at = int(lake.data_commit("consistency_results", results_at).lineage["inputs"]["cga_generated"])
    samples = lake.read("cga_generated", generated_at).filter("sample_idx >= 0")
    where = f"`cga_generated` v{generated_at}"
    assert f"| CGA samples written by the generator | {samples.count():,} | {where} |" in consistency
    candidates = samples.filter("reason IS NULL").count()
    assert 0 < candidates <= samples.count() and aug <= candidates
    assert f"not a copy of the source) | {candidates:,} | {where} |" in consistency
    assert f"| CGA generator (model version) | `{samples.first()['model_version']}` | {where} |" in consistency
    assert "![consistency/f1_vs_consistency.png](consistency/f1_vs_consistency.png)" in consistency
    assert (tmp_path / "docs-results" / "consistency" / "f1_vs_consistency.png").stat().st_size > 10_000
    # Genre: the rows over all topics (each seed's mean over topics, then mean ± std over the seeds, and the gain
    # over off_topic paired by seed), then every topic's own rows.
    genre = (pages / "genre-transfer.md").read_text(encoding="utf-8")
    fasttext = lake.read("genre_results").filter("model = 'fasttext'").toPandas()
    per_seed = fasttext.groupby(["method", "repeat"]).macro_f1.mean().unstack("method")
    gain = per_seed.augmented - per_seed.off_topic
    row = next(line for line in genre.splitlines() if line.startswith("| fasttext | all | augmented |"))
    assert row.startswith(
        f"| fasttext | all | augmented | {per_seed.augmented.mean():.4f} ± {per_seed.augmented.std():.4f} | "
    ), row
    assert f" | {100 * gain.mean():+.1f} ± {100 * gain.std():.1f} ({(gain > 0).sum()}/{len(gain)}) | " in row, row
    # beside it, augmented against off_topic on the same rows, pooled over topics, N and seeds (genre_evidence)
    from common.platform.reports.results_pages import effect_cell, points

    judged = (
        lake.read("genre_evidence")
        .filter("scope = 'model=fasttext' AND method = 'augmented' AND metric = 'macro_f1'")
        .first()
        .asDict()
    )
    assert row.endswith(
        f" | {effect_cell(judged)} | {points(judged['mde'])} | {points(judged['paper_effect'], signed=True)} | "
        f"{judged['verdict']} | {len(gain)} |"
    ), row
    boostaug = (pages / "boostaug.md").read_text(encoding="utf-8")
    judged = lake.read("boostaug_evidence").filter("method = 'eda+boostaug' AND metric = 'accuracy'").first()
    assert "| eda+boostaug | " in boostaug and f" | {effect_cell(judged.asDict())} | " in boostaug
    assert "| fasttext | all | off_topic |" in genre
    augmented = fasttext[fasttext.method == "augmented"]
    for topic, f1 in augmented.groupby("topic").macro_f1.mean().items():
        assert f"| fasttext | {topic} | augmented | {f1:.4f} ± " in genre, topic
    # Query reformulation: the run behind the matcher's rows, each figure from the version its commit names.
    matcher = (pages / "query-reformulation.md").read_text(encoding="utf-8")
    results_version = lake.version("matcher_results")
    inputs = lake.data_commit("matcher_results", results_version).lineage["inputs"]
    held_out = lake.read("matcher_results", results_version).agg(F.max("n_queries")).first()[0]
    assert f"| held-out queries | {held_out:,} | `matcher_results` v{results_version} |" in matcher
    # P@1 per log as mean ± std over the matcher's seeds, and the augmented log's gain paired by seed
    p1 = (
        lake.read("matcher_results", results_version)
        .filter("k = 1")
        .toPandas()
        .pivot(index="seed", columns="variant", values="precision")
    )
    diff = p1.augmented - p1.original
    row = next(line for line in matcher.splitlines() if line.startswith("| 1 | "))
    assert row.startswith(
        f"| 1 | {p1.original.mean():.4f} ± {p1.original.std():.4f} | "
        f"{p1.augmented.mean():.4f} ± {p1.augmented.std():.4f} | "
    ), row
    assert (
        f" | {100 * diff.mean():+.2f} ± {100 * diff.std():.2f} ({(diff > 0).sum()} up, {(diff < 0).sum()} down) "
        in row
    ), row
    assert row.endswith(f" | {len(p1)} |") and len(p1) == 2, row
    pairs_version = int(inputs["reformulation_pairs"])
    pairs = lake.read("reformulation_pairs", pairs_version)
    assert (
        f"| reformulation pairs (query graph) | {pairs.count():,} | `reformulation_pairs` v{pairs_version} |"
        in matcher
    )
    queries = lake.read("query_interactions", int(inputs["query_interactions"])).select("query").distinct().count()
    assert f"| distinct queries | {queries:,} |" in matcher
    # Rerunning the summary on the same tables writes the same pages.
    run_pipeline(small_world.ctx, "summary", ["results-summary"])
    assert (pages / "consistency.md").read_text(encoding="utf-8") == consistency


def test_two_contexts_in_one_process_track_into_their_own_experiments(tracking_uri, tmp_path):
    from common.config import load_config
    from common.platform.tracking.tracker import Tracker

    def tracker(name):
        return Tracker(
            load_config(
                None,
                [
                    f"tracking.uri={tracking_uri}",
                    f"tracking.experiment=test-{name}",
                    f"lakehouse.root={tmp_path / name}",
                ],
            )
        )

    a, b = tracker("ctx-a"), tracker("ctx-b")
    runs = []
    for t in (a, b, a):  # the third run comes after b moved MLflow's process-wide experiment
        with t.run("job", log_config=False) as run:
            runs.append(run.run_id)
    client = mlflow.tracking.MlflowClient(tracking_uri)
    names = [client.get_experiment(client.get_run(r).info.experiment_id).name for r in runs]
    assert names == ["test-ctx-a", "test-ctx-b", "test-ctx-a"]
