"""mcp_edge.server.stack: a 2025-era request passes through the session sealing its era needs, and
a 2026-07-28 request goes from the transport checks straight to the MRTR flow."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mcp_edge.core.envelope import SUPPORTED_VERSIONS
from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge import legacy_sessions
from mcp_edge.edge.asgi import send_json
from mcp_edge.edge.context import SCOPE_KEY
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config
from tests.support.legacy import ACCEPT, legacy_initialize

VERSION = SUPPORTED_VERSIONS[0]
UPSTREAM_SESSION = "upstream-session-7"


class Upstream:
    """The route's inner app: answers every request with a session id, and keeps the session ids
    it was sent."""

    def __init__(self) -> None:
        self.sessions: list[str | None] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body", False):
            pass
        scope[SCOPE_KEY].answered_by = "http://upstream.test/mcp"  # as an upstream adapter does
        sent = dict(scope["headers"]).get(b"mcp-session-id")
        self.sessions.append(sent.decode() if sent is not None else None)
        await send_json(
            send,
            200,
            b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}',
            [(b"mcp-session-id", UPSTREAM_SESSION.encode())],
        )


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The era of each request that went through the session-sealing middleware."""
    seen: list[str] = []
    original = legacy_sessions.LegacySessionsMiddleware.__call__

    async def spy(self: Any, scope: Any, receive: Any, send: Any) -> None:
        seen.append("2026" if scope[SCOPE_KEY].modern else "2025")
        await original(self, scope, receive, send)

    monkeypatch.setattr(legacy_sessions.LegacySessionsMiddleware, "__call__", spy)
    return seen


async def client_for(upstream: Upstream) -> httpx.AsyncClient:
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    app = GatewayApp(
        config, KeyRing([parse_key_spec(generate_key())]), inner_apps={"default": upstream}
    )
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost:8080", timeout=10
    )


def modern_call() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": VERSION,
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }


async def test_a_2025_era_session_is_sealed_on_its_way_through(passes: list[str]) -> None:
    upstream = Upstream()
    async with await client_for(upstream) as http:
        r = await http.post("/mcp", headers={"Accept": ACCEPT}, json=legacy_initialize("c"))
        assert r.status_code == 200, r.text
        token = r.headers["mcp-session-id"]
        assert token != UPSTREAM_SESSION and UPSTREAM_SESSION not in token  # sealed
        r = await http.post(
            "/mcp",
            headers={
                "Accept": ACCEPT,
                "Mcp-Session-Id": token,
                "MCP-Protocol-Version": "2025-11-25",
            },
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert r.status_code == 200, r.text
    assert upstream.sessions == [None, UPSTREAM_SESSION]  # opened again for the upstream
    assert passes == ["2025", "2025"]


async def test_a_2026_request_goes_past_the_session_sealing(passes: list[str]) -> None:
    upstream = Upstream()
    async with await client_for(upstream) as http:
        r = await http.post(
            "/mcp",
            headers={
                "Accept": ACCEPT,
                "MCP-Protocol-Version": VERSION,
                "Mcp-Method": "tools/list",
                "Mcp-Session-Id": "not-a-sealed-token",
            },
            json=modern_call(),
        )
    # Not refused as an unknown session, and the answer's header is not sealed: this era has no
    # sessions, so the sealing middleware is not on its path at all.
    assert r.status_code == 200, r.text
    assert r.headers.get("mcp-session-id") == UPSTREAM_SESSION
    assert upstream.sessions == ["not-a-sealed-token"]
    assert passes == []
