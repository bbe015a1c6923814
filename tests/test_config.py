"""Config loading, overrides and validation errors."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from common.config import AppConfig, load_config
from common.data.config import InputSpec
from common.platform.config_loader import ConfigError, parse_override

REPO = Path(__file__).resolve().parents[1]


def test_defaults_are_the_embedded_local_setup_and_paper_values():
    cfg = load_config(None, [])
    assert cfg.spark.mode == "local" and cfg.ray.mode == "local"
    assert cfg.lakehouse.root == str(Path("lakehouse").resolve())
    assert cfg.tracking_uri == f"sqlite:///{Path('lakehouse').resolve() / 'mlflow.db'}"
    # Consistency paper: group sizes 2..192 with mean 3.6.
    assert (cfg.demo.group_size_min, cfg.demo.group_size_max, cfg.demo.group_size_mean) == (2, 192, 3.6)


@pytest.mark.parametrize("name", ["local.yaml", "cluster.yaml", "databricks.yaml"])
def test_shipped_configs_load(name, monkeypatch):
    monkeypatch.setenv("AUGMENT_BUCKET", "s3://bucket/augment")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    cfg = load_config(REPO / "conf" / name)
    assert cfg.name == name.removesuffix(".yaml")
    if name == "cluster.yaml":
        assert cfg.lakehouse.root == "s3://bucket/augment/lakehouse"
        assert cfg.inputs.labeled == InputSpec(path="s3://bucket/augment/raw/labeled_products")
        assert cfg.spark.delta == "native"
    if name in ("cluster.yaml", "databricks.yaml"):  # production generators fine-tune a real T5
        assert cfg.cga.model.kind == cfg.query_reformulation.model.kind == "checkpoint"
        assert "t5" in cfg.cga.model.name_or_path
        # and so do the papers' generators: genre's per-genre models, compositional's, BoostAug's infiller
        for model in (cfg.genre.generator.model, cfg.compositional.generator.model, cfg.boostaug.contextual.model):
            assert model.kind == "checkpoint" and "t5" in model.name_or_path
        assert cfg.genre.generator.fine_tune.learning_rate == 1e-3  # the paper's t5-small rate
        assert cfg.boostaug.contextual.mask == "<extra_id_0>"
    else:
        # the demo-full world generates with the offline pretrained model, CGA's fine-tune bounded in steps
        assert cfg.spark.delta == "native"
        assert cfg.cga.model.kind == cfg.query_reformulation.model.kind == "warm_minilm"
        assert cfg.cga.fine_tune.max_steps == 500
    if name == "databricks.yaml":
        # One source for the method settings: Databricks extends the cluster config and changes the platform, the
        # tables and the GPU work; the papers' generator settings are the cluster's.
        from common.platform.config_loader import load_tree

        assert (
            load_tree(REPO / "conf" / "databricks.yaml")["genre"]["generator"]["model"]
            == load_tree(REPO / "conf" / "cluster.yaml")["genre"]["generator"]["model"]
        )
        assert (cfg.spark.checkpoint_dir, cfg.ray.address, cfg.ray.mode) == (None, None, "spark")
        assert cfg.lakehouse.catalog == "main.augment"
        assert cfg.inputs.catalog.path == "main.retail.catalog_items"  # a table name stays as it is
        # BoostAug's contextual backend fills T5's own span sentinel
        assert "contextual" in cfg.boostaug.backends and cfg.boostaug.contextual.mask == "<extra_id_0>"
        assert cfg.boostaug.contextual.model.name_or_path == "t5-small"
        # genre's BERT classifier: the partial section keeps the section's paper settings (lr 1e-5, 6 epochs)
        enc = cfg.genre.eval.encoder
        assert cfg.genre.eval.models == ["fasttext", "encoder"] and enc.name_or_path == "bert-base-uncased"
        assert (enc.learning_rate, enc.epochs, enc.max_length, enc.mlm_weight, enc.num_gpus) == (1e-5, 6, 256, 0.0, 1)


MEASURED = sorted(
    p.name
    for p in (REPO / "conf").glob("*.yaml")
    if p.name
    not in (
        "local.yaml",
        "cluster.yaml",
        "databricks.yaml",
        "demo.yaml",
        "cluster_demo.yaml",
        "boostaug_brown.yaml",
        "endpoint_demo.yaml",
    )
)


@pytest.mark.parametrize("name", MEASURED)
def test_measured_configs_load_with_their_own_lakehouse_and_real_inputs(name):
    """The configs README's measurements name (real data in ../shared/data) load, each into a lakehouse of its
    own (so a measurement never writes into the local default's), and every input path they give exists."""
    cfg = load_config(REPO / "conf" / name)
    assert cfg.lakehouse.root != load_config(REPO / "conf" / "local.yaml").lakehouse.root
    given = [spec for spec in vars(cfg.inputs).values() if isinstance(spec, InputSpec)]
    assert given, f"{name} names no input"
    for spec in given:
        assert "/shared/data/" in spec.path and glob.glob(spec.path), spec.path


def test_long_text_config_reads_what_its_script_cuts_from_brown(tmp_path, monkeypatch):
    """conf/boostaug_brown.yaml reads the passages benchmarks/classifiers/long_texts.py cuts from ../shared/data/brown:
    its input glob is the script's output folder, which holds three splits of 40-60-word passages, every genre in each,
    about 7,000 of them for training, and no passage on two sides."""
    import csv
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("long_texts", REPO / "benchmarks" / "classifiers" / "long_texts.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    cfg = load_config(REPO / "conf" / "boostaug_brown.yaml")
    assert cfg.inputs.texts.path == str(REPO / "lakehouse-inputs" / "brown-passages" / "*.csv")
    assert cfg.lakehouse.root != load_config(REPO / "conf" / "local.yaml").lakehouse.root
    monkeypatch.setattr(sys, "argv", ["long_texts.py", "--out", str(tmp_path)])
    script.main()
    splits = {}
    for path in sorted(glob.glob(str(tmp_path / "*.csv"))):
        with open(path, newline="", encoding="utf-8") as handle:
            splits[Path(path).stem] = list(csv.DictReader(handle))
    assert sorted(splits) == ["dev", "test", "train"] and 6500 <= len(splits["train"]) <= 7500
    for rows in splits.values():
        assert all(40 <= len(r["text"].split()) <= 60 for r in rows) and len({r["label"] for r in rows}) == 15
    texts = [{r["text"] for r in rows} for rows in splits.values()]
    assert sum(map(len, texts)) == len(set().union(*texts))


def test_the_best_buy_config_reformulates_with_the_causal_lm():
    cfg = load_config(REPO / "conf" / "query_bestbuy.yaml")
    assert cfg.query_reformulation.model.kind == "smollm2"
    assert cfg.query_graph.cooccurrence_interactions == ["click"]
    assert cfg.inputs.interactions.defaults == {"interaction": "click", "count": "1"}


def test_overrides_parse_yaml_scalars_and_shorthand(tmp_path):
    cfg = load_config(
        None,
        [
            "demo.scale=2.5",
            "demo.n_groups=10",
            "spark.conf={spark.sql.adaptive.enabled: 'false'}",
            f"inputs.labeled={tmp_path}/labeled.csv",
            "inputs.catalog.path=cat.parquet",
            "inputs.catalog.format=parquet",
        ],
    )
    assert cfg.demo.scale == 2.5 and cfg.demo.n_groups == 10
    assert cfg.spark.conf == {"spark.sql.adaptive.enabled": "false"}
    assert cfg.inputs.labeled.path == f"{tmp_path}/labeled.csv" and cfg.inputs.labeled.format == "auto"
    assert cfg.inputs.catalog.format == "parquet" and cfg.inputs.catalog.path.endswith("/cat.parquet")
    assert parse_override("a.b=x:y") == ("a.b", "x:y")


@pytest.mark.parametrize(
    "override, message",
    [
        ("spark.mster=local[1]", "unknown config key spark.mster"),
        ("nope=1", "unknown config key nope"),
        ("spark.mode=yarn", "spark.mode: 'yarn' is not allowed; allowed values: 'local', 'cluster', 'databricks'"),
        ("demo.n_groups=many", "demo.n_groups: expected an integer"),
        ("demo.spurious_strength=1.5", "demo.spurious_strength: must be in [0, 1]"),
        ("demo.group_size_min=1", "demo.group_size_min"),
        ("ray.mode=address", "ray.address: is required"),
        ("spark.graphframes=yes", "spark.graphframes"),
        ("inputs.labeled.format=xlsx", "inputs.labeled.format: 'xlsx' is not allowed"),
        (
            "genre.generator.model.scratch=null",
            "genre.generator.model.scratch: kind 'scratch_t5' needs the scratch shape",
        ),
        ("genre.generator.synthetic_ratio=0", "genre.generator.synthetic_ratio: must be > 0, or null"),
        ("cga.model.kind=checkpoint", "cga.model.name_or_path: kind 'checkpoint' needs name_or_path"),
        ("cga.model.name_or_path=t5-base", "cga.model.name_or_path: is set but kind is 'warm_minilm'"),
        ("cga.model.kind=t5", "cga.model.kind: 't5' is not allowed"),
        (
            "query_reformulation.fine_tune.grad_accumulation=0",
            "query_reformulation.fine_tune.grad_accumulation: must be",
        ),
        ("cga.fine_tune.max_steps=-1", "cga.fine_tune.max_steps: must be >= 0"),
        ("cga.model.scratch.d_model=65", "cga.model.scratch.d_model: must be a multiple of num_heads"),
        ("cga.generation.mode=greedy", "cga.generation.mode: 'greedy' is not allowed"),
        ("cga.threshold=1.5", "cga.threshold: must be in [0, 1]"),
    ],
)
def test_bad_values_fail_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert message in str(err.value)


def test_bad_yaml_file_names_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="bad.yaml: the top level must be a mapping"):
        load_config(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_section_hash_is_stable_and_sensitive():
    a = load_config(None, ["demo.seed=1"])
    b = load_config(None, ["demo.seed=1", "spark.master=local[1]"])
    c = load_config(None, ["demo.seed=2"])
    assert a.section_hash("demo") == b.section_hash("demo")  # other sections do not matter
    assert a.section_hash("demo") != c.section_hash("demo")
    with pytest.raises(ConfigError, match="unknown config section"):
        a.section_hash("nope")
    assert isinstance(AppConfig().flat()["demo.seed"], int)


def test_generative_defaults_are_the_papers():
    cfg = AppConfig()
    # CGA: 3 epochs, n = 8 samples, BLEU, T = 0.7, sweeps T in {0.5..0.8} and N in {50k..400k}.
    assert cfg.cga.fine_tune.epochs == 3 and cfg.cga.generation.n_samples == 8
    assert (cfg.cga.scorer, cfg.cga.threshold, cfg.cga.n) == ("bleu", 0.7, None)
    assert cfg.cga.sweep.thresholds == [0.5, 0.6, 0.7, 0.8] and cfg.cga.sweep.sizes == [
        50_000,
        100_000,
        200_000,
        400_000,
    ]
    assert (cfg.cga.generation.top_k, cfg.cga.generation.top_p) == (50, 0.95)
    # Query reformulation: 2 epochs, batch 32 x accumulation 16 = 512, lr 3e-4.
    ft = cfg.query_reformulation.fine_tune
    assert (ft.epochs, ft.batch_size, ft.grad_accumulation, ft.learning_rate) == (2, 32, 16, 3e-4)
    # The model kinds: a checkpoint (production), the MiniLM warm start (the default without a name), scratch.
    production = load_config(
        None, ["query_reformulation.model.kind=checkpoint", "query_reformulation.model.name_or_path=t5-base"]
    )
    from common.models.config import T5ModelConfig
    from common.models.generation.fine_tune_specs import ModelSpec

    spec = ModelSpec.from_config(production.query_reformulation.model)
    assert (spec.kind, spec.model_name_or_path) == ("checkpoint", "t5-base")
    assert T5ModelConfig().kind == "warm_minilm" and T5ModelConfig(name_or_path="t5-small").kind == "checkpoint"
    assert ModelSpec.from_config(T5ModelConfig()).kind == "warm_minilm"


def test_a_partial_section_keeps_what_its_own_default_changes():
    # compositional.qc.fasttext defaults to one-vs-all at lr 0.2; setting its epochs alone must not turn it
    # back into FastTextConfig's softmax at lr 0.5 (nor the evaluation encoder's lr into BoostAug's).
    cfg = load_config(
        None,
        [
            "compositional.qc.fasttext.epoch=3",
            "compositional.eval.encoder.epochs=1",
            "query_reformulation.fine_tune.epochs=7",
        ],
    )
    assert (cfg.compositional.qc.fasttext.loss, cfg.compositional.qc.fasttext.lr) == ("ova", 0.2)
    assert cfg.compositional.qc.fasttext.epoch == 3
    assert (cfg.compositional.eval.encoder.learning_rate, cfg.compositional.eval.encoder.mlm_weight) == (2e-5, 0.0)
    assert cfg.compositional.eval.encoder.epochs == 1
    full = load_config(None, [])
    changed = {
        k
        for k, v in vars(cfg.query_reformulation.fine_tune).items()
        if v != getattr(full.query_reformulation.fine_tune, k)
    }
    assert changed == {"epochs"}
    # naming a checkpoint keeps the section default's lengths (genre's: 256 target tokens for a passage)
    from common.genre.config import GenreConfig
    from common.platform.config_loader import from_mapping

    named = from_mapping(GenreConfig, {"generator": {"model": {"name_or_path": "t5-small"}}}, "genre.").generator.model
    assert (named.kind, named.name_or_path, named.max_target_length) == ("checkpoint", "t5-small", 256)
    # unnamed, the generators are the offline pretrained model at its own learning rate (not t5-small's 1e-3)
    default = GenreConfig().generator
    assert (default.model.kind, default.fine_tune.learning_rate, default.fine_tune.epochs) == ("warm_minilm", 1e-4, 16)
    # a value given explicitly still wins over the section's default
    assert load_config(None, ["compositional.qc.fasttext.loss=softmax"]).compositional.qc.fasttext.loss == "softmax"


@pytest.mark.parametrize("name", ["cluster.yaml", "databricks.yaml"])
def test_the_documented_causal_alternative_loads(name, monkeypatch):
    """The production configs name a causal checkpoint in a comment (cluster.yaml, whose method settings
    databricks.yaml extends), as a --set override: that exact text loads in both, gives a causal section, and keeps
    the section's own prompt."""
    import re

    monkeypatch.setenv("AUGMENT_BUCKET", "s3://bucket/augment")
    monkeypatch.setenv("RAY_ADDRESS", "ray://head:10001")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    override = re.search(
        r"--set '(cga\.model=\{kind: causal_checkpoint[^']*)'", (REPO / "conf" / "cluster.yaml").read_text()
    )
    assert override, "conf/cluster.yaml no longer names a causal checkpoint"
    cfg = load_config(REPO / "conf" / name, [override.group(1)])
    assert cfg.cga.model.causal and cfg.cga.model.name_or_path == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert cfg.cga.model.prompt.startswith("Product title: {source}") and cfg.cga.model.lora_r == 16


def test_a_config_extends_others_mapping_by_mapping(tmp_path):
    """``extends`` lays a file over the files it names (in order, relative to its folder): mappings merge key by key,
    scalars and lists replace; a cycle and a bad value fail naming the file."""
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "a.yaml").write_text(
        "name: a\nseed: 1\nspark: {mode: local, shuffle_partitions: 2}\n"
        "consistency: {methods: [baseline, cs_blind], repeats: 3}\n"
    )
    (tmp_path / "b.yaml").write_text("seed: 2\nspark: {master: 'local[1]'}\n")
    (tmp_path / "c.yaml").write_text("extends: [base/a.yaml, b.yaml]\nname: c\nconsistency: {methods: [baseline]}\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert (cfg.name, cfg.seed) == ("c", 2)
    assert (cfg.spark.mode, cfg.spark.shuffle_partitions, cfg.spark.master) == ("local", 2, "local[1]")
    assert cfg.consistency.methods == ["baseline"] and cfg.consistency.repeats == 3
    assert load_config(tmp_path / "c.yaml", ["seed=5"]).seed == 5  # --set still comes last
    (tmp_path / "d.yaml").write_text("extends: e.yaml\n")
    (tmp_path / "e.yaml").write_text("extends: d.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "d.yaml")
    (tmp_path / "f.yaml").write_text("extends: {a: 1}\n")
    with pytest.raises(ConfigError, match="f.yaml: extends must be"):
        load_config(tmp_path / "f.yaml")
    (tmp_path / "g.yaml").write_text("extends: missing.yaml\n")
    with pytest.raises(ConfigError, match="config file not found: .*missing.yaml"):
        load_config(tmp_path / "g.yaml")


def test_the_cluster_demo_is_the_demo_world_on_a_clusters_platform(monkeypatch):
    """conf/cluster_demo.yaml (make cluster-demo) keeps every section of conf/demo.yaml but the platform's (the
    session spark-submit made, Ray at RAY_ADDRESS, the lakehouse in the bucket, MLflow's server) and reads every one
    of demo.yaml's inputs, and no other, from the bucket at the same relative path with the same options; the
    rehearsal uploads exactly the files the local demo reads for them. So its jobs' config hashes, and the tables
    they write, are the local demo's (a cluster config that named the SemEval dev file while the demo read both
    files failed the rehearsal's table check after 35 minutes)."""
    import dataclasses
    import importlib.util

    monkeypatch.setenv("AUGMENT_BUCKET", "s3a://augment")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    monkeypatch.chdir(REPO)  # the configs' relative paths are the repository's, as make demo runs
    demo, cluster = load_config(REPO / "conf" / "demo.yaml"), load_config(REPO / "conf" / "cluster_demo.yaml")
    platform = {"name", "spark", "ray", "lakehouse", "tracking", "inputs"}
    same = {k: v for k, v in demo.to_dict().items() if k not in platform}
    assert same == {k: v for k, v in cluster.to_dict().items() if k not in platform}
    assert (cluster.spark.mode, cluster.spark.delta, cluster.ray.mode, cluster.ray.address) == (
        "cluster",
        "native",
        "address",
        "127.0.0.1:6379",
    )
    assert (cluster.lakehouse.root, cluster.tracking_uri) == ("s3a://augment/lakehouse", "http://127.0.0.1:5000")
    assert cluster.spark.shuffle_partitions == demo.spark.shuffle_partitions
    shared = str((REPO.parent / "shared" / "data").resolve())
    read = {name: spec for name, spec in vars(demo.inputs).items() if isinstance(spec, InputSpec)}
    assert read and {n: s for n, s in vars(cluster.inputs).items() if isinstance(s, InputSpec)}.keys() == read.keys()
    for name, spec in read.items():
        remote = getattr(cluster.inputs, name)
        assert spec.path.startswith(shared + "/"), (name, spec.path)  # the demo's inputs are the shared data's
        assert remote.path == "s3a://augment/raw" + spec.path[len(shared) :], (name, remote.path)
        assert dataclasses.replace(remote, path=spec.path) == spec, name  # the same options, renames, columns
    # The rehearsal's uploads: the local files of each input, at the keys the cluster demo reads them from.
    loaded = importlib.util.spec_from_file_location("local_cluster", REPO / "tests" / "cluster" / "local_cluster.py")
    local_cluster = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(local_cluster)
    uploads = local_cluster.demo_inputs("s3a://augment")
    for name, spec in read.items():
        key = getattr(cluster.inputs, name).path[len("s3a://augment/") :]
        mine = {k: v for k, v in uploads.items() if k == key or k.startswith(key.rstrip("/") + "/")}
        local = Path(spec.path)
        files = sorted(local.rglob("*")) if local.is_dir() else sorted(local.parent.glob(local.name))
        assert sorted(mine.values()) == [f for f in files if f.is_file()] and mine, (name, sorted(mine))
    assert all(path.is_file() for path in uploads.values())
    assert len(set(uploads.values())) == len(uploads)
    # The rehearsal's chain of pipelines runs every job of the demo pipeline, and no other.
    from jobs import PIPELINES

    chained = {job for name in local_cluster.DEMO_CHAIN for job in PIPELINES.get(name, [name])}
    assert chained == set(PIPELINES["demo"])
