"""The floors under the gateway, for ``bench.layers``: the least an ASGI server plus an upstream
client can cost per call, with none of the gateway's own work.

``canned``  reads the body and answers the small result for the request's id (the ASGI server
            alone: no upstream call)
``proxy``   forwards the body and the MCP headers to ``BENCH_UPSTREAM`` with a pooled aiohttp
            session (as the gateway does) and relays the answer (server + upstream client)
``proxy_factory`` / ``canned_factory``: the same, as factories (for servers that want one)

Served by any ASGI server: ``uvicorn bench.passthrough:proxy``, ``hypercorn``, ``granian``.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp
import orjson

from bench.light import answer

_FORWARD = (b"content-type", b"accept", b"mcp-protocol-version", b"mcp-method", b"mcp-name")
_JSON = [(b"content-type", b"application/json")]


async def _body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(parts)


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def canned(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await _lifespan(receive, send)
        return
    body = answer(orjson.loads(await _body(receive)))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*_JSON, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Proxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self._client: aiohttp.ClientSession | None = None
        self._native: Any = None
        self._host = upstream.split("/")[2].encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if self._client is None:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=512, limit_per_host=0),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            )
        body = await _body(receive)
        headers = {k.decode(): v.decode() for k, v in scope["headers"] if k in _FORWARD}
        async with self._client.post(self.upstream, data=body, headers=headers) as response:
            out = [
                (k.lower(), v)
                for k, v in response.raw_headers
                if k.lower() in (b"content-type", b"content-length")
            ]
            await send({"type": "http.response.start", "status": response.status, "headers": out})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


class NativeProxy(Proxy):
    """The same with the gateway's own upstream client (mcp_edge.upstream.http.client)."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        from mcp_edge.upstream.http.client import UpstreamClient

        if self._native is None:
            self._native = UpstreamClient()
        body = await _body(receive)
        headers = [(k, v) for k, v in scope["headers"] if k in _FORWARD]
        headers.append((b"host", self._host))
        response = await self._native.request("POST", self.upstream, headers, body)
        try:
            out = [
                (k.lower(), v)
                for k, v in response.raw_headers
                if k.lower() in (b"content-type", b"content-length")
            ]
            await send({"type": "http.response.start", "status": response.status, "headers": out})
            async for chunk in response.chunks():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            response.release()
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def native_factory() -> NativeProxy:
    return NativeProxy(os.environ["BENCH_UPSTREAM"])


def proxy_factory() -> Proxy:
    return Proxy(os.environ["BENCH_UPSTREAM"])


def canned_factory() -> Any:
    return canned


proxy = Proxy(os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:9/mcp"))
