"""The model server of the endpoint tests and the fault proxy in front of it, both real HTTP servers on loopback.

:class:`Server` is Hugging Face's ``transformers serve`` of the packaged SmolLM2 (a process the tests start, kill and
start again on the same port). :class:`FaultProxy` is an HTTP proxy of this suite's own in front of it, answering as
a gateway or an API front does on a bad night: 429 with ``Retry-After`` (or ``retry-after-ms``) for the first
requests, 503 for every request, 503 for the prompts that hold a marker, a 200 with a body that is no completion,
502 when the server behind it is gone. It counts what it saw: requests, their times, the answers it passed on and
the most requests it held in flight at once.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from cluster.local_cluster import free_port, start_model_server


class Server:
    """``transformers serve`` of the materialised SmolLM2 on a loopback port, as a process the tests start, kill and
    start again on the same port. Its hub cache is an empty folder of its own (with none, its /v1/models answers
    500; with one, it lists no local folder). :meth:`completions` counts the completions it answered, from its own
    access log."""

    def __init__(self, folder: str, scratch: Path):
        self.folder, self.scratch, self.port = folder, scratch, free_port()
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

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def completions(self) -> int:
        """Completions this start of the server answered (its access log's 200 lines)."""
        text = self.log_path.read_text(errors="replace")
        return sum('"POST /v1/completions HTTP/1.1" 200' in line for line in text.splitlines())

    def kill(self) -> None:
        if self.running():
            self.process.kill()
            self.process.wait(timeout=20)


def serve_forever(handle, port: int, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    """Serve the aiohttp handler ``handle`` for every method and path on 127.0.0.1:``port`` in ``loop``, in the
    calling thread until the loop is stopped; ``ready`` is set once it listens."""
    from aiohttp import web

    async def start():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()

    asyncio.set_event_loop(loop)
    loop.run_until_complete(start())
    loop.run_forever()


class FaultProxy:
    """A proxy on loopback in front of ``upstream`` (a ``/v1`` base URL). ``throttle`` first requests get 429 with
    ``throttle_headers``; every request 503 while ``down``; a request whose body holds ``fail_marker`` 503; with
    ``body`` set, a 200 with that body instead of the server's answer; with ``status``, that status for every request;
    ``/models`` with ``models_status`` when set;
    a server that does not answer, 502. After
    ``answers`` forwarded answers it calls ``then()`` once (the server's kill), with the proxy's lock held so that no
    answer is passed on past that count. Counts requests (``seen``: monotonic times), ``answered`` and ``peak`` in
    flight."""

    def __init__(
        self,
        upstream: str,
        throttle: int = 0,
        throttle_headers: Optional[dict] = None,
        down: bool = False,
        fail_marker: Optional[str] = None,
        body: Optional[bytes] = None,
        answers: Optional[int] = None,
        then: Optional[Callable[[], None]] = None,
        models_status: Optional[int] = None,
        status: Optional[int] = None,
        throttle_body: str = "rate limited",
    ):
        self.upstream, self.throttle, self.down, self.fail_marker, self.body = (
            upstream,
            throttle,
            down,
            fail_marker,
            body,
        )
        self.throttle_headers = throttle_headers or {"Retry-After": "1"}
        self.answers, self.then, self.models_status = answers, then, models_status
        self.status, self.throttle_body = status, throttle_body
        self.seen: list[float] = []
        self.auth: set[str] = set()
        self.answered = self.in_flight = self.peak = 0
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()
        assert self._ready.wait(10)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        from aiohttp import ClientError, ClientSession, web

        lock = asyncio.Lock()

        async def forward(request, data: bytes):
            async with ClientSession() as session:
                async with session.request(
                    request.method,
                    self.upstream + request.path_qs[len("/v1") :],
                    data=data,
                    headers={"Content-Type": "application/json"},
                ) as answer:
                    return answer.status, await answer.read()

        async def handle(request):
            self.seen.append(time.monotonic())
            self.auth.add(request.headers.get("Authorization", ""))
            data = await request.read()
            if self.models_status and request.path.endswith("/models"):
                return web.Response(status=self.models_status, text="model list unavailable")
            if self.down:
                return web.Response(status=503, text="upstream overloaded")
            if len(self.seen) <= self.throttle:
                return web.Response(status=429, headers=self.throttle_headers, text=self.throttle_body)
            if self.status is not None:
                return web.Response(status=self.status, text='{"error": "this server takes no such request"}')
            if self.fail_marker and self.fail_marker.encode() in data:
                return web.Response(status=503, text="this shard is down")
            if self.body is not None:
                return web.Response(status=200, body=self.body, content_type="text/html")
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                status, body = await forward(request, data)
            except (ClientError, OSError):
                return web.Response(status=502, text="bad gateway: the upstream does not answer")
            finally:
                self.in_flight -= 1
            if status == 200 and request.path.endswith("completions"):
                async with lock:  # the count and the kill at once: no answer slips past the limit
                    if self.answers is not None and self.answered >= self.answers:
                        return web.Response(status=502, text="bad gateway: the upstream is gone")
                    self.answered += 1
                    if self.then is not None and self.answers is not None and self.answered >= self.answers:
                        await asyncio.get_running_loop().run_in_executor(None, self.then)
            return web.Response(status=status, body=body, content_type="application/json")

        serve_forever(handle, self.port, self._loop, self._ready)

    def since(self, moment: float) -> int:
        """Requests the proxy saw after ``moment`` (monotonic)."""
        return sum(t > moment for t in self.seen)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)


def served_generator(
    folder: Path, endpoint, prompt: str = "Product title: {source}\nThe same product, another title:"
) -> str:
    """A served generator's folder for ``endpoint`` (an EndpointConfig), as the fine-tune stage writes it: one of two
    pairs in the prompt."""
    from dataclasses import asdict

    from common.models.generation.fine_tune_specs import ModelSpec
    from common.models.generation.kinds.in_context import save_endpoint

    spec = ModelSpec(kind="endpoint", prompt=prompt, in_context=1, endpoint=asdict(endpoint))
    save_endpoint([("red toy car", "toy car, red"), ("green ball", "ball in green")], str(folder), spec, seed=3)
    return str(folder)
