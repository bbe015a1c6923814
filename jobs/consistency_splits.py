"""Job ``consistency-splits``: the consistency paper's test sets, D_L, f_base and D_U.

Reads: ``labeled_products``, ``catalog_groups``.
1. Accuracy test: a uniform sample of the labeled data (``consistency.accuracy_test``, fraction or
   count); the rest is D_L.
2. f_base: HFT trained on D_L (Ray actors); it labels every catalog item, and each group gets one
   pseudo-label h(X_i; f_base) (``consistency.pseudo_label``).
3. The catalog is matched to D_L's label histogram at ``consistency.match_level`` (L1, as in the
   paper) by an exact group sub-sample, labelled by f_base's prediction since the catalog has no
   labels; the consistency test samples ``consistency.consistency_test`` groups (fraction of all
   groups, or count) from it and takes one pair of different titles from each.
4. D_U: every catalog group not in the consistency test, with f_base's predictions and pseudo-labels.
Writes: ``accuracy_test``, ``labeled_train`` (D_L), ``consistency_test``, ``unlabeled_pool`` (D_U);
f_base goes to MLflow.
"""
from __future__ import annotations

import logging
import sys
from dataclasses import asdict
from typing import Optional, Sequence

from common.job import JobContext, JobResult, hash_of, job_main

log = logging.getLogger(__name__)

NAME = "consistency-splits"


def check_labels(n_rows: int, n_classes: int, table: str) -> None:
    """Fail clearly on training data no classifier can learn from."""
    from common.classifier import TrainingDataError

    if n_rows == 0:
        raise TrainingDataError(f"{table} is empty: nothing to train on")
    if n_classes < 2:
        raise TrainingDataError(f"{table} has a single category: a classifier needs at least two classes")


def train_model(ctx: JobContext, tr, table: str, version: int, name: str, key: str, seed: int):
    """Train an HFT on a lakehouse table version (reusing a model already trained from the same key)."""
    from pathlib import Path

    from pyspark.sql import functions as F

    from common.classifier import HFTModel, HFTTrainerPool, stats_dict, train_hft
    from common.taxonomy import depth_col

    depth = ctx.lakehouse.read(table, version).agg(F.max(depth_col(F.col("category")))).first()[0]
    out_dir = ctx.models_dir(name, key)
    if not ctx.force and all(Path(out_dir, f"level_{i}.bin").is_file() for i in range(1, depth + 1)):
        log.info("reusing %s model at %s", name, out_dir)
        return HFTModel(uri=out_dir, depth=depth)
    pool = HFTTrainerPool(ctx.ray())
    try:
        model, stats = train_hft(pool, ctx.lakehouse.file_uris(table, version), depth, ctx.cfg.consistency.fasttext,
                                 seed, out_dir)
    finally:
        pool.close()
    tr.log_dict(stats_dict(stats), f"models/{name}/training_stats.json")
    if "://" not in out_dir:
        tr.log_artifact(out_dir, "models")
    return model


def run(ctx: JobContext) -> JobResult:
    """Build the splits; returns the table versions and their sizes."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from common.classifier import predict
    from common.consistency import (group_labels, level_histogram, sample_size, truncated, uniform_sample,
                                    version_pairs)
    from common.sampling import subsample

    cfg = ctx.cfg.consistency
    seed = ctx.cfg.seed
    result = JobResult(job=NAME)
    with ctx.tracked(NAME) as tr:
        result.run_id = tr.run_id
        labeled, labeled_v = ctx.read_table(tr, "labeled_products")
        groups, groups_v = ctx.read_table(tr, "catalog_groups")
        inputs = {"labeled_products": str(labeled_v), "catalog_groups": str(groups_v)}
        config_hash = hash_of(cfg.accuracy_test, cfg.consistency_test, cfg.match_level, cfg.pseudo_label,
                              asdict(cfg.fasttext), seed)
        counts = labeled.agg(F.count("*").alias("n"), F.countDistinct("category").alias("k")).first()
        check_labels(counts["n"], counts["k"], "labeled_products")
        n_groups = groups.select("group_id").distinct().count()
        if n_groups == 0:
            raise ValueError("catalog_groups is empty: no catalog group of versions to test consistency on")

        test = uniform_sample(labeled, sample_size(cfg.accuracy_test, counts["n"]), seed, ["item_id"])
        train = labeled.join(test.select("item_id"), "item_id", "left_anti")
        out = result.outputs
        out["accuracy_test"] = ctx.write(tr, test, "accuracy_test", config_hash, inputs)
        out["labeled_train"] = ctx.write(tr, train, "labeled_train", config_hash, inputs)
        train_counts = ctx.lakehouse.read("labeled_train", out["labeled_train"].version) \
            .agg(F.count("*").alias("n"), F.countDistinct("category").alias("k")).first()
        check_labels(train_counts["n"], train_counts["k"], "labeled_train (D_L)")

        f_base = train_model(ctx, tr, "labeled_train", out["labeled_train"].version, "f_base",
                             hash_of(config_hash, inputs), seed)
        predicted = predict(groups.select("item_id", "title", "group_id"), f_base) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        labels = matched = None
        try:
            labels = truncated(group_labels(predicted, cfg.pseudo_label), "group_label", cfg.match_level,
                               "match_label").persist()
            d_l = ctx.lakehouse.read("labeled_train", out["labeled_train"].version)
            target = level_histogram(d_l, "category", cfg.match_level)
            matched, plan = subsample(labels, "match_label", target, seed, ["group_id"])
            matched = matched.persist()
            n_matched = matched.count()
            test_groups = uniform_sample(matched, min(sample_size(cfg.consistency_test, n_groups), n_matched),
                                         seed + 1, ["group_id"]).select("group_id")
            pairs = version_pairs(groups.join(test_groups, "group_id"), seed)
            out["consistency_test"] = ctx.write(tr, pairs, "consistency_test", config_hash, inputs)
            pool = predicted.join(test_groups, "group_id", "left_anti").join(labels, "group_id")
            out["unlabeled_pool"] = ctx.write(tr, pool, "unlabeled_pool", config_hash, inputs)
        finally:
            for frame in (predicted, labels, matched):
                if frame is not None:
                    frame.unpersist()
        result.metrics = {
            "accuracy_test_rows": float(out["accuracy_test"].num_rows or 0),
            "labeled_train_rows": float(train_counts["n"]),
            "catalog_groups": float(n_groups),
            "matched_groups": float(n_matched),
            "match_tvd_before": plan.tvd_before,
            "match_tvd_after": plan.tvd_after,
            "consistency_test_pairs": float(ctx.lakehouse.read("consistency_test", out["consistency_test"].version)
                                            .count()),
            "unlabeled_pool_items": float(ctx.lakehouse.read("unlabeled_pool", out["unlabeled_pool"].version).count()),
        }
        tr.log_metrics(result.metrics)
        tr.log_dict(asdict(plan), "splits/catalog_match_plan.json")
        log.info("consistency splits: %s", result.metrics)
    return result


def main(argv: Optional[Sequence[str]] = None) -> JobResult:
    """CLI / spark-submit entry: ``augment run consistency-splits [--conf FILE] [--set k=v ...]``."""
    return job_main(NAME, run, argv, description=__doc__.splitlines()[0])


if __name__ == "__main__":
    main(sys.argv[1:])
