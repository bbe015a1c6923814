"""Invariants of the synthetic demo world (pure pandas: no Spark needed)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from common.data.config import DemoConfig
from common.data.demo import interactions as demo_interactions
from common.data.demo import rows as demo_rows
from common.data.demo import vocabulary as demo_vocabulary
from common.data.demo import world as demo_world
from common.data.taxonomy import Taxonomy


@pytest.fixture(scope="module")
def cfg():
    return DemoConfig(n_labeled=3000, n_groups=1500, n_sessions=1500)


@pytest.fixture(scope="module")
def labeled(cfg):
    return demo_rows.labeled_rows(cfg, 0, cfg.n_labeled)


@pytest.fixture(scope="module")
def catalog(cfg):
    return demo_rows.catalog_rows(cfg, 0, cfg.n_groups)


def test_rows_do_not_depend_on_partitioning_and_follow_the_seed(cfg):
    for fn, total in (
        (demo_rows.labeled_rows, 60),
        (demo_rows.catalog_rows, 30),
        (demo_interactions.interaction_rows, 40),
    ):
        whole = fn(cfg, 0, total)
        pieces = pd.concat([fn(cfg, a, b) for a, b in demo_rows.chunks(total, 3)], ignore_index=True)
        pd.testing.assert_frame_equal(whole, pieces)
    other = demo_rows.labeled_rows(DemoConfig(seed=cfg.seed + 1), 0, 60)
    assert not other.equals(demo_rows.labeled_rows(cfg, 0, 60))


def test_taxonomy_is_four_levels_and_labels_are_its_leaves(labeled, tmp_path):
    path = tmp_path / "taxonomy.txt"
    path.write_text("\n".join(demo_vocabulary.taxonomy_lines()) + "\n")
    taxonomy = Taxonomy.from_google_file(path)
    assert taxonomy.max_depth == 4 and {len(p.split(" > ")) for p in taxonomy.leaves()} == {4}
    assert taxonomy.leaves() == sorted(demo_vocabulary.leaf_paths())
    assert set(labeled.category) <= set(demo_vocabulary.leaf_paths())
    assert labeled.category.nunique() == len(demo_vocabulary.leaf_paths()) == 28
    assert labeled.item_id.is_unique


def test_groups_have_paper_sizes_and_distinct_versions(cfg, catalog):
    group_of = catalog.item_id.str[:8]
    sizes = group_of.value_counts()
    assert sizes.min() >= cfg.group_size_min and sizes.max() <= cfg.group_size_max
    assert abs(sizes.mean() - cfg.group_size_mean) < 0.25
    assert catalog.item_id.is_unique
    assert (catalog.groupby(group_of).title.nunique() == sizes.sort_index()).all()  # versions differ
    assert (catalog.groupby(group_of).true_category.nunique() == 1).all()  # one item, one category
    null_share = catalog.group_id.isna().groupby(group_of).first().mean()
    assert abs(null_share - cfg.null_group_fraction) < 0.05


def test_groups_without_group_id_are_recoverable_from_identifiers(catalog):
    rows = catalog[catalog.group_id.isna()].reset_index(drop=True)
    parent = list(range(len(rows)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for column in ("mpn", "gtin"):
        for _, idx in rows.groupby(column).groups.items():
            idx = list(idx)
            for j in idx[1:]:
                parent[find(j)] = find(idx[0])
    components = pd.Series([find(i) for i in range(len(rows))])
    truth = rows.item_id.str[:8]
    # Every true group is exactly one component: no splits, no merges.
    assert (components.groupby(truth).nunique() == 1).all()
    assert (truth.groupby(components).nunique() == 1).all()
    assert rows.mpn.isna().any()  # some versions are linked only through their gtin


def _colour_follows_leaf(frame: pd.DataFrame, cfg: DemoConfig, category_col: str) -> float:
    world = demo_world.World(cfg)
    index = {path: i for i, path in enumerate(demo_vocabulary.leaf_paths())}
    hits = []
    for title, category in zip(frame.title, frame[category_col]):
        words = set(re.findall(r"[a-z]+", title.lower()))
        colour = next(c for c in demo_vocabulary.COLOURS if c in words)
        hits.append(demo_vocabulary.COLOURS.index(colour) in set(world.leaf_colours[index[category]]))
    return float(np.mean(hits))


def test_spurious_colour_correlation_is_planted_in_labeled_data_only(cfg, labeled, catalog):
    expected = cfg.spurious_strength + (1 - cfg.spurious_strength) * 0.5
    assert abs(_colour_follows_leaf(labeled, cfg, "category") - expected) < 0.03
    assert abs(_colour_follows_leaf(catalog, cfg, "true_category") - 0.5) < 0.04


def test_a_naive_classifier_is_visibly_inconsistent_on_groups(tmp_path):
    fasttext = pytest.importorskip("fasttext")

    def consistency(strength: float) -> float:
        cfg = DemoConfig(n_labeled=3000, n_groups=800, spurious_strength=strength)
        train = tmp_path / f"train-{strength}.txt"
        lab = demo_rows.labeled_rows(cfg, 0, cfg.n_labeled)
        train.write_text(
            "".join(f"__label__{c.replace(' ', '_')} {t.lower()}\n" for t, c in zip(lab.title, lab.category))
        )
        model = fasttext.train_supervised(
            input=str(train), epoch=20, lr=0.5, wordNgrams=2, verbose=0, thread=1, seed=1
        )
        cat = demo_rows.catalog_rows(cfg, 0, cfg.n_groups)
        cat["pred"] = [p[0] for p in model.predict([t.lower() for t in cat.title])[0]]
        pairs = cat.groupby(cat.item_id.str[:8]).pred.agg(lambda s: s.iloc[0] == s.iloc[1])
        return float(pairs.mean())

    planted, clean = consistency(0.9), consistency(0.0)
    assert planted < 0.7, planted
    assert planted < clean - 0.05, (planted, clean)


def test_interactions_mix_specific_and_broad_queries(cfg):
    log = demo_interactions.interaction_rows(cfg, 0, cfg.n_sessions)
    assert set(log.interaction) == {"click", "add_to_cart", "purchase"}
    products_per_query = log[log.interaction == "click"].groupby("query").product_id.nunique()
    assert products_per_query.max() >= 10  # broad queries spread over many products
    assert (products_per_query == 1).mean() > 0.3  # specific queries hit one product
    world = demo_world.World(cfg)
    valid = {f"C{g:07d}-{k:03d}" for g in range(world.n_groups) for k in range(int(world.size[g]))}
    assert set(log.product_id) <= valid


def test_bad_rows_each_break_a_rule():
    bad = demo_rows.bad_rows("labeled", DemoConfig(), 8)
    assert len(bad) == 8 and bad.item_id.str.startswith("BAD-").all()
    assert (bad.title.str.strip() == "").sum() == 2
