"""The endpoint engine (common/models/generation/endpoint.py, served.py, responses.py) against a real
OpenAI-compatible server on loopback: Hugging Face's ``transformers serve`` serving the packaged SmolLM2 from its
materialised folder, started once for the module (and killed and started again by the pipeline test). Faults come
from a rate-limiting gateway in front of it (a real HTTP server on loopback, as an API gateway would answer): 429
with Retry-After for the first requests, or 503 for every one."""
from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from cluster.local_cluster import free_port as _free_port
from cluster.local_cluster import start_model_server
from common.models.config import EndpointConfig
from common.models.generation.endpoint import (EndpointClient, EndpointUnreachable, Request, check_endpoint,
                                               retry_after, share)
from common.platform.config_loader import ConfigError

KEY = "sk-test-4f1d0c9e-never-printed"


class Server:
    """``transformers serve`` of the materialised SmolLM2 on a loopback port, as a process this module starts, kills
    and starts again on the same port. Its hub cache is an empty folder of its own (with none, its /v1/models
    answers 500; with one, it lists no local folder). :meth:`completions` counts the completions it answered, from
    its own access log."""

    def __init__(self, folder: str, scratch: Path):
        self.folder, self.scratch, self.port = folder, scratch, _free_port()
        (scratch / "hub").mkdir(exist_ok=True)
        self.process: "subprocess.Popen | None" = None
        self.starts = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log_path(self) -> Path:
        return self.scratch / f"serve-{self.starts}.log"

    def start(self) -> None:
        self.starts += 1
        self.process = start_model_server(sys.executable, self.folder, self.port, self.log_path, self.scratch / "hub")

    def completions(self) -> int:
        """Completions this start of the server answered (its access log's 200 lines)."""
        text = self.log_path.read_text(errors="replace")
        return sum('"POST /v1/completions HTTP/1.1" 200' in line for line in text.splitlines())

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=20)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from common.models.generation.causal_lm import materialise_smollm2

    server = Server(str(materialise_smollm2()), tmp_path_factory.mktemp("serve"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def served(server):
    """(base_url, model name) of the running server (started again if a test killed it)."""
    if server.process is None or server.process.poll() is not None:
        server.start()
    return server.base, server.folder


class Gateway:
    """A rate-limiting HTTP gateway on loopback in front of ``upstream``: the first ``refuse`` requests get 429 with
    ``Retry-After: 1``, every request 503 when ``down``; the rest are passed on. Counts what it saw, and the
    Authorization headers."""

    def __init__(self, upstream: str, refuse: int = 0, down: bool = False):
        self.upstream, self.refuse, self.down = upstream, refuse, down
        self.seen: list[float] = []
        self.auth: set[str] = set()
        self.port = _free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        assert self._ready.wait(10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        from aiohttp import ClientSession, web

        async def handle(request):
            self.seen.append(time.monotonic())
            self.auth.add(request.headers.get("Authorization", ""))
            if self.down:
                return web.Response(status=503, text="upstream overloaded")
            if len(self.seen) <= self.refuse:
                return web.Response(status=429, headers={"Retry-After": "1"}, text="rate limited")
            async with ClientSession() as session:
                async with session.request(request.method, self.upstream + request.path_qs[len("/v1"):],
                                           data=await request.read(),
                                           headers={"Content-Type": "application/json"}) as answer:
                    return web.Response(status=answer.status, body=await answer.read(),
                                        content_type="application/json")

        async def start():
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handle)
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._ready.set()

        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


PARAMS = {"max_tokens": 8, "temperature": 1.0, "top_p": 0.95, "stop": ["\n"]}


def test_completions_and_chat_through_the_server_with_usage(served):
    """Four samples of one few-shot prompt through /v1/completions, two at a time: each is the server's text with
    its usage; the chat API answers too. The config check finds the server and the model."""
    base, model = served
    prompt = "Product title: red toy car\nThe same product, another title: toy car, red\n\n" \
             "Product title: wooden blocks set\nThe same product, another title:"
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
    from common.models.generation.endpoint import doctor_check

    cfg = load_config(None, ["genre.generator.model.kind=endpoint", f"genre.generator.model.endpoint.base_url={base}",
                             f"genre.generator.model.endpoint.model={model}", "cga.model.kind=endpoint",
                             f"cga.model.endpoint.base_url={base}", f"cga.model.endpoint.model={model}"])
    check = doctor_check(cfg)
    assert check.ok and check.detail.count("serves") == 1 and check.detail.endswith("used by cga.model, "
                                                                                    "genre.generator.model"), check


def test_429_waits_for_retry_after_and_a_server_down_quarantines_with_the_reason(served, monkeypatch, caplog):
    """Refused twice with 429 and Retry-After 1: the request waits a second each time, then the server's answer;
    every try carried the key as a bearer token. A server answering 503 to everything: after max_retries the outcome
    is the reason, counted as failed. The key appears in no outcome, log line or repr."""
    base, model = served
    monkeypatch.setenv("AUGMENT_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    gateway = Gateway(base, refuse=2)
    try:
        cfg = EndpointConfig(base_url=gateway.base, model=model, api_key_env="AUGMENT_TEST_KEY", max_retries=3)
        client = EndpointClient(cfg, PARAMS, concurrency=1)
        (done,) = client.run([Request("Product title: blue kite\nThe same product, another title:", 0, seed=7)])
        assert done.ok and done.retries == 2 and client.stats["retries"] == 2, done
        assert gateway.seen[1] - gateway.seen[0] >= 0.95 and gateway.seen[2] - gateway.seen[1] >= 0.95
        assert gateway.auth == {f"Bearer {KEY}"}
    finally:
        gateway.close()
    down = Gateway(base, down=True)
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
    code = main(["run", "cga-generate", "--set", "cga.model.kind=endpoint", "--set",
                 f"cga.model.endpoint.base_url=http://127.0.0.1:{port}/v1", "--set", "cga.model.endpoint.model=m"])
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
    from common.models.config import FineTuneConfig, T5ModelConfig, describe_generator, generator_facts, in_context
    from common.models.generation.endpoint import Secret

    with pytest.raises(ConfigError, match="endpoint.base_url"):
        T5ModelConfig(kind="endpoint")
    served = T5ModelConfig(kind="endpoint", endpoint=EndpointConfig(base_url="http://h/v1", model="big-model"))
    trained = FineTuneConfig(max_steps=16)
    assert in_context(served, trained) and "fine_tune's 16 steps skipped" in describe_generator(served, trained)
    from common.models.config import GenerationConfig
    facts = generator_facts(served, trained, GenerationConfig())
    assert facts["model"] == "big-model" and facts["fine_tune"].startswith("fine-tune skipped: big-model is served")
    assert KEY not in repr(Secret(KEY)) and KEY not in str(Secret(KEY)) and Secret(KEY).reveal() == KEY


def _served_generator(folder: Path, endpoint: EndpointConfig, prompt: str = "Product title: {source}\n"
                      "The same product, another title:") -> str:
    """A served generator's folder, as the fine-tune stage writes it: one of two pairs in the prompt."""
    from dataclasses import asdict

    from common.models.generation.in_context import save_endpoint
    from common.models.generation.seq2seq import ModelSpec

    spec = ModelSpec(kind="endpoint", prompt=prompt, in_context=1, endpoint=asdict(endpoint))
    save_endpoint([("red toy car", "toy car, red"), ("green ball", "ball in green")], str(folder), spec, seed=3)
    return str(folder)


def test_the_endpoint_demo_serves_every_generative_method_of_the_demo_world(monkeypatch):
    """conf/endpoint_demo.yaml (make endpoint-demo): the demo's inputs, a lakehouse of its own, and the four methods'
    generators served at the endpoint its two variables name, each keeping its own prompt; without the variables,
    a config error names the key."""
    from common.config import load_config
    from common.models.generation.endpoint import served_sections

    repo = Path(__file__).resolve().parents[1]
    with pytest.raises(ConfigError, match="base_url"):
        load_config(repo / "conf" / "endpoint_demo.yaml")
    monkeypatch.setenv("AUGMENT_ENDPOINT_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("AUGMENT_ENDPOINT_MODEL", "served-model")
    cfg, demo = load_config(repo / "conf" / "endpoint_demo.yaml"), load_config(repo / "conf" / "demo.yaml")
    assert cfg.inputs == demo.inputs and cfg.lakehouse.root != demo.lakehouse.root
    sections = served_sections(cfg)
    assert [key for key, _ in sections] == ["cga.model", "query_reformulation.model", "genre.generator.model",
                                            "compositional.generator.model"]
    assert {(e.base_url, e.model) for _, e in sections} == {("http://127.0.0.1:9/v1", "served-model")}
    assert cfg.genre.generator.model.prompt == demo.genre.generator.model.prompt


def test_the_pool_engine_gives_generated_rows_keeps_answers_and_quarantines_what_failed(served, tmp_path):
    """EndpointGenerator, a generation pool's callable, on a served generator's folder: n samples per input through
    the server as generated rows in the engines' schema (tokens from the response's usage), an empty input
    quarantined with its reason. The same batch again sends nothing: its answers come from its response log. Behind
    a server that answers 503, every input one row with the request's reason, none lost."""
    from common.models.generation.served import EndpointGenerator
    from common.models.generation.hf_engine import GenerationSpec, output_schema
    from common.models.generation.responses import RESPONSES

    base, model = served
    folder = _served_generator(tmp_path / "gen", EndpointConfig(base_url=base, model=model))
    settings = json.loads((tmp_path / "gen" / "generator.json").read_text())
    assert settings["prompt"].count("{source}") == 1 and "Product title: " in settings["prompt"].split("{source}")[0]
    spec = GenerationSpec(n_samples=2, max_new_tokens=8, seed=5)
    batch = {"source_id": np.array(["a", "b", "c"]), "source_text": np.array(["wooden blocks set", "", "blue kite"])}
    engine = EndpointGenerator(folder, "endpoint_cga-test", spec, actors=2, tag="run-1")
    table = engine(batch)
    assert table.schema == output_schema() and engine.client.stats["requests"] == 4
    rows = table.to_pylist()
    made = sorted((r["source_id"], r["sample_idx"]) for r in rows if r["reason"] is None)
    assert made == [("a", 0), ("a", 1), ("c", 0), ("c", 1)]
    assert all(r["generated_text"] is not None and "\n" not in r["generated_text"] and 1 <= r["generated_tokens"] <= 8
               for r in rows if r["reason"] is None)
    assert [(r["source_id"], r["reason"]) for r in rows if r["reason"]] == [("b", "empty input")]
    again = EndpointGenerator(folder, "endpoint_cga-test", spec, actors=2, tag="run-2")
    assert again(batch).to_pylist() == rows and again.client.stats["requests"] == 0
    assert (tmp_path / "gen" / RESPONSES).is_dir()
    down = Gateway(base, down=True)
    try:
        other = _served_generator(tmp_path / "down", EndpointConfig(base_url=down.base, model=model, max_retries=1))
        table = EndpointGenerator(other, "v", spec)(batch)
    finally:
        down.close()
    reasons = {r["source_id"]: r["reason"] for r in table.to_pylist()}
    assert reasons == {"a": "endpoint: HTTP 503 after 1 retries", "b": "empty input",
                       "c": "endpoint: HTTP 503 after 1 retries"}


def _grep_tree(root: Path, secret: str) -> list[str]:
    """Files under ``root`` whose bytes hold ``secret``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.mark.slow  # CGA's generation stage through the server three times on a copy of the world
def test_a_pipeline_stage_through_the_server_killed_halfway_resumes_and_never_leaks_the_key(
        small_world, server, tmp_path, monkeypatch, capfd):
    """cga-generate with ``model.kind: endpoint`` (the key in an environment variable) on a copy of the world: the
    server is killed after its first answers, and the stage fails naming the URL; started again, the server
    answers only the requests that had none (counted in its access log), and the table holds each sample once,
    the server's own text with its usage; run a third time, the stage sends nothing and writes no version. The key
    is in no log line, MLflow param or tag, card, Delta commit, response log or saved generator."""
    import mlflow
    from dataclasses import replace

    from common.models.config import T5ModelConfig
    from common.models.generation.responses import RESPONSES
    from jobs.cga import generate_job

    if server.process is None or server.process.poll() is not None:
        server.start()
    small_world.run("cga")
    monkeypatch.setenv("AUGMENT_TEST_KEY", KEY)
    ctx = small_world.copy(tmp_path, tables=["cga_pairs", "labeled_train"])
    try:
        cga = ctx.cfg.cga
        cga.sources, sources, n = 8, 8, 2
        cga.model = T5ModelConfig(kind="endpoint", prompt=cga.model.prompt, in_context_examples=2,
                                  endpoint=EndpointConfig(base_url=server.base, model=server.folder, max_retries=1,
                                                          max_concurrency=2, api_key_env="AUGMENT_TEST_KEY"))
        cga.generation = replace(cga.generation, n_samples=n, max_new_tokens=8, batch_size=4)
        total = sources * n

        before = server.completions()  # the earlier tests' answers, in the same log

        def kill_after(answers: int) -> None:
            deadline = time.monotonic() + 300
            while server.completions() - before < answers and time.monotonic() < deadline:
                time.sleep(0.05)
            server.kill()

        killer = threading.Thread(target=kill_after, args=(5,), daemon=True)
        killer.start()
        with pytest.raises(Exception, match=rf"{server.base}/completions stopped answering"):
            generate_job(ctx)
        killer.join()
        first = server.completions() - before
        models = Path(ctx.cfg.lakehouse.root) / "models"
        logs = [p for p in models.rglob("*.parquet") if RESPONSES in p.parts]
        import pyarrow.parquet as pq
        kept = sum(1 for p in logs for r in pq.read_table(p).to_pylist() if r["key"] and r["text"] is not None)
        assert 1 <= kept <= first < total, (kept, first)  # an answer the kill cut off in flight is not kept

        server.start()
        result = generate_job(ctx)
        assert server.completions() == total - kept  # only the requests with no answer were sent
        table = ctx.lakehouse.read("cga_generated").toPandas()
        ok = table[table["sample_idx"] >= 0]
        assert len(ok) == total and not ok.duplicated(["source_id", "sample_idx"]).any()
        answers = [r for p in models.rglob("*.parquet") if RESPONSES in p.parts for r in pq.read_table(p).to_pylist()
                   if r["key"] and r["text"] is not None]
        assert sorted(t.split("\n", 1)[0].strip() for t in (r["text"] for r in answers)) == sorted(ok["generated_text"])
        assert ok["generated_tokens"].sum() == sum(r["completion_tokens"] for r in answers)
        run = mlflow.MlflowClient(ctx.cfg.tracking_uri).get_run(result.run_id)
        assert run.data.metrics["endpoint.answered"] == total - kept and run.data.metrics["endpoint.reused"] == kept
        assert run.data.metrics["endpoint.prompt_tokens"] > 0 and "endpoint.latency_p90_s" in run.data.metrics
        assert run.data.tags["generator.served_model"] == server.folder
        version = result.outputs["cga_generated"].version
        card = (Path(ctx.cfg.lakehouse.root) / "cards" / "cga_generated" / f"v{version}.md").read_text()
        assert server.folder in card and "answered" in card

        again = generate_job(ctx)
        assert server.completions() == total - kept and again.outputs["cga_generated"].skipped

        runs = mlflow.MlflowClient(ctx.cfg.tracking_uri).search_runs(
            [mlflow.get_experiment_by_name(ctx.cfg.tracking.experiment).experiment_id])
        assert runs and all(KEY not in json.dumps([r.data.params, r.data.tags]) for r in runs)
        assert _grep_tree(Path(ctx.cfg.lakehouse.root), KEY) == []
        assert KEY not in capfd.readouterr().err
    finally:
        ctx.close()
