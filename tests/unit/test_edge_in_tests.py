"""An app's own tests, the way the manual's "Testing your app" says to write them: Starlette's
``TestClient`` entered with ``with`` and ``httpx.AsyncClient`` over ``ASGITransport`` with the
lifespan run (``edge.lifespan()``, or ``asgi_lifespan.LifespanManager`` for any app), each with a
``base_url`` whose host both the Edge and the SDK app accept; and what the usual shortcuts get
(a client that runs no lifespan: 503 ``not_started``; TestClient's own ``testserver`` host: 421).

The apps are the SDK's ``MCPServer`` in the manual's three forms: wrapped, as middleware of a host
app, and mounted with ``lifespan=edge.lifespan``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from mcp_edge import Edge
from mcp_edge.core.seal import generate_key

MODERN = "2026-07-28"
KEY = generate_key()
#: What the manual gives the test clients: a loopback name with a port (the Edge's default
#: allowed hosts are loopback names; the SDK app's own check wants a port with them).
BASE = "http://localhost:8000"


def server() -> MCPServer:
    mcp = MCPServer("app-under-test")

    @mcp.tool()
    def forecast(city: str) -> str:
        """Tomorrow's weather."""
        return f"sunny in {city}"

    return mcp


def call(path: str = "/mcp") -> tuple[str, dict[str, Any], dict[str, str]]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "forecast",
            "arguments": {"city": "Lyon"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "forecast",
    }
    return path, body, headers


def forecast_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    return str(result["content"][0]["text"])


def wrapped() -> Edge:
    return Edge(server().streamable_http_app(json_response=True), anonymous=True, state_keys=KEY)


def hosted() -> Starlette:
    mcp = server()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with mcp.session_manager.run():
            yield

    async def home(_: Request) -> PlainTextResponse:
        return PlainTextResponse("home")

    return Starlette(
        routes=[Route("/", home), Mount("/", mcp.streamable_http_app(json_response=True))],
        middleware=[Middleware(Edge, anonymous=True, state_keys=KEY)],
        lifespan=lifespan,
    )


def mounted() -> Starlette:
    edge = Edge(server().streamable_http_app(json_response=True), anonymous=True, state_keys=KEY)
    return Starlette(routes=[Mount("/tools", edge)], lifespan=edge.lifespan)


FORMS = {
    "wrapped": (wrapped, "/mcp"),
    "hosted": (hosted, "/mcp"),
    "mounted": (mounted, "/tools/mcp"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_test_client_entered_with_with(form: str) -> None:
    build, path = FORMS[form]
    with TestClient(build(), base_url=BASE) as client:
        url, body, headers = call(path)
        assert forecast_of(client.post(url, json=body, headers=headers)) == "sunny in Lyon"


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_async_client_with_the_lifespan_run(form: str) -> None:
    build, path = FORMS[form]
    app = build()
    async with LifespanManager(app) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            url, body, headers = call(path)
            assert (
                forecast_of(await client.post(url, json=body, headers=headers)) == "sunny in Lyon"
            )


async def test_async_client_inside_the_edges_own_lifespan() -> None:
    """Where the test holds the Edge (wrapped, mounted): no other library needed."""
    edge = wrapped()
    async with edge.lifespan():
        transport = httpx.ASGITransport(app=edge)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as client:
            url, body, headers = call()
            assert (
                forecast_of(await client.post(url, json=body, headers=headers)) == "sunny in Lyon"
            )


def test_a_client_that_runs_no_lifespan_gets_not_started(caplog: pytest.LogCaptureFixture) -> None:
    """``TestClient(app)`` without ``with`` and a bare ``ASGITransport`` send no lifespan: the
    Edge has not started (nor has the app it wraps), and says so, with what a test does about
    it; the host's pages are served."""
    caplog.set_level(logging.ERROR, logger="mcp_edge")
    app = hosted()
    client = TestClient(app, base_url=BASE)
    url, body, headers = call()
    answer = client.post(url, json=body, headers=headers)
    assert answer.status_code == 503
    assert answer.json()["error"]["data"] == {"reason": "not_started"}
    assert client.get("/").text == "home"
    (line,) = [r.getMessage() for r in caplog.records if "has not started" in r.getMessage()]
    assert "with TestClient(app)" in line and "edge.lifespan()" in line


def test_test_clients_own_host_is_not_an_allowed_host() -> None:
    """``testserver`` is no loopback name: the Edge refuses it as it would any foreign Host."""
    with TestClient(wrapped()) as client:
        url, body, headers = call()
        answer = client.post(url, json=body, headers=headers)
    assert answer.status_code == 421
    assert json.loads(answer.text)["error"]["message"] == "Invalid Host header"
