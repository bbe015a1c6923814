"""The endpoint client (common/models/generation/endpoint.py) against a real OpenAI-compatible server on loopback:
Hugging Face's ``transformers serve`` serving the packaged SmolLM2 from its materialised folder, started once for the
module. Faults come from a rate-limiting gateway in front of it (a real HTTP server on loopback, as an API gateway
would answer): 429 with Retry-After for the first requests, or 503 for every one."""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from common.models.config import EndpointConfig
from common.models.generation.endpoint import (EndpointClient, EndpointUnreachable, Request, check_endpoint,
                                               retry_after, share)
from common.platform.config_loader import ConfigError

KEY = "sk-test-4f1d0c9e-never-printed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``transformers serve`` of the materialised SmolLM2 on a loopback port: (base_url, model name). Its hub cache
    is an empty folder of its own (with none, its /v1/models answers 500; with one, it lists no local folder)."""
    from common.models.generation.causal_lm import materialise_smollm2

    folder = str(materialise_smollm2())
    port = _free_port()
    scratch = tmp_path_factory.mktemp("serve")
    env = {**os.environ, "HF_HUB_CACHE": str(scratch / "hub"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    (scratch / "hub").mkdir()
    log = open(scratch / "serve.log", "wb")
    server = subprocess.Popen([str(Path(sys.executable).with_name("transformers")), "serve", folder, "--host",
                               "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"],
                              env=env, stdout=log, stderr=subprocess.STDOUT, cwd=scratch)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/models", timeout=2).read()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"transformers serve did not start: {(scratch / 'serve.log').read_text()}")
                time.sleep(0.5)
        yield base, folder
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


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


def test_config_takes_the_key_by_reference_and_shares_the_limits():
    with pytest.raises(ConfigError, match="names an environment variable"):
        EndpointConfig(base_url="http://h/v1", model="m", api_key_env=f"KEY={KEY}")
    with pytest.raises(ConfigError, match="must be an http"):
        EndpointConfig(base_url="h:8000", model="m")
    assert (share(8, 3), share(2, 4), share(None, 2)) == (2, 1, None)
    assert retry_after("3") == 3.0 and retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    assert retry_after(None) is None and retry_after("9999") == 120.0


def test_the_pool_engine_gives_generated_rows_and_quarantines_what_failed(served):
    """EndpointGenerator, a generation pool's callable: n samples per input through the server as generated rows in
    the engines' schema (tokens from the response's usage), an empty input quarantined with its reason; behind a
    server that answers 503, every input one row with the request's reason, none lost."""
    from common.models.generation.endpoint import EndpointGenerator
    from common.models.generation.hf_engine import GenerationSpec, output_schema

    base, model = served
    template = ("Product title: red toy car\nThe same product, another title: toy car, red\n\n"
                "Product title: {source}\nThe same product, another title:")
    spec = GenerationSpec(n_samples=2, max_new_tokens=8, seed=5)
    batch = {"source_id": np.array(["a", "b", "c"]), "source_text": np.array(["wooden blocks set", "", "blue kite"])}
    table = EndpointGenerator(EndpointConfig(base_url=base, model=model), template, "endpoint_cga-test", spec,
                              actors=2)(batch)
    assert table.schema == output_schema()
    rows = table.to_pylist()
    made = sorted((r["source_id"], r["sample_idx"]) for r in rows if r["reason"] is None)
    assert made == [("a", 0), ("a", 1), ("c", 0), ("c", 1)]
    assert all(r["generated_text"] is not None and "\n" not in r["generated_text"] and 1 <= r["generated_tokens"] <= 8
               for r in rows if r["reason"] is None)
    assert [(r["source_id"], r["reason"]) for r in rows if r["reason"]] == [("b", "empty input")]
    down = Gateway(base, down=True)
    try:
        table = EndpointGenerator(EndpointConfig(base_url=down.base, model=model, max_retries=1), template, "v", spec)(
            batch)
    finally:
        down.close()
    reasons = {r["source_id"]: r["reason"] for r in table.to_pylist()}
    assert reasons == {"a": "endpoint: HTTP 503 after 1 retries", "b": "empty input",
                       "c": "endpoint: HTTP 503 after 1 retries"}
