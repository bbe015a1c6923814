"""CGA: version pairs, D_aug at T and N, the Figure-2 points, and the pipeline end to end on a small world."""

from __future__ import annotations

from pathlib import Path

import mlflow
import pytest
from worlds import check_card

from common.catalog.cga import augmentation_set, group_version_pairs, sweep_points
from common.catalog.config import CGASweepConfig
from jobs import REGISTRY


def test_group_version_pairs_are_ordered_distinct_and_capped(spark):
    items = spark.createDataFrame(
        [
            ("g1", "red mug"),
            ("g1", "blue mug"),
            ("g1", "green mug"),
            ("g1", "red mug "),
            ("g2", "lamp"),
            ("g2", "lamp"),
            ("g3", "pan"),
            ("g3", ""),
        ],
        "group_id string, title string",
    )
    pairs = {(r.group_id, r.source_text, r.target_text) for r in group_version_pairs(items, None, 1).collect()}
    # g1 has 3 distinct titles (trailing space aside): 3 * 2 ordered pairs; g2 and g3 have one title.
    assert len(pairs) == 6 and ("g1", "red mug", "blue mug") in pairs and ("g1", "blue mug", "red mug") in pairs
    capped = group_version_pairs(items, 2, 1).collect()
    assert len(capped) == 2 and {r.group_id for r in capped} == {"g1"}
    assert sorted(map(tuple, capped)) == sorted(map(tuple, group_version_pairs(items, 2, 1).collect()))


def test_augmentation_set_keeps_scores_at_t_with_labels_and_draws_n(spark):
    generated = spark.createDataFrame(
        [
            ("1", "acme red mug", "acme blue mug", 0, 0.8, None),
            ("1", "acme red mug", "acme blue mug", 1, 0.8, None),  # a repeated sample counts once
            ("1", "acme red mug", "acme mug", 2, 0.6, None),
            ("2", "zeta lamp", "zeta lamp", 0, None, "copy of the source"),
            ("2", "zeta lamp", "zeta lamp xl", 1, 0.75, None),
            ("3", "pan " * 50, None, -1, None, "input longer than 64 tokens (51)"),
        ],
        "source_id string, source_text string, generated_text string, sample_idx long, score double, reason string",
    )
    labeled = spark.createDataFrame(
        [(1, "acme red mug", "Home > Mugs"), (2, "zeta lamp", "Home > Lamps"), (3, "pan " * 50, "Home > Pans")],
        "item_id long, title string, category string",
    )
    at_07 = {(r.item_id, r.title, r.category) for r in augmentation_set(generated, labeled, 0.7, None, 1).collect()}
    assert at_07 == {("1#0", "acme blue mug", "Home > Mugs"), ("2#1", "zeta lamp xl", "Home > Lamps")}
    assert augmentation_set(generated, labeled, 0.5, None, 1).count() == 3
    drawn = augmentation_set(generated, labeled, 0.5, 2, 7)
    assert drawn.count() == 2 and drawn.collect() == augmentation_set(generated, labeled, 0.5, 2, 7).collect()
    assert augmentation_set(generated, labeled, 0.5, 10, 7).count() == 3  # N above what passed T: all of it


def test_sources_is_a_positive_count_or_none():
    from common.catalog.config import CGAConfig
    from common.platform.errors import ConfigError

    assert CGAConfig(sources=None).sources is None and CGAConfig(sources=1).sources == 1
    with pytest.raises(ConfigError, match="cga.sources"):
        CGAConfig(sources=0)


def test_sweep_points_are_figure_2():
    points = sweep_points(CGASweepConfig())
    names = [p.name for p in points]
    # 4 thresholds at N = 200k, 4 sizes at T = 0.7 (one shared with the first), 4 thresholds without N.
    assert len(points) == 11 and len(set(names)) == 11
    shared = next(p for p in points if p.threshold == 0.7 and p.n == 200_000)
    assert shared.experiments == ("threshold", "size")
    assert sorted(p.threshold for p in points if p.n is None) == [0.5, 0.6, 0.7, 0.8]


@pytest.mark.slow  # a whole pipeline, minutes on 2 cores: make test runs it, make test-fast not
def test_cga_pipeline_end_to_end(small_world, tmp_path):
    # The world's CGA settings (tests/worlds.py): a tiny scratch T5, 2 samples per title, inputs over 16 tokens
    # quarantined, T = 0.2, 4 version pairs per group, the sweep at T in {0.1, 0.3} and N = 30.
    ctx = small_world.ctx
    results = small_world.run("cga")
    lh = ctx.lakehouse
    pool = lh.read("unlabeled_pool").select("group_id", "title").toPandas()
    distinct = pool.assign(title=pool.title.str.strip()).drop_duplicates().groupby("group_id").size()
    assert lh.read("cga_pairs").count() == int((distinct * (distinct - 1)).clip(upper=4).sum())

    # Generation: every D_L title gives 2 samples or one quarantined row; the two add up to D_L.
    gen = lh.read("cga_generated").toPandas()
    n_dl = lh.read("labeled_train").count()
    quarantined = lh.read("cga_generated_quarantine").toPandas()
    assert len(quarantined) > 0 and quarantined.reason.str.startswith("input longer than 16 tokens").all()
    assert gen[gen.sample_idx >= 0].source_id.nunique() + len(quarantined) == n_dl
    assert sorted(gen.sample_idx.unique()) == [-1, 0, 1]
    metrics = results["cga-generate"].metrics
    assert metrics["generation.sequences"] == 2 * (n_dl - len(quarantined)) and metrics["generation.tokens"] > 0
    scored = gen[gen.reason.isna()]
    assert scored.score.between(0, 1).all() and len(scored) > 0

    # Fine-tuning ran in Ray and logged a checkpoint per epoch and the model.
    client = mlflow.MlflowClient(ctx.cfg.tracking_uri)
    run = client.get_run(results["cga-generate"].run_id)
    assert run.data.tags["model.device"] == "cpu" and run.data.metrics["fine_tune.steps"] >= 2
    # The model version names the generator's kind and role, and every generated row carries it.
    assert run.data.tags["model.version"].startswith("scratch_t5_cga-")
    assert run.data.tags["model.source"] == "scratch_t5"
    assert set(gen.model_version.dropna()) == {run.data.tags["model.version"]}
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {"checkpoints/epoch-1"}
    assert "model/config.json" in {a.path for a in client.list_artifacts(run.info.run_id, "model")}

    # The CGA row joins consistency_results, with lifts against the baseline rows.
    rows = lh.read("consistency_results").toPandas()
    assert sorted(rows.method) == ["baseline", "cga", "cst_ss"]
    cga = rows[rows.method == "cga"].iloc[0]
    n_aug = lh.read("cga_augmented").count()
    card = check_card(small_world, results["cga-train"], "cga_augmented")
    assert "| kind | `scratch_t5` |" in card and "| threshold T | `0.2` |" in card and "| scorer |" in card
    assert cga.n_augmented == n_aug and cga.n_train == n_dl + n_aug
    assert cga.f1_lift == pytest.approx(
        (cga.f1_weighted - rows[rows.method == "baseline"].f1_weighted.mean())
        / rows[rows.method == "baseline"].f1_weighted.mean()
    )
    assert (
        n_aug
        == gen[(gen.reason.isna()) & (gen.score >= 0.2)][["source_id", "generated_text"]]
        .drop_duplicates()
        .merge(lh.read("labeled_train").selectExpr("cast(item_id as string) as source_id").toPandas())
        .shape[0]
    )

    # Samples that copy an accuracy-test title (case- and space-folded) sit in cga_test_copies with their
    # reason, and none of them in D_aug.
    def folded(texts):
        return texts.str.strip().str.replace(r"\s+", " ", regex=True).str.lower()

    test_titles = set(folded(lh.read("accuracy_test").select("title").toPandas().title))
    expected = gen[gen.reason.isna() & folded(gen.generated_text).isin(test_titles)]
    copies = lh.read("cga_test_copies").toPandas()
    assert len(copies) == len(expected) and (copies.reason == "copies a test text").all()
    assert not set(folded(lh.read("cga_augmented").select("title").toPandas().title)) & test_titles

    # The sweep: 5 points (T at N = 30, N at T = 0.2, T without N), each a child run of the sweep run.
    sweep = lh.read("cga_sweep_results").toPandas()
    assert sorted(sweep.point) == sorted(["T=0.1 N=30", "T=0.3 N=30", "T=0.2 N=30", "T=0.1 N=all", "T=0.3 N=all"])
    assert (sweep[sweep.point.str.endswith("N=30")].n_augmented <= 30).all()
    children = client.search_runs(
        [run.info.experiment_id], f"tags.mlflow.parentRunId = '{results['cga-sweep'].run_id}'"
    )
    assert len(children) == 5 and all("f1_weighted" in c.data.metrics for c in children)
    assert (Path(ctx.cfg.lakehouse.root) / "reports" / "cga" / "figure2.png").stat().st_size > 10_000

    # Re-running the same config on the same inputs writes nothing new.
    before = {t.name: t.version for t in lh.tables()}
    again = small_world.rerun("cga")
    assert {t.name: t.version for t in lh.tables()} == before
    assert all(out.skipped for r in again for out in r.outputs.values())
    # A scheduled rerun in a process of its own: the generation job finds its output and starts no Ray runtime.
    fresh = small_world.copy(tmp_path)
    try:
        regenerated = REGISTRY.runner("cga-generate")(fresh)
        assert regenerated.outputs and all(o.skipped for o in regenerated.outputs.values())
        assert fresh._ray is None
    finally:
        fresh.close()
