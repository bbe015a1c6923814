"""Exact duplicates in the real inputs: what ingest's dedup (``ingest.dedup``) quarantines in each measured config.

Usage: python benchmarks/data/dedup_report.py [--near THRESHOLD] [conf/NAME.yaml ...]
       (default: every conf/*.yaml with real inputs; --near adds MinHash near duplicates at that Jaccard)

For every input a config names, reads it as ``ingest`` does, validates it and runs the duplicate detection,
then prints rows in, kept, and the rows quarantined as exact duplicates, conflicting labels, repeated ids and
for other reasons, with the time the detection took (the read and validation alone, then with dedup).
Writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

KINDS = ("labeled", "catalog", "interactions", "products", "texts", "documents", "topic_corpus", "multilabel")


def main() -> None:
    from pyspark.sql import functions as F

    from common.algorithms.near_duplicates import CLUSTER_COL, split_near_duplicates
    from common.config import load_config
    from common.data.duplicates import report, with_duplicate_reasons
    from common.data.quarantine import kept, reason_counts, with_reasons
    from common.data.readers import read_input
    from common.data.schemas import CONTRACTS
    from common.platform.compute.session import get_spark
    from common.platform.config import SparkConfig

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="*")
    parser.add_argument("--near", type=float, default=None, help="also count near duplicates at this Jaccard")
    args = parser.parse_args()
    configs = args.configs or sorted(
        str(p)
        for p in (REPO / "conf").glob("*.yaml")
        if p.name not in ("local.yaml", "demo.yaml", "cluster.yaml", "databricks.yaml")
    )
    spark = get_spark(
        SparkConfig(
            master="local[2]", shuffle_partitions=4, driver_memory="2g", checkpoint_dir="/tmp/dedup-report-checkpoints"
        )
    )
    spark.sparkContext.setLogLevel("ERROR")
    print(
        f"{'config':<24} {'input':<13} {'rows in':>8} {'kept':>8} {'dupl.':>6} {'confl.':>6} {'rep.id':>6} "
        f"{'other':>6} {'valid s':>8} {'dedup s':>8}"
        + (f" {'near':>6} {'clust.':>6} {'near s':>7}" if args.near else "")
    )
    for path in configs:
        cfg = load_config(path)
        for kind in KINDS:
            spec = getattr(cfg.inputs, kind)
            if spec is None:
                continue
            contract = CONTRACTS[kind]
            raw = read_input(spark, spec, contract, label_separator=cfg.ingest.label_separator)
            start = time.perf_counter()
            plain = reason_counts(with_reasons(raw.df, contract, cfg.ingest, None, spec.strip_markup), raw.location)
            valid_s = time.perf_counter() - start
            start = time.perf_counter()
            validated = with_duplicate_reasons(
                with_reasons(raw.df, contract, cfg.ingest, None, spec.strip_markup),
                contract,
                cfg.ingest,
                None,
                raw.absent,
            ).cache()
            counts = reason_counts(validated, raw.location)
            dedup_s = time.perf_counter() - start
            near = ""
            if args.near and contract.dedup.text:
                start = time.perf_counter()
                rows = kept(validated, contract, cfg.ingest)
                key = contract.dedup.id or "_key"
                if key == "_key":
                    rows = rows.withColumn(key, F.sha2(F.to_json(F.struct(*contract.column_names)), 256))
                _, members = split_near_duplicates(rows, key, contract.dedup.text, args.near)
                stats = members.agg(F.count(F.lit(1)), F.countDistinct(CLUSTER_COL)).first()
                near = f" {stats[0]:>6} {stats[1]:>6} {time.perf_counter() - start:>7.1f}"
            dedup = report(counts)
            n_in = sum(counts.values())
            assert n_in == sum(plain.values())  # dedup only fills reasons: rows in are the same
            other = n_in - counts.get(None, 0) - sum(dedup.values())
            print(
                f"{Path(path).stem:<24} {kind:<13} {n_in:>8} {counts.get(None, 0):>8} {dedup['duplicate']:>6} "
                f"{dedup['conflicting']:>6} {dedup['repeated_id']:>6} {other:>6} {valid_s:>8.1f} {dedup_s:>8.1f}"
                + near
            )
            validated.unpersist()
    spark.stop()


if __name__ == "__main__":
    main()
