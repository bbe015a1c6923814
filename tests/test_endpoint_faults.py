"""A served generator's bad night, with real processes on loopback: ``transformers serve`` of the packaged SmolLM2
(killed mid-batch), a fault proxy of the suite's own in front of it (tests/model_server.py: 503 for everything, 429
storms, malformed 200s, a poisoned share), the session's Ray runtime and SparkSession. The pipeline-level run (exit
code, no version, the rerun paying once) is in test_endpoint.py."""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from cluster.local_cluster import free_port
from model_server import FaultProxy, served_generator

from common.models.config import EndpointConfig
from common.models.generation.engines.hf_engine import GenerationSpec
from common.models.generation.served.client import EndpointClient, Request
from common.models.generation.served.engine import EndpointDown, EndpointGenerator, ServedGenerator, failed_share_check
from common.models.generation.served.log import RESPONSES
from common.platform.errors import EndpointUnreachable, user_error

ONE = GenerationSpec(n_samples=1, max_new_tokens=2, seed=5)


def _batch(n: int, start: int = 0) -> dict:
    ids = [f"s{i:04d}" for i in range(start, start + n)]
    return {"source_id": np.array(ids), "source_text": np.array([f"toy number {i}" for i in range(start, start + n)])}


def _engine(folder: str, spec=ONE, actors: int = 1, tag: str = "t") -> EndpointGenerator:
    return EndpointGenerator(ServedGenerator.read(folder), "v", spec, actors=actors, tag=tag)


def test_an_outage_ends_the_batch_in_seconds_whatever_is_pending_and_keeps_every_answer(live_server, tmp_path):
    """The server killed after 3 answers with 997 requests pending (3 in flight): the batch raises
    EndpointUnreachable within seconds of the kill, the proxy sees at most the breaker's 8 failures and the 3 in
    flight after it, and the 3 answers are in the response log (flushed on the way out). Nothing listening at all,
    with 10 or with 1,000 requests pending: the same bound."""
    killed: list[float] = []

    def kill() -> None:
        killed.append(time.monotonic())
        live_server.kill()

    proxy = FaultProxy(live_server.base, answers=3, then=kill)
    try:
        folder = served_generator(
            tmp_path / "endpoint_kill-1",
            EndpointConfig(base_url=proxy.base, model=live_server.folder, max_concurrency=3),
        )
        engine = _engine(folder)
        with pytest.raises(EndpointUnreachable, match="is down: 8 server-side failures in a row") as raised:
            engine(_batch(1000))
        took = time.monotonic() - killed[0]
        assert took < 15, took
        assert proxy.since(killed[0]) <= 8 + 3, proxy.since(killed[0])
        assert "requests not sent, the 3 answered kept" in str(raised.value)
        again = _engine(folder)  # a new worker reads the log
        assert sum(again.kept.get(k) is not None for k in _keys(again, _batch(1000))) == 3
    finally:
        proxy.close()
    for pending in (10, 1000):
        nowhere = f"http://127.0.0.1:{free_port()}/v1"  # a breaker of its own
        folder = served_generator(tmp_path / f"endpoint_none{pending}-1", EndpointConfig(base_url=nowhere, model="m"))
        started = time.monotonic()
        with pytest.raises(EndpointUnreachable, match="connection error"):
            _engine(folder)(_batch(pending))
        assert time.monotonic() - started < 15


def _keys(engine: EndpointGenerator, batch: dict) -> list[str]:
    from common.models.generation.formats import prompt_text
    from common.models.generation.served.log import request_key

    cfg = engine.client.cfg
    prompts = [prompt_text(engine.generator.prompt, str(t)) for t in batch["source_text"]]
    params = engine.client.params
    return [request_key(cfg.base_url, cfg.model, cfg.api, params, Request(p, 0, ONE.seed)) for p in prompts]


def test_malformed_answers_are_failures_with_their_reason_never_an_exception(tmp_path):
    """200s that are no completion: an empty body and an HTML page are the server's failures (retried, then the
    reason); JSON without choices is that prompt's failure (not retried). The batch quarantines each with its
    reason and logs every outcome."""
    cases = {
        b"": ("HTTP 200 with a body that is no JSON object (empty) after 1 retries", True, 2),
        b"<html><body>Service Unavailable</body></html>": (
            "HTTP 200 with a body that is no JSON object "
            "(<html><body>Service Unavailable</body></html>) "
            "after 1 retries",
            True,
            2,
        ),
        b'{"id": "cmpl-1", "object": "text_completion"}': ("a response with no text", False, 1),
        b'{"error": {"message": "upstream timed out"}}': (
            "HTTP 200 with an error: {'message': 'upstream timed out'} after 1 retries",
            True,
            2,
        ),
    }
    for case, (body, (reason, server_side, tries)) in enumerate(cases.items()):
        proxy = FaultProxy("http://127.0.0.1:9/v1", body=body)
        try:
            cfg = EndpointConfig(base_url=proxy.base, model="m", max_retries=1, breaker_failures=100)
            client = EndpointClient(cfg, {"max_tokens": 2}, concurrency=1)
            (outcome,) = client.run([Request("p", 0, 0)])
            assert (outcome.reason, outcome.server, len(proxy.seen)) == (reason, server_side, tries)
            folder = served_generator(tmp_path / f"endpoint_bad{case}-1", cfg)
            rows = _engine(folder)(_batch(2)).to_pylist()
            assert [r["reason"] for r in rows] == [f"endpoint: {reason}"] * 2
        finally:
            proxy.close()
        logged = _logged(tmp_path / RESPONSES / f"endpoint_bad{case}")
        assert [(r["reason"], r["server"]) for r in logged if r["key"]] == [(reason, server_side)] * 2


def test_an_endpoint_that_refuses_every_prompt_or_has_no_quota_is_down_not_a_version_of_nothing(tmp_path):
    """A server answering 400 to every request (a parameter it does not take): after 8 different prompts refused and
    none answered the batch raises, instead of quarantining every row into a version of nothing. Once anything was
    answered (or found answered in the log), refusals are the prompts' own and never open the breaker; 429s are no
    failures. A 429 that says the quota is spent is not waited for: it counts as the endpoint's refusal."""
    from common.models.generation.served.health import Health

    answered, vouched = Health(8, 30.0), Health(8, 30.0)
    answered.answered()
    vouched.vouched()
    assert not any(h.refused("HTTP 400", f"p{i}") for h in (answered, vouched) for i in range(20))
    fresh = Health(8, 30.0)
    assert not any(fresh.refused("HTTP 400", "the same prompt") for _ in range(20))  # one over-long source
    assert not any(fresh.throttled() for _ in range(20)) and not fresh.failed("HTTP 503")
    proxy = FaultProxy("http://127.0.0.1:9/v1", status=400)
    try:
        folder = served_generator(tmp_path / "endpoint_refuse-1", EndpointConfig(base_url=proxy.base, model="m"))
        with pytest.raises(EndpointDown, match="8 different prompts refused and none answered .* HTTP 400"):
            _engine(folder)(_batch(100))
        assert len(proxy.seen) <= 8 + 8  # the breaker's 8, and what was in flight
    finally:
        proxy.close()
    quota = '{"error": {"type": "insufficient_quota"}}'
    proxy = FaultProxy("http://127.0.0.1:9/v1", throttle=1000, throttle_body=quota)
    try:
        started = time.monotonic()
        client = EndpointClient(EndpointConfig(base_url=proxy.base, model="m", breaker_failures=100), {}, 1)
        (outcome,) = client.run([Request("p", 0, 0)])
        assert outcome.reason.startswith("HTTP 429: ") and outcome.server and len(proxy.seen) == 1
        assert time.monotonic() - started < 5
    finally:
        proxy.close()


def _logged(root) -> list[dict]:
    import pyarrow.parquet as pq

    return [r for p in sorted(root.rglob("*.parquet")) for r in pq.read_table(p).to_pylist()]


def test_answers_are_found_by_request_whatever_the_batches_and_a_torn_part_is_sent_again(
    live_server, tmp_path, caplog
):
    """Four sources answered in one batch; a new worker given them in other batches with one new source sends only
    the new one. A part cut short (a kill mid-write on a store without atomic puts) is reported, naming it, and only
    its requests are sent again; a temporary file a killed writer left is not read."""
    folder = served_generator(
        tmp_path / "endpoint_resume-1", EndpointConfig(base_url=live_server.base, model=live_server.folder)
    )
    first = _engine(folder)
    first(_batch(2))
    first(_batch(2, start=2))
    second = _engine(folder, tag="u")
    second(_batch(3, start=0))
    second(_batch(2, start=3))
    assert second.client.stats["requests"] == 1
    parts = sorted((tmp_path / RESPONSES / "endpoint_resume").glob("part-*.parquet"))
    torn = parts[0]
    torn.write_bytes(torn.read_bytes()[:40])
    (torn.parent / ".part-0-left.parquet.tmp").write_bytes(b"PAR1 half")
    caplog.set_level(logging.WARNING)
    third = _engine(folder, tag="w")
    third(_batch(5))
    assert third.client.stats["requests"] == 2  # the torn part's two answers, nothing else
    assert f"{torn} cannot be read" in caplog.text and "left.parquet.tmp" not in caplog.text


def test_a_429_pauses_every_request_of_the_worker_for_as_long_as_it_asks(live_server):
    """Four requests at once all get 429 with retry-after-ms 1500: no request reaches the endpoint sooner than 1.5 s
    after the 429s, then all four are answered; an HTTP-date Retry-After is read as well."""
    proxy = FaultProxy(live_server.base, throttle=4, throttle_headers={"retry-after-ms": "1500", "Retry-After": "9"})
    try:
        client = EndpointClient(
            EndpointConfig(base_url=proxy.base, model=live_server.folder), {"max_tokens": 2}, concurrency=4
        )
        outcomes = client.run([Request(f"toy {i}", 0, 0) for i in range(4)])
        assert all(o.ok for o in outcomes), outcomes
        assert len(proxy.seen) == 8 and min(proxy.seen[4:]) - max(proxy.seen[:4]) >= 1.4
    finally:
        proxy.close()
    from email.utils import formatdate

    from common.models.generation.served.retry import retry_after

    assert 1.0 <= retry_after({"Retry-After": formatdate(time.time() + 3, usegmt=True)}) <= 3.0
    assert retry_after({"retry-after-ms": "250"}) == 0.25 and retry_after({"Retry-After": "600"}, limit=60) == 60


def test_server_failures_past_the_share_refuse_the_commit(live_server, tmp_path, spark):
    """One source of four always answered 503 by its shard (the breaker never opens: answers come between): it is
    quarantined with its reason, and the stage's check before its commit refuses 1 failed request in 4 (past
    max_failed_share 1%), naming the share; at 50% it passes."""
    proxy = FaultProxy(live_server.base, fail_marker="toy number 2")
    try:
        folder = served_generator(
            tmp_path / "endpoint_share-1", EndpointConfig(base_url=proxy.base, model=live_server.folder, max_retries=0)
        )
        rows = _engine(folder, tag="run/t")(_batch(4)).to_pylist()
    finally:
        proxy.close()
    assert [r["reason"] for r in rows if r["reason"]] == ["endpoint: HTTP 503 after 0 retries"]
    with pytest.raises(EndpointUnreachable, match=r"1 of t's 4 requests failed on the server's side .*25\.0%"):
        failed_share_check(spark, [folder], "run/t", "t")()
    lenient = served_generator(
        tmp_path / "endpoint_share-2",
        EndpointConfig(base_url=proxy.base, model=live_server.folder, max_failed_share=0.5),
    )
    failed_share_check(spark, [lenient], "run/t", "t")()


def test_a_routed_pool_never_holds_more_than_max_concurrency_in_flight(live_server, tmp_path, ray_runtime):
    """Genre's routed pool shape: two served generators, four actors asked for, max_concurrency 2: the pool runs two
    actors of one request each, and the proxy never holds more than two in flight."""
    import ray

    from common.models.generation.on_ray.pool import generate_routed

    proxy = FaultProxy(live_server.base)
    try:
        endpoint = EndpointConfig(base_url=proxy.base, model=live_server.folder, max_concurrency=2)
        paths = [served_generator(tmp_path / f"endpoint_topic{t}-1", endpoint) for t in (1, 2)]
        rows = [
            {"source_id": f"r{i}", "source_text": f"toy {i}", "model_path": paths[i % 2], "model_version": "v"}
            for i in range(12)
        ]
        out = generate_routed(
            ray.data.from_items(rows), replace(ONE), concurrency=4, batch_size=3, tag="routed", generator_uris=paths
        ).take_all()
    finally:
        proxy.close()
    assert len(out) == 12 and all(r["reason"] is None for r in out)
    assert 1 <= proxy.peak <= 2 and proxy.answered == 12


def test_ray_does_not_retry_an_outage_and_the_driver_sees_it_as_itself(ray_runtime, tmp_path):
    """A Ray task that raises EndpointUnreachable runs once (retry_exceptions as the runtime sets it), and the
    driver's RayTaskError resolves to it with its own message; a ValueError is retried."""
    import ray

    from common.platform.compute.ray_stages import retried_errors

    @ray.remote(max_retries=2, retry_exceptions=retried_errors(True))
    def attempt(folder: str, error: str) -> None:
        import os

        from common.platform.errors import EndpointUnreachable

        with open(os.path.join(folder, error), "a") as handle:
            handle.write("x")
        raise EndpointUnreachable("http://h/v1/completions is down") if error == "outage" else ValueError("a bug")

    for error, tries in (("outage", 1), ("bug", 3)):
        with pytest.raises(Exception) as raised:
            ray.get(attempt.remote(str(tmp_path), error), timeout=60)
        assert len((tmp_path / error).read_text()) == tries
    with pytest.raises(Exception) as raised:
        ray.get(attempt.remote(str(tmp_path), "outage"), timeout=60)
    found = user_error(raised.value)
    assert isinstance(found, EndpointUnreachable) and str(found) == "http://h/v1/completions is down"
    # The generation pool's own path: an actor pool of Ray Data with the runtime's retry settings.
    from common.models.generation.on_ray.pool import _outages_as_themselves
    from common.platform.compute.ray_stages import actor_fault_tolerance, map_batches_on_actors

    class Failing:  # defined here: Ray pickles it by value (workers cannot import a test module)
        """A pool's callable that counts its tries in ``folder/error`` and raises an outage or a bug."""

        def __init__(self, folder: str, error: str):
            self.path = Path(folder) / error

        def __call__(self, batch):
            with open(self.path, "a") as handle:
                handle.write("x")
            if "outage" in self.path.name:
                raise EndpointDown("http://h/v1/completions is down")
            raise ValueError("a bug")

    for error, tries in (("pool-outage", 1), ("pool-bug", 1 + actor_fault_tolerance()["max_task_retries"])):
        ds = ray.data.from_items([{"x": 1}])
        _outages_as_themselves(ds)
        with pytest.raises(Exception) as raised:
            map_batches_on_actors(
                ds,
                Failing,
                fn_constructor_kwargs={"folder": str(tmp_path), "error": error},
                concurrency=1,
                batch_size=1,
            ).take_all()
        assert len((tmp_path / error).read_text()) == tries, error
        found = user_error(raised.value)
        if error == "pool-outage":
            assert isinstance(found, EndpointDown) and str(found) == "http://h/v1/completions is down", raised.value
        else:
            assert found is None


def test_the_start_check_falls_back_to_one_token_where_models_fails(live_server):
    """``/models`` answering 500 (``transformers serve`` with no hub cache) or 404: a one-token completion decides,
    and the line says which check failed; with completions failing too, the error names both."""
    from common.models.generation.served.checks import check_endpoint

    for status in (500, 404):
        proxy = FaultProxy(live_server.base, models_status=status)
        try:
            line = check_endpoint(EndpointConfig(base_url=proxy.base, model=live_server.folder), complete=False)
        finally:
            proxy.close()
        assert f"/models answered HTTP {status}; a one-token completion in" in line
    proxy = FaultProxy(live_server.base, models_status=500, down=True)
    try:
        with pytest.raises(
            EndpointUnreachable,
            match=r"/models answered HTTP 500, and .*/completions: a one-token "
            r"completion failed: HTTP 503",
        ):
            check_endpoint(EndpointConfig(base_url=proxy.base, model=live_server.folder), complete=False)
    finally:
        proxy.close()


def test_a_second_concurrent_run_of_a_stage_is_refused_at_once_and_goes_ahead_once_the_first_ends(tmp_path):
    """Another process holds the stage's lease on the role's response log (as a running stage does): this run is
    refused at once with StageBusy naming the holder (exit code 6, 'endpoint busy'); the holder killed, the kernel
    frees the lease and the run goes ahead."""
    import subprocess
    import sys

    from common.models.generation.served.log import log_root
    from common.platform.errors import USER_ERRORS, StageBusy
    from common.stages.served_lease import stage_lease

    root = log_root(str(tmp_path / "models" / "endpoint_cga-1"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; sys.path.insert(0, '.');\n"
            "from common.stages.served_lease import stage_lease\n"
            f"with stage_lease([{root!r}], 'cga_generated'):\n    print('held', flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(
            StageBusy,
            match=rf"cga_generated: another run is sending .* held by \S+:{holder.pid} "
            r"since",
        ):
            with stage_lease([root], "cga_generated"):
                pass
        assert time.monotonic() - started < 2
        assert next(code for cls, code, _ in USER_ERRORS if isinstance(StageBusy("x"), cls)) == 6
    finally:
        holder.kill()
        holder.wait(timeout=20)
    with stage_lease([root], "cga_generated"):
        pass
