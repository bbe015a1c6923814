"""Job ``consistency-splits``: the consistency paper's test sets, D_L, f_base and D_U.

Reads: ``labeled_products``, ``catalog_groups``.
1. Accuracy test: a uniform sample of the labeled data (``consistency.accuracy_test``, fraction or
   count) and every other item with one of its titles (compared trimmed and case-folded); with
   ``consistency.group_disjoint``, also every labeled item with a title of a catalog group that holds a drawn
   title (a product's other versions test, not train). The rest is D_L, checked to hold none of the test titles.
2. f_base: HFT trained on D_L (Ray actors); it labels every catalog item, and each group gets one
   pseudo-label h(X_i; f_base) (``consistency.pseudo_label``).
3. The catalog is matched to D_L's label histogram at ``consistency.match_level`` (L1, as in the
   paper) by an exact group sub-sample, labelled by f_base's prediction since the catalog has no
   labels; the consistency test samples ``consistency.consistency_test`` groups (fraction of all
   groups, or count) from it and takes one pair of different titles from each. The guard: groups that hold a D_L
   title are set aside before the match (where the labeled items are catalog offers, such a group would test a
   title D_L trains on; counted).
4. D_U: every catalog group not in the consistency test, with f_base's predictions and pseudo-labels,
   less the items whose title is a title of either test (and, group-disjoint, the accuracy test's groups;
   counted), so neither CGA's fine-tuning pairs nor any pseudo-labeled training row holds one.
Writes: ``accuracy_test``, ``labeled_train`` (D_L), ``consistency_test``, ``unlabeled_pool`` (D_U);
f_base goes to MLflow.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from typing import Optional

from common.platform.errors import InputError
from common.platform.runner.job import JobContext, JobRun, hash_of, job
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "consistency-splits"
OUTPUTS = ("accuracy_test", "labeled_train", "consistency_test", "unlabeled_pool")
# Bumped when a guard changes which rows a split puts where, so lakehouses split before it are split again.
GUARDS = "guards-2"


def check_labels(n_rows: int, n_classes: int, table: str) -> None:
    """Fail clearly on training data no classifier can learn from."""
    from common.models.classifiers.training_rows import TrainingDataError

    if n_rows == 0:
        raise TrainingDataError(f"{table} is empty: nothing to train on")
    if n_classes < 2:
        raise TrainingDataError(f"{table} has a single category: a classifier needs at least two classes")


def train_model(ctx: JobContext, tr: JobRun, table: str, version: int, name: str, key: str, seed: int):
    """Train an HFT on a lakehouse table version (reusing a model already trained from the same key)."""
    from pyspark.sql import functions as F

    from common.data.taxonomy import depth_col
    from common.models.classifiers.hft import HFTModel, HFTTrainerPool, stats_dict, train_hft
    from common.platform.storage import exists

    depth = ctx.lakehouse.read(table, version).agg(F.max(depth_col(F.col("category")))).first()[0]
    out_dir = ctx.models_dir(name, key)
    if not ctx.force and all(exists(f"{out_dir}/level_{i}.bin") for i in range(1, depth + 1)):
        log.info("reusing %s model at %s", name, out_dir)
        return HFTModel(uri=out_dir, depth=depth)
    model, stats = train_hft(
        HFTTrainerPool(ctx.ray()),
        ctx.lakehouse.file_uris(table, version),
        depth,
        ctx.cfg.consistency.fasttext,
        seed,
        out_dir,
    )
    tr.log_dict(stats_dict(stats), f"models/{name}/training_stats.json")
    tr.log_model_folder(out_dir, "models")
    return model


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Build the splits; returns their sizes and the catalog match's TVD."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.catalog.consistency import (
        group_labels,
        level_histogram,
        sample_size,
        truncated,
        uniform_sample,
        version_pairs,
    )
    from common.data.leakage import check_no_leak, groups_with_copies, with_copies, without_copies
    from common.data.sampling import subsample
    from common.models.classifiers.hft import predict

    cfg = ctx.cfg.consistency
    seed = ctx.cfg.seed
    labeled, groups = tr.read("labeled_products"), tr.read("catalog_groups")
    config_hash = hash_of(
        cfg.accuracy_test,
        cfg.consistency_test,
        cfg.match_level,
        cfg.pseudo_label,
        asdict(cfg.fasttext),
        seed,
        cfg.group_disjoint,
        GUARDS,
    )
    if tr.all_written(OUTPUTS, config_hash):
        return None
    counts = labeled.agg(
        F.count("*").alias("n"), F.countDistinct("category").alias("k"), F.countDistinct("item_id").alias("ids")
    ).first()
    check_labels(counts["n"], counts["k"], "labeled_products")
    if counts["ids"] != counts["n"]:
        # The results pair every model's predictions by item_id: a repeated id would count its rows twice.
        repeated = labeled.groupBy("item_id").count().where("count > 1").first()
        raise InputError(
            f"labeled_products: column item_id is not unique ({counts['n'] - counts['ids']} rows repeat an id, e.g. "
            f"{repeated['item_id']!r} in {repeated['count']} rows); keep ingest.dedup on or give each item its own id"
        )
    n_groups = groups.select("group_id").distinct().count()
    if n_groups == 0:
        raise InputError("catalog_groups is empty: no catalog group of versions to test consistency on")

    # Every copy of a drawn title joins the test set (one title may sit under several items): no test title
    # is trained on, as labeled data or, below, as a pseudo-labeled pool item.
    drawn = uniform_sample(labeled, sample_size(cfg.accuracy_test, counts["n"]), seed, ["item_id"], counts["n"])
    test_titles = drawn.select("title")
    if cfg.group_disjoint:
        siblings = groups.join(groups_with_copies(groups, "group_id", "title", drawn, "title"), "group_id")
        test_titles = test_titles.unionByName(siblings.select("title"))
    tr.write(with_copies(test_titles, labeled, "title"), "accuracy_test", config_hash)
    tr.write(
        labeled.join(tr.written("accuracy_test").select("item_id"), "item_id", "left_anti"),
        "labeled_train",
        config_hash,
    )
    d_l = tr.written("labeled_train")
    test = tr.written("accuracy_test")
    leaked = check_no_leak(d_l, "title", test, "title", "consistency-splits: accuracy_test in labeled_train")
    train_counts = d_l.agg(F.count("*").alias("n"), F.countDistinct("category").alias("k")).first()
    check_labels(train_counts["n"], train_counts["k"], "labeled_train (D_L)")

    f_base = train_model(
        ctx,
        tr,
        "labeled_train",
        tr.result.outputs["labeled_train"].version,
        "f_base",
        hash_of(config_hash, tr.inputs),
        seed,
    )
    predicted = predict(groups.select("item_id", "title", "group_id"), f_base).persist(StorageLevel.MEMORY_AND_DISK)
    labels = matched = None
    try:
        labels = truncated(
            group_labels(predicted, cfg.pseudo_label), "group_label", cfg.match_level, "match_label"
        ).persist()
        # The guard, before the match so that the test keeps D_L's histogram: no consistency-test group holds a
        # title D_L trains on.
        eligible = labels.join(groups_with_copies(groups, "group_id", "title", d_l, "title"), "group_id", "left_anti")
        set_aside = labels.count() - eligible.count()
        target = level_histogram(d_l, "category", cfg.match_level)
        matched, plan = subsample(eligible, "match_label", target, seed, ["group_id"])
        matched = matched.persist()
        n_matched = matched.count()
        if n_matched == 0:
            raise InputError(
                f"catalog_groups: no group matches labeled_train's level-{cfg.match_level} categories outside the "
                f"groups holding a labeled_train title ({set_aside} set aside): no consistency test can be drawn"
            )
        test_groups = uniform_sample(
            matched, min(sample_size(cfg.consistency_test, n_groups), n_matched), seed + 1, ["group_id"], n_matched
        ).select("group_id")
        tr.write(version_pairs(groups.join(test_groups, "group_id"), seed), "consistency_test", config_hash)
        pairs = tr.written("consistency_test")
        for side in ("title_1", "title_2"):
            check_no_leak(d_l, "title", pairs, side, f"consistency-splits: consistency_test {side} in labeled_train")
        candidates = predicted.join(test_groups, "group_id", "left_anti").join(labels, "group_id")
        pool = without_copies(candidates, "title", test, "title")
        for side in ("title_1", "title_2"):
            pool = without_copies(pool, "title", pairs, side)
        if cfg.group_disjoint:  # the accuracy test's products: none of their versions trains either
            pool = pool.join(groups_with_copies(groups, "group_id", "title", test, "title"), "group_id", "left_anti")
        tr.write(pool, "unlabeled_pool", config_hash)
        pool_removed = candidates.count() - tr.written_rows("unlabeled_pool")
    finally:
        for frame in (predicted, labels, matched):
            if frame is not None:
                frame.unpersist()
    metrics = {
        "accuracy_test_rows": tr.result.outputs["accuracy_test"].num_rows or 0,
        "labeled_train_rows": train_counts["n"],
        "catalog_groups": n_groups,
        "matched_groups": n_matched,
        # The guards' counts (what each kept off the test or training side).
        "guard_groups_holding_d_l_titles": set_aside,
        "guard_pool_items_holding_test_titles": pool_removed,
        "match_tvd_before": plan.tvd_before,
        "match_tvd_after": plan.tvd_after,
        "consistency_test_pairs": tr.written("consistency_test").count(),
        "unlabeled_pool_items": tr.written("unlabeled_pool").count(),
        "leaked_test_titles": leaked,
    }
    tr.log_dict(asdict(plan), "splits/catalog_match_plan.json")
    log.info("consistency splits: %s", metrics)
    return metrics


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
