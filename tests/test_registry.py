"""What a run ships: the pipelines' classifiers as registered MLflow models (common.models.registry), loaded in a
process that cannot import the suite, served by ``mlflow models serve``, and promoted only through the gate
(common.models.promotion). The pipelines are the small world's (tests/worlds.py), run once per session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from common.models.promotion import RULES, Measure, decide
from shipped_models import fresh_predictions
from worlds import WORLD_MODELS

def version_of(client, name: str, run_id: str):
    """The version of registered model ``name`` that run ``run_id`` registered."""
    versions = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    assert len(versions) == 1, (name, run_id, versions)
    return client.get_model_version(name, versions[0].version)


def test_the_gate_promotes_only_a_gain_beyond_both_models_spread():
    rule = RULES["consistency"]
    champion = {"consistency_rate": Measure(0.60, 0.02, 3), "f1_weighted": Measure(0.80, 0.01, 3)}
    assert decide(rule, champion, None).promote  # the first version
    # +0.03 beats a spread of 0.02; +0.015 does not
    better = {"consistency_rate": Measure(0.63, 0.01, 3), "f1_weighted": Measure(0.795, 0.01, 3)}
    assert decide(rule, better, champion).promote
    close = {"consistency_rate": Measure(0.615, 0.01, 3), "f1_weighted": Measure(0.80, 0.01, 3)}
    verdict = decide(rule, close, champion)
    assert not verdict.promote and "does not beat" in verdict.reason and "0.0200" in verdict.reason
    assert decide(rule, close, champion, margin="zero").promote
    # consistency bought with accuracy: F1 falls by more than its spread
    traded = {"consistency_rate": Measure(0.70, 0.01, 3), "f1_weighted": Measure(0.75, 0.01, 3)}
    verdict = decide(rule, traded, champion)
    assert not verdict.promote and "f1_weighted" in verdict.reason and "falls below" in verdict.reason
    # a metric the champion lacks: no comparison, the alias stays
    assert not decide(RULES["boostaug"], {"accuracy": Measure(0.9, 0.0, 1)}, {"macro_f1": Measure(0.5, 0, 1)}).promote
    assert Measure.of([0.5, 0.7]).std == pytest.approx(0.1414, abs=1e-4)
    # what ships: per pipeline and classifier kind
    from common.models.registry_config import RegistryConfig

    fasttext_only = RegistryConfig(pipelines=["boostaug"], classifiers=["fasttext"])
    assert fasttext_only.ships("boostaug") and not fasttext_only.ships("boostaug", "encoder")
    assert not fasttext_only.ships("genre") and RegistryConfig().ships("genre", "encoder")
    with pytest.raises(ValueError, match=r"registry.classifiers: unknown names \['svm'\]"):
        RegistryConfig(classifiers=["svm"])


@pytest.mark.slow
def test_the_gate_fails_closed_when_the_registry_errs(monkeypatch, tmp_path, ctx):
    """A registry that answers 503 (a real HTTP server on loopback, as a tracking server behind a load balancer does
    when its backend is down): the champion lookup raises RegistryUnavailable naming the error instead of meaning
    "no champion", so no candidate takes the alias by default. The registry's own "no such alias" and "no such
    model" (a real SQLite registry) mean no champion. A job result holding what it could not finish makes the CLI
    exit 7 (ship incomplete), and its summary says what."""
    from mlflow import MlflowClient

    from common.models.registry import RegistryUnavailable, champion_version, gate
    from common.platform.cli import exit_code
    from common.platform.job import JobResult
    from model_server import FaultProxy

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    proxy = FaultProxy("http://127.0.0.1:9/v1", down=True)
    try:
        down = MlflowClient(ctx.cfg.tracking_uri, registry_uri=f"http://127.0.0.1:{proxy.port}")
        with pytest.raises(RegistryUnavailable, match="could not say which version of m holds @champion"):
            champion_version(down, "m", "champion")
        with pytest.raises(RegistryUnavailable):
            gate(ctx, down, "m", None, None)  # before any figure: the lookup decides nothing by itself
        assert len(proxy.seen) >= 2
    finally:
        proxy.close()
    local = MlflowClient(f"sqlite:///{tmp_path / 'registry.db'}")
    assert champion_version(local, "no_such_model", "champion") is None
    local.create_registered_model("m")
    assert champion_version(local, "m", "champion") is None
    result = JobResult("boostaug-evaluate", incomplete=["m v3: the registry could not say ..."])
    assert exit_code([JobResult("a"), result]) == 7 and exit_code([JobResult("a")]) == 0
    assert "INCOMPLETE: m v3: the registry could not say" in result.summary()


def test_unity_catalog_names_are_checked_at_load_and_an_unpinnable_requirement_is_an_error():
    """On Unity Catalog (registry_uri databricks-uc, or a Databricks tracking URI with none) the name prefix must be
    '<catalog>.<schema>.': a config error naming the key at load. A requirement not installed as a distribution is
    an error naming it, not an unpinned line."""
    from importlib.metadata import PackageNotFoundError, version

    from common.config import load_config
    from common.models.pyfunc_model import requirements
    from common.platform.config_loader import ConfigError

    repo = Path(__file__).resolve().parents[1]
    assert load_config(repo / "conf" / "databricks.yaml").registry.name_prefix == "main.augment."
    for overrides in (["tracking.registry_uri=databricks-uc"], ["tracking.uri=databricks"],
                      ["tracking.registry_uri=databricks-uc", "registry.name_prefix=main.aug-ment."]):
        with pytest.raises(ConfigError, match="registry.name_prefix.*no Unity Catalog name"):
            load_config(None, overrides)
    load_config(None, ["tracking.registry_uri=databricks-uc", "registry.name_prefix=main.augment."])
    load_config(None, ["tracking.uri=databricks", "registry.pipelines=[]"])  # nothing registers: no names

    def without_fasttext(name: str) -> str:
        if name == "fasttext-numpy2":
            raise PackageNotFoundError(name)
        return version(name)

    with pytest.raises(RuntimeError, match="requirement fasttext-numpy2 cannot be pinned"):
        requirements("hft", without_fasttext)
    assert all("==" in line for line in requirements("hft"))


def test_each_pipeline_ships_registered_models_that_load_and_serve_without_the_suite(small_world, tmp_path):
    import mlflow
    import pandas as pd
    from pyspark.sql import functions as F

    from cluster.local_cluster import free_port
    from common.genre.evaluation import clean_col
    from common.models.classifiers.hft import HFTModel, predict_texts
    from common.models.classifiers.multilabel import MultiLabelModel
    from common.models.registry import registry_client
    from common.pyfunc.multilabel import decide as decide_labels

    runs = {"consistency": small_world.run("cga")["consistency-train"],
            "boostaug": small_world.run("boostaug")["boostaug-evaluate"],
            "genre": small_world.run("genre-transfer")["genre-evaluate"],
            "compositional": small_world.run("compositional")["compositional-evaluate"]}
    ctx, uri = small_world.ctx, small_world.cfg.tracking_uri
    client = registry_client(ctx)
    titles = [r["title"] for r in ctx.lakehouse.read("accuracy_test").select("title").limit(6).collect()]
    texts = titles + ["", "Ünïcode — ROT SCHUH Größe 42!"]
    # one version per method, registered by the job's run, the first of its name: champion
    expected = {"consistency": ["baseline", "cst_ss"], "boostaug": ["none", "eda", "eda_boostaug", "spelling_boostaug"],
                "genre": [], "compositional": ["no_aug", "t5_labels", "label_prefix"]}
    for pipeline, methods in expected.items():
        assert any("@champion" in note for note in runs[pipeline].notes)
        for method in methods:
            name = f"{WORLD_MODELS}{pipeline}_{method}"
            version = version_of(client, name, runs[pipeline].run_id)
            assert version.tags["gate.decision"] in ("promoted", "kept") and version.tags["gate.reason"]
            assert {"metric.{}.mean".format(RULES[pipeline].metric), "config_hash"} <= set(version.tags)
            assert any(k.startswith("test.") and k.endswith(".location") for k in version.tags)
    # CGA's classifier: the consistency pipeline's "cga" method, registered by cga-train with its generator's lineage
    cga = version_of(client, f"{WORLD_MODELS}consistency_cga", small_world.run("cga")["cga-train"].run_id)
    assert cga.tags["generator.kind"] == "scratch_t5" and cga.tags["generator.model_version"]
    assert cga.tags["train.train_cga"] == str(small_world.run("cga")["cga-train"].outputs["train_cga"].version)
    # lineage: the model's Delta inputs and its metrics on the test table
    base = version_of(client, f"{WORLD_MODELS}consistency_cst_ss", runs["consistency"].run_id)
    logged = mlflow.MlflowClient(uri).get_logged_model(base.source.removeprefix("models:/"))  # the LoggedModel
    linked = {m.key: m.value for m in logged.metrics if m.dataset_name == "accuracy_test"}
    assert set(linked) == {f"cst_ss.{m}.{p}" for m in ("f1_weighted", "consistency_rate") for p in ("mean", "std", "n")}
    assert logged.params["test.accuracy_test"] == base.tags["test.accuracy_test"]
    run = mlflow.MlflowClient(uri).get_run(base.run_id)  # its mlflow.data inputs: the Delta versions it read
    assert ("accuracy_test", f"v{base.tags['test.accuracy_test']}") in \
        {(i.dataset.name, i.dataset.digest) for i in run.inputs.dataset_inputs}
    assert base.tags["train.train_cst_ss"] == str(ctx.lakehouse.version("train_cst_ss"))
    results = ctx.lakehouse.read("consistency_results").filter("method = 'cst_ss'").toPandas()
    assert float(base.tags["metric.consistency_rate.mean"]) == pytest.approx(results["consistency_rate"].mean())
    assert int(base.tags["metric.consistency_rate.n"]) == len(results)

    # each classifier kind in a process without the suite: the suite's own scorer's predictions
    genre = next(m.name for m in client.search_registered_models(f"name LIKE '{WORLD_MODELS}genre_augmented_topic%'"))
    kinds = {"hft": f"{WORLD_MODELS}consistency_cst_ss", "flat": f"{WORLD_MODELS}boostaug_eda_boostaug",
             "multilabel": f"{WORLD_MODELS}compositional_no_aug", "genre": genre}
    loaded = fresh_predictions(uri, [f"models:/{name}@champion" for name in kinds.values()], texts, tmp_path)
    fresh = {kind: loaded[f"models:/{name}@champion"] for kind, name in kinds.items()}
    # the genre classifier trained on Spark's clean_col view of its texts; the model cleans its input itself
    cleaned = [r["t"] for r in ctx.spark.createDataFrame(list(enumerate(texts)), "i int, text string")
               .select("i", clean_col(F.col("text")).alias("t")).orderBy("i").collect()]
    for kind, name in kinds.items():
        folder = Path(mlflow.artifacts.download_artifacts(f"models:/{name}@champion", dst_path=str(tmp_path / kind),
                                                          tracking_uri=uri)) / "data" / "classifier"
        manifest = json.loads((folder / "model.json").read_text())
        got = fresh[kind]["predictions"]
        if kind == "multilabel":
            suite = MultiLabelModel(str(folder / "model.bin"), manifest["labels"])
            assert got["labels"] == [decide_labels(p, manifest["threshold"]) for p in suite.probabilities(texts)]
            assert [c["name"] for c in json.loads(fresh[kind]["signature"]["outputs"])] == ["labels", "scores"]
        else:
            suite = predict_texts(HFTModel(str(folder), manifest["depth"]), cleaned if kind == "genre" else texts)
            assert got["label"] == [s[0] for s in suite] and got["level"] == [s[2] for s in suite]
            assert got["confidence"] == pytest.approx([s[1] for s in suite])
    assert json.loads(fresh["hft"]["signature"]["inputs"]) == [{"type": "string", "name": "text", "required": True}]

    # mlflow models serve on loopback answers /invocations with the same predictions
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri,
           # the scoring server's uvicorn is a console script of this environment
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    log = open(tmp_path / "serve.log", "wb")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/{kinds['hft']}@champion",
                               "--env-manager", "local", "-h", "127.0.0.1", "-p", str(port)], env=env, cwd=tmp_path,
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "mlflow models serve did not answer in 120 s"
                time.sleep(0.5)
        body = json.dumps({"dataframe_split": pd.DataFrame({"text": texts}).to_dict("split")}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        served = json.loads(urllib.request.urlopen(request, timeout=60).read())["predictions"]
        assert [p["label"] for p in served] == fresh["hft"]["predictions"]["label"]
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


@pytest.mark.slow
def test_a_worse_week_does_not_take_the_alias_and_a_better_one_does(small_world, tmp_path):
    import numpy as np
    from mlflow import MlflowClient

    from common.platform.lakehouse import Lineage
    from jobs.boostaug import EVAL_SETS, KEPT, REJECTS, RESULTS, TEXTS, evaluate_job

    small_world.run("boostaug")
    ctx = small_world.copy(tmp_path, [TEXTS, KEPT, REJECTS])  # its registered models' names of its own
    try:
        cfg = ctx.cfg
        # one backend, no ablations or curve: three variants of two seeds
        cfg.boostaug.backends, cfg.boostaug.eval.ablation_backend = ["eda"], None
        texts = ctx.lakehouse.read(TEXTS).toPandas()
        schema = ctx.lakehouse.read(TEXTS).schema

        def week(seed) -> list[str]:
            """A new version of the texts (training labels shuffled by ``seed``, or the true ones for None),
            then boostaug-evaluate: its summary lines."""
            rows = texts.copy()
            if seed is not None:
                train = rows["split"] == "train"
                rows.loc[train, "label"] = np.random.default_rng(seed).permutation(rows.loc[train, "label"].to_numpy())
            ctx.lakehouse.write(ctx.spark.createDataFrame(rows, schema), TEXTS, force=True,
                                lineage=Lineage(job="test-week", config_hash=str(seed), inputs={}))
            result = evaluate_job(ctx)
            assert result.outputs[RESULTS].version is not None and EVAL_SETS in result.outputs
            return result.notes

        name = f"{cfg.registry.name_prefix}boostaug_eda_boostaug"
        client = MlflowClient(cfg.tracking_uri)
        first = week(1)
        assert any(name in n and "v1 took @champion: first version" in n for n in first)
        better = week(None)
        assert any(name in n and "v2 took @champion" in n and "beats champion v1" in n for n in better), better
        worse = week(2)
        line = next(n for n in worse if name in n)
        assert "v3 not @champion" in line and "does not beat champion v2" in line
        assert str(client.get_model_version_by_alias(name, "champion").version) == "2"
        v3 = client.get_model_version(name, "3")
        assert v3.tags["gate.decision"] == "kept" and "does not beat" in v3.tags["gate.reason"]
        # the champion was re-scored on the new week's test table version, not compared on the old one
        assert v3.tags["test.boostaug_texts"] != client.get_model_version(name, "2").tags["test.boostaug_texts"]
        # the same inputs again: nothing trained, nothing registered
        assert evaluate_job(ctx).notes == []
        assert len(client.search_model_versions(f"name = '{name}'")) == 3
    finally:
        ctx.close()
