"""The running gateway's era detection (mcp_edge.upstream.http.era.EraRouter): only an MCP answer is an
era. An upstream that refuses connections, fails (5xx) or answers a page stays undetected (asked
again later), and 2026-07-28 requests keep going to the proxy, never to the legacy bridge."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from mcp_edge.upstream.http.era import EraRouter
from tests.support.processes import free_port


async def _never(scope, receive, send):  # the bridge must not be chosen
    raise AssertionError("sent to the legacy bridge")


def _router(endpoint: str, session: aiohttp.ClientSession) -> EraRouter:
    return EraRouter(
        route="r",
        setting="auto",
        proxy=_never,
        bridge=_never,
        endpoints=lambda: [endpoint],
        host_for=lambda e: "upstream",
        client=lambda: session,
        probe_timeout=2.0,
    )


async def _serve(status: int, content_type: str, body: bytes) -> TestServer:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_post("/mcp", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.mark.parametrize(
    "status,content_type,body",
    [
        (
            503,
            "application/json",
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"overloaded"}}',
        ),
        (502, "text/html", b"<html>bad gateway</html>"),
        (404, "text/html", b"<html>not found</html>"),
        (403, "text/plain", b"blocked"),
        (400, "application/json", b'{"detail":"bad"}'),
    ],
)
async def test_an_erroring_upstream_is_no_era(status, content_type, body):
    server = await _serve(status, content_type, body)
    try:
        async with aiohttp.ClientSession() as session:
            router = _router(str(server.make_url("/mcp")), session)
            assert await router.detect() is None
            outcome = (await router.probe_all())[0]
            assert outcome.era is None and (outcome.unreachable or outcome.not_mcp)
    finally:
        await server.close()


async def test_an_unreachable_upstream_is_no_era():
    async with aiohttp.ClientSession() as session:
        router = _router(f"http://127.0.0.1:{free_port()}/mcp", session)
        assert await router.detect() is None
        assert router.era is None
        assert (await router.probe_all())[0].unreachable.startswith("connection refused")


async def test_a_legacy_answer_is_legacy():
    body = b'{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}'
    server = await _serve(400, "application/json", body)
    try:
        async with aiohttp.ClientSession() as session:
            assert await _router(str(server.make_url("/mcp")), session).detect() == "legacy"
    finally:
        await server.close()
