"""The served generator (common/models/generation/served/) against a real
OpenAI-compatible server on loopback: Hugging Face's ``transformers serve`` serving the packaged SmolLM2 from its
materialised folder, started once for the module (and killed and started again by the pipeline test). Faults come
from a fault proxy in front of it (tests/model_server.py: a real HTTP server on loopback, as an API gateway would
answer): 429 with Retry-After for the first requests, or 503 for every one. The faults of a bad night are in
test_endpoint_faults.py."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np
import pytest
from cluster.local_cluster import free_port as _free_port
from model_server import FaultProxy, served_generator

from common.models.config import EndpointConfig
from common.models.generation.served.checks import check_endpoint
from common.models.generation.served.client import EndpointClient, Request
from common.models.generation.served.health import share
from common.models.generation.served.retry import retry_after
from common.platform.config_loader import ConfigError
from common.platform.errors import EndpointUnreachable

KEY = "sk-test-4f1d0c9e-never-printed"


@pytest.fixture
def served(live_server):
    """(base_url, model name) of the running server."""
    return live_server.base, live_server.folder


PARAMS = {"max_tokens": 8, "temperature": 1.0, "top_p": 0.95, "stop": ["\n"]}


def test_completions_and_chat_through_the_server_with_usage(served):
    """Four samples of one few-shot prompt through /v1/completions, two at a time: each is the server's text with
    its usage; the chat API answers too. The config check finds the server and the model."""
    base, model = served
    prompt = (
        "Product title: red toy car\nThe same product, another title: toy car, red\n\n"
        "Product title: wooden blocks set\nThe same product, another title:"
    )
    client = EndpointClient(EndpointConfig(base_url=base, model=model), PARAMS, concurrency=2)
    outcomes = client.run([Request(prompt, i, seed=42) for i in range(4)])
    assert all(o.ok and o.reason is None for o in outcomes), outcomes
    assert all(o.prompt_tokens > 20 and 1 <= o.completion_tokens <= 8 for o in outcomes), outcomes
    assert client.stats == {"requests": 4, "retries": 0, "failed": 0}
    chat = EndpointClient(EndpointConfig(base_url=base, model=model, api="chat"), PARAMS, concurrency=1)
    (answer,) = chat.run([Request("Write another title for: red toy car", 0, seed=1)])
    assert answer.ok and answer.completion_tokens >= 1
    line = check_endpoint(EndpointConfig(base_url=base, model=model))
    assert line.startswith(f"{base} serves {model}") and "one-token completion" in line
    from common.config import load_config
    from common.models.generation.served.checks import doctor_check

    cfg = load_config(
        None,
        [
            "genre.generator.model.kind=endpoint",
            f"genre.generator.model.endpoint.base_url={base}",
            f"genre.generator.model.endpoint.model={model}",
            "cga.model.kind=endpoint",
            f"cga.model.endpoint.base_url={base}",
            f"cga.model.endpoint.model={model}",
        ],
    )
    check = doctor_check(cfg)
    assert (
        check.ok
        and check.detail.count("serves") == 1
        and check.detail.endswith("used by cga.model, genre.generator.model")
    ), check


def test_429_waits_for_retry_after_and_a_server_down_quarantines_with_the_reason(served, monkeypatch, caplog):
    """Refused twice with 429 and Retry-After 1: the request waits a second each time, then the server's answer;
    every try carried the key as a bearer token. A server answering 503 to everything: after max_retries the outcome
    is the reason, counted as failed. The key appears in no outcome, log line or repr."""
    base, model = served
    monkeypatch.setenv("AUGMENT_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    gateway = FaultProxy(base, throttle=2)
    try:
        cfg = EndpointConfig(base_url=gateway.base, model=model, api_key_env="AUGMENT_TEST_KEY", max_retries=3)
        client = EndpointClient(cfg, PARAMS, concurrency=1)
        (done,) = client.run([Request("Product title: blue kite\nThe same product, another title:", 0, seed=7)])
        assert done.ok and done.retries == 2 and client.stats["retries"] == 2, done
        assert gateway.seen[1] - gateway.seen[0] >= 0.95 and gateway.seen[2] - gateway.seen[1] >= 0.95
        assert gateway.auth == {f"Bearer {KEY}"}
    finally:
        gateway.close()
    down = FaultProxy(base, down=True)
    try:
        cfg = EndpointConfig(base_url=down.base, model=model, api_key_env="AUGMENT_TEST_KEY", max_retries=2)
        client = EndpointClient(cfg, PARAMS, concurrency=2)
        outcomes = client.run([Request("x", i, seed=7) for i in range(2)])
        assert [o.reason for o in outcomes] == ["HTTP 503 after 2 retries"] * 2
        assert client.stats == {"requests": 6, "retries": 4, "failed": 2} and len(down.seen) == 6
    finally:
        down.close()
    assert KEY not in caplog.text and KEY not in repr(client) and KEY not in repr(outcomes)


def test_an_unreachable_endpoint_fails_at_once_naming_the_url_and_never_the_key(monkeypatch):
    port = _free_port()  # nothing listens there
    monkeypatch.setenv("AUGMENT_TEST_KEY", KEY)
    cfg = EndpointConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", api_key_env="AUGMENT_TEST_KEY")
    started = time.monotonic()
    with pytest.raises(EndpointUnreachable, match=rf"http://127.0.0.1:{port}/v1/models did not answer") as error:
        check_endpoint(cfg, timeout_s=5)
    assert time.monotonic() - started < 10 and KEY not in str(error.value)
    monkeypatch.delenv("AUGMENT_TEST_KEY")
    with pytest.raises(EndpointUnreachable, match="the API key's variable AUGMENT_TEST_KEY is not set"):
        check_endpoint(cfg)


def test_a_generative_job_on_an_unreachable_endpoint_exits_6_before_any_engine(capsys):
    """``augment run cga-generate`` with a served model nothing answers for: one line naming the URL, exit code 6,
    in seconds (the job's start check runs before Spark, Ray or MLflow)."""
    from jobs.cli import main

    port = _free_port()
    started = time.monotonic()
    code = main(
        [
            "run",
            "cga-generate",
            "--set",
            "cga.model.kind=endpoint",
            "--set",
            f"cga.model.endpoint.base_url=http://127.0.0.1:{port}/v1",
            "--set",
            "cga.model.endpoint.model=m",
        ]
    )
    err = capsys.readouterr().err
    assert code == 6 and time.monotonic() - started < 10, err
    assert f"augment: endpoint unreachable: http://127.0.0.1:{port}/v1/models did not answer" in err


def test_config_takes_the_key_by_reference_and_shares_the_limits():
    with pytest.raises(ConfigError, match="names an environment variable"):
        EndpointConfig(base_url="http://h/v1", model="m", api_key_env=f"KEY={KEY}")
    with pytest.raises(ConfigError, match="must be an http"):
        EndpointConfig(base_url="h:8000", model="m")
    assert (share(8, 3), share(2, 4), share(None, 2)) == (2, 1, None)
    assert retry_after("3") == 3.0 and retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after(None) is None and retry_after("9999") == 120.0
    with pytest.raises(ConfigError, match="api_key_secret"):
        EndpointConfig(base_url="http://h/v1", model="m", api_key_secret="no-slash")
    from common.models.config import FineTuneConfig, T5ModelConfig, in_context
    from common.models.generation.served.auth import Secret
    from common.models.generator_summary import describe_generator, generator_facts

    with pytest.raises(ConfigError, match="endpoint.base_url"):
        T5ModelConfig(kind="endpoint")
    served = T5ModelConfig(kind="endpoint", endpoint=EndpointConfig(base_url="http://h/v1", model="big-model"))
    trained = FineTuneConfig(max_steps=16)
    assert in_context(served, trained) and "fine_tune's 16 steps skipped" in describe_generator(served, trained)
    from common.models.config import GenerationConfig

    facts = generator_facts(served, trained, GenerationConfig())
    assert facts["model"] == "big-model" and facts["fine_tune"].startswith("fine-tune skipped: big-model is served")
    assert KEY not in repr(Secret(KEY)) and KEY not in str(Secret(KEY)) and Secret(KEY).reveal() == KEY


def test_the_endpoint_demo_serves_every_generative_method_of_the_demo_world(monkeypatch):
    """conf/endpoint_demo.yaml (make endpoint-demo): the demo's inputs, a lakehouse of its own, and the four methods'
    generators served at the endpoint its two variables name, each keeping its own prompt; without the variables,
    a config error names the key."""
    from common.config import load_config
    from common.models.generation.served.checks import served_sections

    repo = Path(__file__).resolve().parents[1]
    with pytest.raises(ConfigError, match="base_url"):
        load_config(repo / "conf" / "endpoint_demo.yaml")
    monkeypatch.setenv("AUGMENT_ENDPOINT_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AUGMENT_ENDPOINT_MODEL", "served-model")
    cfg, demo = load_config(repo / "conf" / "endpoint_demo.yaml"), load_config(repo / "conf" / "demo.yaml")
    assert cfg.inputs == demo.inputs and cfg.lakehouse.root != demo.lakehouse.root
    sections = served_sections(cfg)
    assert [key for key, _ in sections] == [
        "cga.model",
        "query_reformulation.model",
        "genre.generator.model",
        "compositional.generator.model",
    ]
    assert {(e.base_url, e.model) for _, e in sections} == {("http://127.0.0.1:9/v1", "served-model")}
    assert cfg.genre.generator.model.prompt == demo.genre.generator.model.prompt


def test_the_pool_engine_gives_generated_rows_keeps_answers_and_quarantines_what_failed(served, tmp_path):
    """EndpointGenerator, a generation pool's callable, on a served generator's folder: n samples per input through
    the server as generated rows in the engines' schema (tokens from the response's usage), an empty input
    quarantined with its reason. The same batch again sends nothing: its answers come from the role's response log.
    Behind a server that answers 503 (below the breaker's count), every input one row with the request's reason,
    none lost."""
    from common.models.generation.engines.hf_engine import GenerationSpec, output_schema
    from common.models.generation.served.engine import EndpointGenerator, ServedGenerator
    from common.models.generation.served.log import RESPONSES

    base, model = served
    folder = served_generator(tmp_path / "gen", EndpointConfig(base_url=base, model=model))
    settings = json.loads((tmp_path / "gen" / "generator.json").read_text())
    assert settings["prompt"].count("{source}") == 1 and "Product title: " in settings["prompt"].split("{source}")[0]
    spec = GenerationSpec(n_samples=2, max_new_tokens=8, seed=5)
    batch = {"source_id": np.array(["a", "b", "c"]), "source_text": np.array(["wooden blocks set", "", "blue kite"])}
    engine = EndpointGenerator(ServedGenerator.read(folder), "endpoint_cga-test", spec, actors=2, tag="run-1")
    table = engine(batch)
    assert table.schema == output_schema() and engine.client.stats["requests"] == 4
    rows = table.to_pylist()
    made = sorted((r["source_id"], r["sample_idx"]) for r in rows if r["reason"] is None)
    assert made == [("a", 0), ("a", 1), ("c", 0), ("c", 1)]
    assert all(
        r["generated_text"] is not None and "\n" not in r["generated_text"] and 1 <= r["generated_tokens"] <= 8
        for r in rows
        if r["reason"] is None
    )
    assert [(r["source_id"], r["reason"]) for r in rows if r["reason"]] == [("b", "empty input")]
    again = EndpointGenerator(ServedGenerator.read(folder), "endpoint_cga-test", spec, actors=2, tag="run-2")
    assert again(batch).to_pylist() == rows and again.client.stats["requests"] == 0
    assert (tmp_path / RESPONSES / "gen").is_dir()
    down = FaultProxy(base, down=True)
    try:
        other = served_generator(
            tmp_path / "down", EndpointConfig(base_url=down.base, model=model, max_retries=1, breaker_failures=100)
        )
        table = EndpointGenerator(ServedGenerator.read(other), "v", spec)(batch)
    finally:
        down.close()
    reasons = {r["source_id"]: r["reason"] for r in table.to_pylist()}
    assert reasons == {
        "a": "endpoint: HTTP 503 after 1 retries",
        "b": "empty input",
        "c": "endpoint: HTTP 503 after 1 retries",
    }


def _grep_tree(root: Path, secret: str) -> list[str]:
    """Files under ``root`` whose bytes hold ``secret``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow  # CGA's generation stage through the server five times on a copy of the world
def test_a_pipeline_stage_survives_an_outage_a_broken_gateway_and_a_new_row_paying_each_answer_once(
    small_world, server, tmp_path, monkeypatch, capfd
):
    """cga-generate with ``model.kind: endpoint`` (the key in an environment variable) on a copy of the world, behind
    a fault proxy. (1) The server is killed after 5 answers with the rest pending: the stage ends within seconds
    with an EndpointUnreachable that the CLI reports as one line (exit code 6), the answers kept. (2) The proxy
    answers 503 to everything (a gateway before a dead backend): the stage fails the same way and writes no version.
    (3) Server and proxy back: the server answers only the requests that had none (counted in its access log), the
    table holds each sample once, the server's own text with its usage. (4) The same run again sends nothing and
    writes no version. (5) One more source row and another batch size: only the new row's requests are sent. The
    key is in no log line, MLflow param or tag, card, Delta commit, response log or saved generator."""
    from dataclasses import replace

    import mlflow
    import pyarrow.parquet as pq

    from common.models.config import T5ModelConfig
    from common.models.generation.served.log import RESPONSES
    from common.platform.errors import one_line, user_error
    from jobs.cga.cga import generate_job

    if not server.running():
        server.start()
    small_world.run("cga")
    monkeypatch.setenv("AUGMENT_TEST_KEY", KEY)
    ctx = small_world.copy(tmp_path, tables=["cga_pairs", "labeled_train"])
    killed: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        server.kill()

    proxy = FaultProxy(server.base, answers=5, then=kill)
    try:
        cga = ctx.cfg.cga
        cga.sources, sources, n = 8, 8, 2
        cga.model = T5ModelConfig(
            kind="endpoint",
            prompt=cga.model.prompt,
            in_context_examples=2,
            endpoint=EndpointConfig(
                base_url=proxy.base,
                model=server.folder,
                max_retries=1,
                max_concurrency=2,
                api_key_env="AUGMENT_TEST_KEY",
            ),
        )
        cga.generation = replace(cga.generation, n_samples=n, max_new_tokens=8, batch_size=4)
        total = sources * n

        with pytest.raises(Exception) as raised:
            generate_job(ctx)
        ended = time.monotonic()
        found = user_error(raised.value)
        assert isinstance(found, EndpointUnreachable), raised.value
        assert f"{proxy.base}/completions is down:" in str(found) and "Traceback" not in one_line(found)
        assert killed and ended - killed[0] < 30, ended - killed[0]
        assert proxy.since(killed[0]) <= 2 * (8 + 2)  # each of the two actors: its breaker's 8 and its 2 in flight
        models = Path(ctx.cfg.lakehouse.root) / "models"

        def answers() -> list[dict]:
            parts = [p for p in models.rglob("*.parquet") if RESPONSES in p.parts]
            return [r for p in parts for r in pq.read_table(p).to_pylist() if r["key"] and r["text"] is not None]

        kept = len(answers())
        assert kept == 5, kept  # every answer passed on was kept

        proxy.answers, proxy.down = None, True
        with pytest.raises(Exception) as raised:
            generate_job(ctx)
        broken = user_error(raised.value)
        assert isinstance(broken, EndpointUnreachable) and "HTTP 503" in str(broken)
        assert not ctx.lakehouse.exists("cga_generated")  # no version from a broken server

        server.start()
        proxy.down = False
        result = generate_job(ctx)
        assert server.completions() == total - kept  # only the requests with no answer were sent
        table = ctx.lakehouse.read("cga_generated").toPandas()
        ok = table[table["sample_idx"] >= 0]
        assert len(ok) == total and not ok.duplicated(["source_id", "sample_idx"]).any()
        got = answers()
        assert sorted(r["text"].split("\n", 1)[0].strip() for r in got) == sorted(ok["generated_text"])
        assert ok["generated_tokens"].sum() == sum(r["completion_tokens"] for r in got)
        run = mlflow.MlflowClient(ctx.cfg.tracking_uri).get_run(result.run_id)
        assert run.data.metrics["endpoint.answered"] == total - kept and run.data.metrics["endpoint.reused"] == kept
        assert run.data.metrics["endpoint.prompt_tokens"] > 0 and "endpoint.latency_p90_s" in run.data.metrics
        assert run.data.metrics["endpoint.server_failed"] == 0
        assert run.data.tags["generator.served_model"] == server.folder
        version = result.outputs["cga_generated"].version
        card = (Path(ctx.cfg.lakehouse.root) / "cards" / "cga_generated" / f"v{version}.md").read_text()
        assert server.folder in card and "answered" in card

        again = generate_job(ctx)
        assert server.completions() == total - kept and again.outputs["cga_generated"].skipped

        cga.sources, cga.generation = sources + 1, replace(cga.generation, batch_size=3)
        grown = generate_job(ctx)
        assert server.completions() == total - kept + n  # the new row's samples, nothing else
        assert grown.outputs["cga_generated"].version > version
        assert (ctx.lakehouse.read("cga_generated").toPandas()["sample_idx"] >= 0).sum() == total + n

        runs = mlflow.MlflowClient(ctx.cfg.tracking_uri).search_runs(
            [mlflow.get_experiment_by_name(ctx.cfg.tracking.experiment).experiment_id]
        )
        assert runs and all(KEY not in json.dumps([r.data.params, r.data.tags]) for r in runs)
        assert _grep_tree(Path(ctx.cfg.lakehouse.root), KEY) == []
        assert KEY not in capfd.readouterr().err
    finally:
        proxy.close()
        ctx.close()
