"""What a run ships: the pipelines' classifiers as registered MLflow models (common.registry), loaded in a process
that cannot import the suite, served by ``mlflow models serve``, and promoted only through the gate
(common.registry.gate: both artifacts on the same rows, a paired bootstrap), by compare-and-set. The pipelines are
the small world's (tests/worlds.py), run once per session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from shipped_models import fresh_predictions
from worlds import WORLD_MODELS

from common.registry.gate import RULES, Measure, decide


def wait_answering(server: subprocess.Popen, url: str, log: Path, what: str, limit_s: float = 120) -> None:
    """Until ``url`` answers: fails with the end of ``log`` when ``server`` exits first, or after ``limit_s``."""
    deadline = time.monotonic() + limit_s
    while True:
        assert server.poll() is None, log.read_text()[-3000:]
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} did not answer in {limit_s:.0f} s"
            time.sleep(0.5)


def mlflow_server(folder: Path, port: int) -> subprocess.Popen:
    """``mlflow server`` on ``port`` over the SQLite store and artifact folder in ``folder``, once it answers (its
    own process group, its output in ``folder/mlflow-<ns>.log``); stopped again if it never answers."""
    log = folder / f"mlflow-{time.monotonic_ns()}.log"
    with open(log, "wb") as out:  # the server holds its own copy of the handle
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{folder / 'mlflow.db'}",
                "--artifacts-destination",
                str(folder / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_answering(server, f"http://127.0.0.1:{port}/health", log, "mlflow server")
    except BaseException:
        os.killpg(server.pid, 9)
        server.wait(timeout=30)
        raise
    return server


def version_of(client, name: str, run_id: str):
    """The version of registered model ``name`` that run ``run_id`` registered."""
    versions = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    assert len(versions) == 1, (name, run_id, versions)
    return client.get_model_version(name, versions[0].version)


def _rows(*groups: tuple[str, str, str, int]) -> list:
    """Row cells: (gold, candidate's, champion's prediction) with counts."""
    return [((g, a, b), n) for g, a, b, n in groups]


def test_the_gate_decides_on_both_artifacts_predictions_on_the_same_rows():
    from common.evaluation.paired import paired
    from common.models.classifiers.label_metrics import accuracy_and_macro_f1

    rule = RULES["boostaug"]
    assert decide(rule, None).promote  # the first version
    # 400 rows: the candidate right on 40 the champion gets wrong, wrong on 10 it gets right -> a real gain
    better = {
        "rows": _rows(
            ("x", "x", "x", 150), ("y", "y", "y", 200), ("x", "x", "y", 25), ("y", "y", "x", 15), ("x", "y", "x", 10)
        )
    }
    verdict = decide(rule, better)
    assert verdict.promote and "accuracy 0.9750 vs the champion's 0.9000 on the same 400 rows" in verdict.reason
    low, high = json.loads(verdict.figures["gate.interval"])
    assert 0 < low < 0.075 < high and verdict.figures["gate.rows"] == "400"
    assert decide(rule, better) == verdict  # the resamples are seeded
    # the same gain on 20 rows is noise; equal artifacts never promote; a worse one never does
    few = {"rows": _rows(("x", "x", "x", 8), ("y", "y", "y", 10), ("x", "x", "y", 2))}
    assert not decide(rule, few).promote and "does not exceed 0.0000" in decide(rule, few).reason
    same = {"rows": _rows(("x", "x", "x", 300), ("y", "x", "x", 100))}
    assert not decide(rule, same).promote
    worse = {"rows": [((g, b, a), n) for (g, a, b), n in better["rows"]]}
    assert not decide(rule, worse).promote
    assert not decide(rule, better, margin=0.1).promote  # the margin asks more than the interval shows
    assert not decide(rule, {"rows": []}).promote
    # consistency gains, but weighted F1 falls significantly: the guard keeps the champion
    pairs = {"pairs": [((True, True), 300), ((True, False), 80), ((False, True), 5), ((False, False), 15)]}
    fine = {
        **pairs,
        "rows": _rows(("x", "x", "x", 190), ("y", "y", "y", 190), ("x", "y", "x", 10), ("y", "y", "x", 10)),
    }
    assert decide(RULES["consistency"], fine).promote
    traded = {
        **pairs,
        "rows": _rows(("x", "x", "x", 120), ("y", "y", "y", 150), ("x", "y", "x", 80), ("y", "x", "y", 50)),
    }
    verdict = decide(RULES["consistency"], traded)
    assert not verdict.promote and "f1_weighted" in verdict.reason and "gate.guard.interval" in verdict.figures
    # the cells' metrics are the suite's: macro-F1 over gold and predicted labels, as label_metrics gives it
    rows = _rows(("a", "a", "b", 3), ("a", "c", "a", 2), ("b", "b", "b", 4), ("c", "a", "c", 1))
    gold = [g for (g, _, _), n in rows for _ in range(n)]
    figures = {
        metric: paired(metric, {"rows": rows}, 0.95, 500, 0) for metric in ("accuracy", "macro_f1", "f1_weighted")
    }
    for side in ("candidate", "champion"):
        predicted = [k[1 if side == "candidate" else 2] for k, n in rows for _ in range(n)]
        accuracy, macro = accuracy_and_macro_f1(gold, predicted)
        assert getattr(figures["macro_f1"], side) == pytest.approx(macro)
        assert getattr(figures["accuracy"], side) == pytest.approx(accuracy)
        # support-weighted F1 (metrics.weighted_f1's definition): 2·TP / (support + predicted), weighted by support
        weighted = sum(
            gold.count(c)
            * 2
            * sum(g == p == c for g, p in zip(gold, predicted))
            / (gold.count(c) + predicted.count(c))
            for c in set(gold)
        ) / len(gold)
        assert getattr(figures["f1_weighted"], side) == pytest.approx(weighted)
    assert figures["accuracy"].n == 10
    assert Measure.of([0.5, 0.7]).std == pytest.approx(0.1414, abs=1e-4)
    # what ships: per pipeline and classifier kind; the margin is a difference of the metric
    from common.registry.config import RegistryConfig

    fasttext_only = RegistryConfig(pipelines=["boostaug"], classifiers=["fasttext"])
    assert fasttext_only.ships("boostaug") and not fasttext_only.ships("boostaug", "encoder")
    assert not fasttext_only.ships("genre") and RegistryConfig().ships("genre", "encoder")
    with pytest.raises(ValueError, match=r"registry.classifiers: unknown names \['svm'\]"):
        RegistryConfig(classifiers=["svm"])
    with pytest.raises(ValueError, match=r"registry.margin"):
        RegistryConfig(margin=1.5)


@pytest.mark.slow
def test_the_gate_fails_closed_when_the_registry_errs(monkeypatch, tmp_path, ctx):
    """A registry that answers 503 (a real HTTP server on loopback, as a tracking server behind a load balancer does
    when its backend is down): the champion lookup raises RegistryUnavailable naming the error instead of meaning
    "no champion", so no candidate takes the alias by default. The registry's own "no such alias" and "no such
    model" (a real SQLite registry) mean no champion. A job result holding what it could not finish makes the CLI
    exit 7 (ship incomplete), and its summary says what."""
    from mlflow import MlflowClient
    from model_server import FaultProxy

    from common.platform.runner.cli import exit_code
    from common.platform.runner.job import JobResult
    from common.registry.promotion import take_alias
    from common.registry.store import RegistryUnavailable, champion_version

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    proxy = FaultProxy("http://127.0.0.1:9/v1", down=True)
    try:
        down = MlflowClient(ctx.cfg.tracking_uri, registry_uri=f"http://127.0.0.1:{proxy.port}")
        with pytest.raises(RegistryUnavailable, match="could not say which version of m holds @champion"):
            champion_version(down, "m", "champion")
        with pytest.raises(RegistryUnavailable):  # before any judgement: the lookup decides nothing by itself
            take_alias(down, "m", "champion", "1", lambda champion: pytest.fail("judged"), 0.0, 1)
        assert len(proxy.seen) >= 2
    finally:
        proxy.close()
    local = MlflowClient(f"sqlite:///{tmp_path / 'registry.db'}")
    assert champion_version(local, "no_such_model", "champion") is None
    local.create_registered_model("m")
    assert champion_version(local, "m", "champion") is None
    # a version an earlier attempt set (killed before its tags) is never judged against itself
    local.create_model_version("m", "s3://nowhere/m/1")
    local.set_registered_model_alias("m", "champion", "1")
    again = take_alias(local, "m", "champion", "1", lambda champion: pytest.fail("judged"), 0.0, 1)
    assert again.promote and "holds @champion already" in again.reason
    result = JobResult("boostaug-evaluate", incomplete=["m v3: the registry could not say ..."])
    assert exit_code([JobResult("a"), result]) == 7 and exit_code([JobResult("a")]) == 0
    assert "INCOMPLETE: m v3: the registry could not say" in result.summary()


def test_unity_catalog_names_are_checked_at_load_and_an_unpinnable_requirement_is_an_error():
    """On Unity Catalog (registry_uri databricks-uc, or a Databricks tracking URI with none) the name prefix must be
    '<catalog>.<schema>.': a config error naming the key at load. A requirement not installed as a distribution is
    an error naming it, not an unpinned line."""
    from importlib.metadata import PackageNotFoundError, version

    from common.config import load_config
    from common.platform.config_loader import ConfigError
    from common.registry.mlflow_model import requirements

    repo = Path(__file__).resolve().parents[1]
    assert load_config(repo / "conf" / "databricks.yaml").registry.name_prefix == "main.augment."
    for overrides in (
        ["tracking.registry_uri=databricks-uc"],
        ["tracking.uri=databricks"],
        ["tracking.registry_uri=databricks-uc", "registry.name_prefix=main.aug-ment."],
    ):
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
    from cluster.local_cluster import free_port
    from pyspark.sql import functions as F

    from common.genre.evaluation import clean_col
    from common.models.classifiers.hft import HFTModel, predict_texts
    from common.models.classifiers.multilabel import MultiLabelModel
    from common.pyfunc.multilabel import decide as decide_labels
    from common.registry.store import registry_client

    runs = {
        "consistency": small_world.run("cga")["consistency-train"],
        "boostaug": small_world.run("boostaug")["boostaug-evaluate"],
        "genre": small_world.run("genre-transfer")["genre-evaluate"],
        "compositional": small_world.run("compositional")["compositional-evaluate"],
    }
    ctx, uri = small_world.ctx, small_world.cfg.tracking_uri
    client = registry_client(ctx)
    titles = [r["title"] for r in ctx.lakehouse.read("accuracy_test").select("title").limit(6).collect()]
    texts = titles + ["", "Ünïcode — ROT SCHUH Größe 42!"]
    # one version per method, registered by the job's run, the first of its name: champion
    expected = {
        "consistency": ["baseline", "cst_ss"],
        "boostaug": ["none", "eda", "eda_boostaug", "spelling_boostaug"],
        "genre": [],
        "compositional": ["no_aug", "t5_labels", "label_prefix"],
    }
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
    assert set(linked) == {
        f"cst_ss.{m}.{p}" for m in ("f1_weighted", "consistency_rate") for p in ("mean", "std", "n")
    }
    assert logged.params["test.accuracy_test"] == base.tags["test.accuracy_test"]
    run = mlflow.MlflowClient(uri).get_run(base.run_id)  # its mlflow.data inputs: the Delta versions it read
    assert ("accuracy_test", f"v{base.tags['test.accuracy_test']}") in {
        (i.dataset.name, i.dataset.digest) for i in run.inputs.dataset_inputs
    }
    assert base.tags["train.train_cst_ss"] == str(ctx.lakehouse.version("train_cst_ss"))
    results = ctx.lakehouse.read("consistency_results").filter("method = 'cst_ss'").toPandas()
    assert float(base.tags["metric.consistency_rate.mean"]) == pytest.approx(results["consistency_rate"].mean())
    assert int(base.tags["metric.consistency_rate.n"]) == len(results)

    # each classifier kind in a process without the suite: the suite's own scorer's predictions
    genre = next(m.name for m in client.search_registered_models(f"name LIKE '{WORLD_MODELS}genre_augmented_topic%'"))
    kinds = {
        "hft": f"{WORLD_MODELS}consistency_cst_ss",
        "flat": f"{WORLD_MODELS}boostaug_eda_boostaug",
        "multilabel": f"{WORLD_MODELS}compositional_no_aug",
        "genre": genre,
    }
    loaded = fresh_predictions(uri, [f"models:/{name}@champion" for name in kinds.values()], texts, tmp_path)
    fresh = {kind: loaded[f"models:/{name}@champion"] for kind, name in kinds.items()}
    # the genre classifier trained on Spark's clean_col view of its texts; the model cleans its input itself
    cleaned = [
        r["t"]
        for r in ctx.spark.createDataFrame(list(enumerate(texts)), "i int, text string")
        .select("i", clean_col(F.col("text")).alias("t"))
        .orderBy("i")
        .collect()
    ]
    for kind, name in kinds.items():
        folder = (
            Path(
                mlflow.artifacts.download_artifacts(
                    f"models:/{name}@champion", dst_path=str(tmp_path / kind), tracking_uri=uri
                )
            )
            / "data"
            / "classifier"
        )
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
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": uri,
        # the scoring server's uvicorn is a console script of this environment
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    log = open(tmp_path / "serve.log", "wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "models",
            "serve",
            "-m",
            f"models:/{kinds['hft']}@champion",
            "--env-manager",
            "local",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_answering(server, f"http://127.0.0.1:{port}/ping", tmp_path / "serve.log", "mlflow models serve")
        body = json.dumps({"dataframe_split": pd.DataFrame({"text": texts}).to_dict("split")}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations", data=body, headers={"Content-Type": "application/json"}
        )
        served = json.loads(urllib.request.urlopen(request, timeout=60).read())["predictions"]
        assert [p["label"] for p in served] == fresh["hft"]["predictions"]["label"]
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
        log.close()


def closed_port() -> int:
    """A loopback port nothing listens on (a server killed)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sigterm_while_gating(ctx, client, name: str) -> None:
    """Run boostaug-evaluate as ``augment run`` does (SIGTERM handled), signalled the moment its ship has registered
    ``name``'s version 2, while the gate judges it: the run ends in Terminated within seconds, its MLflow run KILLED,
    the version registered without a verdict, the alias where it was, the ledger naming the version."""
    import signal
    import threading

    from mlflow import MlflowClient

    from common.platform.process.signals import Terminated, handled
    from common.registry import ledger
    from jobs.boostaug.boostaug import evaluate_job

    signalled: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if any(str(v.version) == "2" for v in client.search_model_versions(f"name = '{name}'")):
                signalled.append(time.monotonic())
                # to the main thread, where a scheduler's SIGTERM to the process is handled
                signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with pytest.raises(Terminated):
            with handled(grace_s=120):
                evaluate_job(ctx)
    finally:
        stop.set()
        watcher.join(10)
    assert signalled, "the run ended before its version was registered"
    took = time.monotonic() - signalled[0]
    assert took < 30, f"{took:.1f} s from SIGTERM to the run's end"
    print(f"\nSIGTERM while gating: the run ended {took:.2f} s after the signal")
    version = client.get_model_version(name, "2")
    assert (
        "gate.decision" not in version.tags and str(client.get_model_version_by_alias(name, "champion").version) == "1"
    )
    entries = [e for uri in ledger.pending(ctx, "boostaug-evaluate") for e in ledger.load(uri) if e.name == name]
    # the version, or (a signal between the registration and the ledger's save) the run that registered it
    assert [(e.version in (None, "2"), e.run_id is not None, e.done) for e in entries] == [(True, True, False)], (
        entries
    )
    runs = MlflowClient(ctx.cfg.tracking_uri).search_runs(
        [MlflowClient(ctx.cfg.tracking_uri).get_experiment_by_name(ctx.cfg.tracking.experiment).experiment_id],
        filter_string="attributes.run_name = 'boostaug-evaluate'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    assert runs[0].info.status == "KILLED" and "SIGTERM" in runs[0].data.tags["closed.reason"], runs[0].info


@pytest.mark.slow
def test_a_worse_week_does_not_take_the_alias_and_a_better_one_does(small_world, tmp_path, monkeypatch):
    """Weekly retrains of one seed each, gated on the two artifacts' predictions on the week's test rows. The
    better week's ship is cut short by a registry answering 503 (a real HTTP server on loopback): its results are
    written, nothing is registered, the run says the ship is incomplete (exit 7); so is the next run's, the registry's
    server killed; the run after that is signalled (SIGTERM) while it gates the version it registered; the plain rerun
    trains nothing and finishes the ship from the ledger, registering nothing again; the rerun after that registers
    nothing."""
    from mlflow import MlflowClient
    from model_server import FaultProxy

    from common.platform.lakehouse.lakehouse import Lineage
    from common.platform.runner.cli import exit_code
    from jobs.boostaug.boostaug import EVAL_SETS, KEPT, REJECTS, RESULTS, TEXTS, evaluate_job

    small_world.run("boostaug")
    ctx = small_world.copy(tmp_path, [TEXTS, KEPT, REJECTS])  # its registered models' names of its own
    try:
        cfg = ctx.cfg
        # one backend, no ablations or curve: three variants of one seed (the gate judges the two artifacts)
        cfg.boostaug.backends, cfg.boostaug.eval.ablation_backend = ["eda"], None
        cfg.boostaug.eval.repeats = 1
        texts = ctx.lakehouse.read(TEXTS).toPandas()
        schema = ctx.lakehouse.read(TEXTS).schema

        def week(seed):
            """A new version of the texts (training labels shuffled by ``seed``, or the true ones for None),
            then boostaug-evaluate: its result."""
            rows = texts.copy()
            if seed is not None:
                train = rows["split"] == "train"
                rows.loc[train, "label"] = np.random.default_rng(seed).permutation(rows.loc[train, "label"].to_numpy())
            ctx.lakehouse.write(
                ctx.spark.createDataFrame(rows, schema),
                TEXTS,
                force=True,
                lineage=Lineage(job="test-week", config_hash=str(seed), inputs={}),
            )
            result = evaluate_job(ctx)
            assert result.outputs[RESULTS].version is not None and EVAL_SETS in result.outputs
            return result

        name = f"{cfg.registry.name_prefix}boostaug_eda_boostaug"
        client = MlflowClient(cfg.tracking_uri)
        first = week(1).notes
        assert any(name in n and "v1 took @champion: first version" in n for n in first)
        monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        proxy = FaultProxy("http://127.0.0.1:9/v1", down=True)
        registry, cfg.tracking.registry_uri = cfg.tracking.registry_uri, f"http://127.0.0.1:{proxy.port}"
        try:
            cut = week(None)
        finally:
            cfg.tracking.registry_uri = registry
            proxy.close()
        assert exit_code([cut]) == 7 and any(line.startswith(f"{name}: not shipped") for line in cut.incomplete)
        # the registry's server killed: nothing listens at its address any more
        cfg.tracking.registry_uri = f"http://127.0.0.1:{closed_port()}"
        try:
            gone = evaluate_job(ctx)
        finally:
            cfg.tracking.registry_uri = registry
        assert exit_code([gone]) == 7 and any(line.startswith(f"{name}: not shipped") for line in gone.incomplete)
        assert len(client.search_model_versions(f"name = '{name}'")) == 1
        results_version = ctx.lakehouse.version(RESULTS)
        sigterm_while_gating(ctx, client, name)  # the next run signalled once its version is registered
        finished = evaluate_job(ctx)  # the plain rerun: results exist, the ship is finished from the ledger
        assert ctx.lakehouse.version(RESULTS) == results_version and EVAL_SETS not in finished.outputs
        assert finished.incomplete == [] and exit_code([finished]) == 0
        better = finished.notes
        assert any(
            name in n and "v2 took @champion" in n and "vs champion v1's" in n and "beats it" in n for n in better
        ), better
        worse = week(2).notes
        line = next(n for n in worse if name in n)
        assert "v3 not @champion" in line and "vs champion v2's" in line and "does not exceed" in line, line
        assert str(client.get_model_version_by_alias(name, "champion").version) == "2"
        v2, v3 = client.get_model_version(name, "2"), client.get_model_version(name, "3")
        assert v3.tags["gate.decision"] == "kept" and "does not exceed" in v3.tags["gate.reason"]
        # both artifacts on the new week's test rows: the figures, the interval and the test version on the tags
        low, high = json.loads(v3.tags["gate.interval"])
        assert high < 0 and float(v3.tags["gate.champion"]) > float(v3.tags["gate.candidate"])
        assert json.loads(v3.tags["gate.test"]) == {"boostaug_texts": int(v3.tags["test.boostaug_texts"])}
        assert v3.tags["test.boostaug_texts"] != v2.tags["test.boostaug_texts"]
        assert json.loads(v2.tags["gate.interval"])[0] > 0 and v2.tags["gate.metric"] == "accuracy"
        assert int(v2.tags["gate.rows"]) == (texts["split"] == "test").sum()
        # the same inputs again: nothing trained, nothing registered
        assert evaluate_job(ctx).notes == []
        assert len(client.search_model_versions(f"name = '{name}'")) == 3
        # a ledger that is none (a hand-edited file) is said, never every later run's crash
        from common.registry import ledger

        broken = f"{ledger.folder(ctx, 'boostaug-evaluate')}/broken.json"
        Path(broken).write_text('{"not": "a ledger"}')
        said = evaluate_job(ctx)
        assert exit_code([said]) == 7 and any("not a shipping ledger" in line for line in said.incomplete)
        Path(broken).unlink()
        # two runs of one job never finish one ledger at once
        with ledger.claim(broken) as first, ledger.claim(broken) as second:
            assert first and not second
    finally:
        ctx.close()


RACER = """
import sys, time
from mlflow import MlflowClient
from common.registry.gate import Decision
from common.registry.promotion import take_alias

url, name, version, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
client = MlflowClient(url, url)
quality = lambda v: float(client.get_model_version(name, str(v.version)).tags["quality"])

def judge(champion):
    time.sleep(delay)  # a slow comparison: the other run moves the alias meanwhile
    mine, theirs = quality(client.get_model_version(name, version)), quality(champion)
    return Decision(mine > theirs, f"{mine} against v{champion.version}'s {theirs}")

start = float(sys.argv[5])
time.sleep(max(0.0, start - time.time()))
decision = take_alias(client, name, "champion", version, judge, 0.5, 5)
print("DECISION", decision.promote, decision.reason)
"""


@pytest.mark.slow
def test_two_runs_gating_at_once_leave_the_better_model_on_the_alias(tmp_path):
    """Two runs gate against one MLflow server (a real ``mlflow server`` process): both read champion v1; the better
    candidate (v2) judges fast and takes the alias, the worse (v3) judges slowly and, reading the champion again
    before setting, finds v2 there and is judged again: kept. The last writer does not win. Then a blind writer (a
    run without the compare-and-set) moves the alias to v3 just after v2 took it: v2's read-back after setting sees
    it and takes the alias back."""
    import threading

    from cluster.local_cluster import free_port
    from mlflow import MlflowClient

    from common.registry.gate import Decision
    from common.registry.promotion import take_alias

    port, root = free_port(), Path(__file__).resolve().parents[1]
    server = mlflow_server(tmp_path, port)
    url = f"http://127.0.0.1:{port}"
    try:
        client = MlflowClient(url, url)
        client.create_registered_model("race")
        for quality in (1, 3, 2):  # v1 the champion, v2 the better candidate, v3 the worse
            client.create_model_version("race", f"s3://nowhere/race/{quality}", tags={"quality": str(quality)})
        client.set_registered_model_alias("race", "champion", "1")
        start = time.time() + 8  # both past their imports, then both read v1 at once
        env = {**os.environ, "PYTHONPATH": str(root)}
        runs = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, url, "race", version, delay, str(start)],
                env=env,
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for version, delay in (("2", "0.2"), ("3", "3"))
        ]
        better, worse = (r.communicate(timeout=120)[0] for r in runs)
        assert "DECISION True" in better, better
        assert "DECISION False 2.0 against v2's 3.0" in worse, worse  # judged again against the new champion
        assert str(client.get_model_version_by_alias("race", "champion").version) == "2"

        client.set_registered_model_alias("race", "champion", "1")
        moved = threading.Event()

        def blind_writer():
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if str(client.get_model_version_by_alias("race", "champion").version) == "2":
                    client.set_registered_model_alias("race", "champion", "3")
                    moved.set()
                    return
                time.sleep(0.02)

        judged = []

        def judge(champion):
            judged.append(str(champion.version))
            theirs = float(champion.tags["quality"])
            return Decision(3.0 > theirs, f"3.0 against v{champion.version}'s {theirs}")

        writer = threading.Thread(target=blind_writer)
        writer.start()
        decision = take_alias(client, "race", "champion", "2", judge, 1.0, 5)
        writer.join(timeout=60)
        assert moved.is_set() and judged == ["1", "3"] and decision.promote
        assert str(client.get_model_version_by_alias("race", "champion").version) == "2"
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
