"""An HTTP proxy on loopback in front of an S3 server (moto's, in this process) that refuses what a test chooses:
the object store's faults (a 403 a bucket policy gives, a 503 an overloaded store gives) from a real server."""
from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Callable, Iterator, Optional

from cluster.local_cluster import free_port
from model_server import serve_forever

DENIED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message>'
          b'</Error>')
UNAVAILABLE = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ServiceUnavailable</Code><Message>Please reduce '
               b'your request rate.</Message></Error>')

# (method, path) -> None to forward the request, or (status, body) to answer it so
Refusal = Callable[[str, str], Optional[tuple[int, bytes]]]


class S3Proxy:
    """Forwards every request to ``upstream`` except those ``refuse`` answers itself; counts those (``refused``)."""

    def __init__(self, upstream: str, refuse: Refusal = lambda method, path: None):
        self.upstream, self.refuse, self.port, self.refused = upstream, refuse, free_port(), 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._serve, args=(ready,), daemon=True).start()
        assert ready.wait(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, ready: threading.Event) -> None:
        from aiohttp import ClientSession, web

        async def handle(request):
            answer = self.refuse(request.method, request.path)
            if answer is not None:
                self.refused += 1
                return web.Response(status=answer[0], body=answer[1], content_type="application/xml")
            headers = {k: v for k, v in request.headers.items()
                       if k.lower() not in ("host", "content-length", "transfer-encoding")}
            async with ClientSession(auto_decompress=False) as session:
                async with session.request(request.method, self.upstream + request.path_qs, headers=headers,
                                           data=await request.read()) as answer:
                    body = await answer.read()
                    keep = {k: v for k, v in answer.headers.items()
                            if k.lower() not in ("content-length", "transfer-encoding", "connection")}
                    return web.Response(status=answer.status, body=body, headers=keep)

        serve_forever(handle, self.port, self._loop, ready)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    @classmethod
    @contextlib.contextmanager
    def over_moto(cls, monkeypatch) -> Iterator["S3Proxy"]:
        """A moto S3 server behind a proxy that forwards everything (set ``refuse`` after); the AWS environment
        (endpoint, test credentials, region, plain HTTP) pointed at the proxy for boto3, pyarrow and delta-rs."""
        from moto.server import ThreadedMotoServer

        port = free_port()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
        server.start()
        proxy = cls(f"http://127.0.0.1:{port}")
        for name, value in {"AWS_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": "test",
                            "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                            "AWS_REGION": "us-east-1",
                            "AWS_ALLOW_HTTP": "true", "AWS_EC2_METADATA_DISABLED": "true"}.items():
            monkeypatch.setenv(name, value)
        try:
            yield proxy
        finally:
            proxy.close()
            server.stop()
