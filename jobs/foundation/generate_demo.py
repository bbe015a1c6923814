"""Job ``generate-demo``: write the synthetic e-commerce dataset as landing files.

Reads: nothing (the ``demo`` config section and its seed).
Writes, under ``<lakehouse.root>/landing/``: ``labeled_products/`` (CSV), ``catalog/`` (JSON lines),
``interactions/`` (Parquet, counts aggregated per query, product and interaction), ``products/``
(Parquet) and ``taxonomy.txt`` (Google Product Taxonomy format). A small share of deliberately bad
rows is mixed in so that ingest has something to quarantine. The generation runs on the executors
(``mapInPandas`` over row ranges); the driver only plans the ranges.

Idempotent: a marker file records the config hash, and an unchanged config leaves the files as they
are (so ingest sees the same input versions and skips too), unless ``--force``.
"""

from __future__ import annotations

import json
import logging
from typing import Optional

from common.config import AppConfig
from common.data.schemas import CATALOG_KINDS, DEMO_KINDS
from common.platform.runner.job import JobContext, JobRun, job
from common.platform.storage import exists, read_text, write_text
from jobs import entry_point

log = logging.getLogger(__name__)

NAME = "generate-demo"
MARKER = "_demo.json"

LABELED_SCHEMA = "item_id string, title string, category string"
CATALOG_SCHEMA = (
    "item_id string, title string, group_id string, gtin string, mpn string, brand string, true_category string"
)
INTERACTIONS_SCHEMA = "query string, product_id string, interaction string, count long"


def landing_dir(cfg: AppConfig) -> str:
    """Where the demo's landing files go: ``<lakehouse.root>/landing``."""
    return f"{cfg.lakehouse.root.rstrip('/')}/landing"


def world_hash(cfg) -> str:
    """The demo world's hash: ``section_hash("demo")`` of the section less ``generate``, which says when the
    world is written, not what it holds (worlds written before the key existed keep their hash)."""
    import hashlib

    tree = {k: v for k, v in cfg.to_dict()["demo"].items() if k != "generate"}
    return hashlib.sha256(json.dumps({"demo": tree}, sort_keys=True, default=str).encode()).hexdigest()[:16]


@job(NAME)
def run(ctx: JobContext, tr: JobRun) -> Optional[dict[str, float]]:
    """Generate the demo landing files; returns the row counts written (good + planted bad rows)."""
    landing = landing_dir(ctx.cfg)
    config_hash = world_hash(ctx.cfg)
    marker = f"{landing}/{MARKER}"
    kinds = CATALOG_KINDS if ctx.cfg.demo.generate == "catalog" else DEMO_KINDS
    configured = [k for k in kinds if getattr(ctx.cfg.inputs, k)]
    if configured:
        # Pipelines start with this job; on the user's own inputs there is nothing to generate.
        log.info("inputs configured (%s): demo generation skipped", ", ".join(configured))
        tr.set_tags({"skipped": "inputs configured"})
        return None
    written = json.loads(read_text(marker)) if exists(marker) else {}
    if written.get("config_hash") == config_hash and not ctx.force:
        counts = written["rows"]
        log.info("demo landing files for config %s already exist under %s; skipping", config_hash, landing)
        tr.set_tags({"skipped": "true"})
    else:
        counts = _generate(ctx, landing)
        write_text(marker, json.dumps({"config_hash": config_hash, "rows": counts}, indent=2))
    tr.set_tags({"landing": landing})
    return {f"rows.{k}": v for k, v in counts.items()}


def _generate(ctx: JobContext, landing: str) -> dict[str, int]:
    from pyspark.sql import functions as F

    from common.data.demo import interactions as demo_interactions
    from common.data.demo import rows as demo_rows
    from common.data.demo import vocabulary as demo_vocabulary
    from common.data.demo import world as demo_world

    spark = ctx.spark
    cfg = ctx.cfg.demo
    world = demo_world.World(cfg)
    parts = cfg.partitions

    def ranges(total: int):
        # Several ranges per partition keep tasks short; only (start, stop) pairs leave the driver.
        return spark.createDataFrame(list(demo_rows.chunks(total, parts * 4)), "start long, stop long").repartition(
            parts
        )

    def gen_labeled(batches):
        for batch in batches:
            for start, stop in zip(batch["start"], batch["stop"]):
                yield demo_rows.labeled_rows(cfg, int(start), int(stop))

    def gen_catalog(batches):
        for batch in batches:
            for start, stop in zip(batch["start"], batch["stop"]):
                yield demo_rows.catalog_rows(cfg, int(start), int(stop))

    def gen_interactions(batches):
        for batch in batches:
            for start, stop in zip(batch["start"], batch["stop"]):
                yield demo_interactions.interaction_rows(cfg, int(start), int(stop))

    def bad(kind: str, n_good: int, schema: str):
        n_bad = int(round(n_good * cfg.bad_row_fraction))
        return spark.createDataFrame(demo_rows.bad_rows(kind, cfg, n_bad), schema), n_bad

    labeled = ranges(world.n_labeled).mapInPandas(gen_labeled, LABELED_SCHEMA)
    labeled_bad, n_labeled_bad = bad("labeled", world.n_labeled, LABELED_SCHEMA)
    labeled.unionByName(labeled_bad).write.mode("overwrite").option("header", "true").option("escape", '"').csv(
        f"{landing}/labeled_products"
    )

    catalog = ranges(world.n_groups).mapInPandas(gen_catalog, CATALOG_SCHEMA).cache()
    n_catalog = int(world.size.sum())
    catalog_bad, n_catalog_bad = bad("catalog", n_catalog, CATALOG_SCHEMA)
    catalog.unionByName(catalog_bad).write.mode("overwrite").json(f"{landing}/catalog")

    products = catalog.select(F.col("item_id").alias("product_id"), "title")
    products_bad, n_products_bad = bad("products", n_catalog, "product_id string, title string")
    products.unionByName(products_bad).write.mode("overwrite").parquet(f"{landing}/products")
    catalog.unpersist()

    sessions = ranges(world.n_sessions).mapInPandas(gen_interactions, INTERACTIONS_SCHEMA)
    interactions = sessions.groupBy("query", "product_id", "interaction").agg(F.sum("count").alias("count"))
    interactions_bad, n_inter_bad = bad("interactions", world.n_sessions, INTERACTIONS_SCHEMA)
    interactions.unionByName(interactions_bad).write.mode("overwrite").parquet(f"{landing}/interactions")
    n_interactions = spark.read.parquet(f"{landing}/interactions").count()

    write_text(f"{landing}/taxonomy.txt", "\n".join(demo_vocabulary.taxonomy_lines()) + "\n")
    return {
        "labeled_products": world.n_labeled + n_labeled_bad,
        "labeled_products_bad": n_labeled_bad,
        "catalog": n_catalog + n_catalog_bad,
        "catalog_bad": n_catalog_bad,
        "products": n_catalog + n_products_bad,
        "products_bad": n_products_bad,
        "interactions": n_interactions,
        "interactions_bad": n_inter_bad,
    }


main = entry_point(NAME, run, __doc__)

if __name__ == "__main__":
    main()
