"""An S3 server (moto's) behind an HTTP proxy on loopback that refuses what a test chooses: the object store's faults
(a 403 a bucket policy gives, a 503 an overloaded store gives) from real servers.

Both run in a process of their own (``python s3_proxy.py``): delta-rs holds the GIL through some of its blocking
calls (``DeltaTable.is_deltatable``), so a server in the test's own process would never answer them. The test steers
the proxy through its control path, ``/__proxy__``: the refusals to give (:meth:`S3Proxy.refuse`) and how many it
gave (:attr:`S3Proxy.refused`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Iterator

DENIED = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'
)
UNAVAILABLE = (
    '<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>Please reduce '
    "your request rate.</Message></Error>"
)
CONTROL = "/__proxy__"


class S3Proxy:
    """The proxy (and the S3 server behind it) in their process: forwards every request except those a rule
    answers itself."""

    def __init__(self, process: subprocess.Popen, port: int):
        self.process, self.port = process, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def refuse(self, method: str = "", path_holding: str = "", status: int = 503, body: str = UNAVAILABLE) -> None:
        """From now on answer ``status`` with ``body`` to every request of ``method`` (any when empty) whose path
        holds ``path_holding``; ``refuse(status=0)`` forwards everything again."""
        rule = {"method": method, "path": path_holding, "status": status, "body": body} if status else None
        self._control("POST", json.dumps(rule).encode())

    @property
    def refused(self) -> int:
        """How many requests the proxy answered itself."""
        return json.loads(self._control("GET"))["refused"]

    def _control(self, method: str, data: bytes | None = None) -> bytes:
        request = urllib.request.Request(self.url + CONTROL, data=data, method=method)
        return urllib.request.urlopen(request, timeout=10).read()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    @classmethod
    @contextlib.contextmanager
    def over_moto(cls, monkeypatch) -> Iterator["S3Proxy"]:
        """A moto S3 server behind a proxy that forwards everything (until :meth:`refuse`), in a process of their
        own; the AWS environment (endpoint, test credentials, region, plain HTTP) pointed at the proxy for boto3,
        pyarrow and delta-rs."""
        import select
        import tempfile

        errors = tempfile.TemporaryFile()
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )
        # the proxy's port, once both listen: within a minute, or the process's own words
        ready = select.select([process.stdout], [], [], 60)[0]
        line = process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            process.kill()
            errors.seek(0)
            raise AssertionError(f"the S3 proxy did not start: {line!r} {errors.read()[-2000:]!r}")
        proxy = cls(process, int(line))
        for name, value in {
            "AWS_ENDPOINT_URL": proxy.url,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
            "AWS_EC2_METADATA_DISABLED": "true",
        }.items():
            monkeypatch.setenv(name, value)
        try:
            yield proxy
        finally:
            proxy.close()


def _serve() -> None:
    """The process: moto's server on a free port, the proxy in front of it on another, that port printed once both
    listen; serves until terminated."""
    import asyncio
    import socket

    from aiohttp import ClientSession, web
    from moto.server import ThreadedMotoServer

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    upstream_port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=upstream_port, verbose=False)
    moto.start()
    upstream = f"http://127.0.0.1:{upstream_port}"
    state = {"rule": None, "refused": 0}

    async def handle(request):
        if request.path == CONTROL:
            if request.method == "POST":
                state["rule"] = json.loads(await request.read())
            return web.json_response({"refused": state["refused"]})
        rule = state["rule"]
        if rule and rule["method"] in ("", request.method) and rule["path"] in request.path:
            state["refused"] += 1
            return web.Response(status=rule["status"], body=rule["body"].encode(), content_type="application/xml")
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "transfer-encoding")
        }
        # A HEAD is asked upstream as a GET: aiohttp answers the client's HEAD with that body's length and without
        # the body, so the object's size (what a client reads from a HEAD) passes through.
        method = "GET" if request.method == "HEAD" else request.method
        async with ClientSession(auto_decompress=False) as session:
            async with session.request(
                method, upstream + request.path_qs, headers=headers, data=await request.read()
            ) as answer:
                body = await answer.read()
                keep = {
                    k: v
                    for k, v in answer.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")
                }
                return web.Response(status=answer.status, body=body, headers=keep)

    async def start() -> None:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        print(port, flush=True)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(start())
    try:
        loop.run_forever()
    finally:
        moto.stop()


if __name__ == "__main__":
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    _serve()
