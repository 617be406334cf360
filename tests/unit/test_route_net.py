"""Every answer on an MCP route is a JSON-RPC message, whatever fails in whichever middleware:
each layer of a route's stack (observe, compat, transport, legacy sessions, flow, the features,
the upstream adapters) is made to raise in turn, and the client gets ``-32603`` with HTTP 500 for
its request's id (``null`` while the body was not read yet), never the server's plain-text 500;
the failure is logged once, with the exception's type and not its message. A failure after the
response started ends it (no second response)."""

from __future__ import annotations

import json
import logging
from typing import Any

import orjson
import pytest

from mcp_edge.cache.layer import EdgeCacheLayer
from mcp_edge.core.seal import generate_key
from mcp_edge.edge.compat import CompatMiddleware
from mcp_edge.edge.flow import FlowMiddleware
from mcp_edge.edge.legacy_sessions import LegacySessionsMiddleware
from mcp_edge.edge.observe import ObserveMiddleware
from mcp_edge.edge.transport import TransportMiddleware
from mcp_edge.policy.layer import PolicyListLayer
from mcp_edge.ratelimit.limiter import RateLimitLayer
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config, load_key_ring
from mcp_edge.upstream.http.era import EraRouter
from mcp_edge.upstream.http.proxy import HttpProxy
from mcp_edge.upstream.legacy.bridge import LegacyBridge

MODERN = "2026-07-28"
SECRET = "s3cr3t-in-the-message"
UPSTREAM = "http://127.0.0.1:9/mcp"


async def answering(scope: Any, receive: Any, send: Any) -> None:
    """The in-process upstream of the control route: a result for the request's id."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    rid = orjson.loads(body)["id"]
    answer = orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "tools": []}})
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> GatewayApp:
    doc = {
        "auth": {"mode": "anonymous"},
        "state": {"keys": [generate_key()]},
        "routes": [
            {
                "name": "all",
                "path": "/all",
                "upstream": UPSTREAM,
                "legacy_clients": "deny",
                "compat": {"missing_capability_status": 200},
                "policy": {"rules": [{"when": 'name == "nothing"', "action": "deny"}]},
                "rate_limits": {"per_principal": "1000/second"},
                "cache": {"enabled": True},
            },
            {"name": "modern", "path": "/modern", "upstream": UPSTREAM, "era": "modern"},
            {"name": "legacy", "path": "/legacy", "upstream": UPSTREAM, "era": "legacy"},
            {"name": "inproc", "path": "/inproc", "upstream": UPSTREAM},
        ],
    }
    path = tmp_path_factory.mktemp("net") / "gateway.yaml"
    path.write_text(json.dumps(doc))
    config = load_config(str(path), env={})
    return GatewayApp(config, load_key_ring(config.state), inner_apps={"inproc": answering})


def modern(rid: Any, method: str = "tools/call") -> tuple[list[tuple[bytes, bytes]], bytes]:
    params: dict[str, Any] = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    }
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", MODERN.encode()),
        (b"mcp-method", method.encode()),
    ]
    if method == "tools/call":
        params.update(name="echo", arguments={})
        headers.append((b"mcp-name", b"echo"))
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    return headers, body


def legacy(rid: Any) -> tuple[list[tuple[bytes, bytes]], bytes]:
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2025-06-18"),
        (b"mcp-session-id", b"not-a-sealed-one"),
    ]
    return headers, orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/list"})


async def call(
    app: GatewayApp, path: str, request: tuple[list[tuple[bytes, bytes]], bytes]
) -> list[dict[str, Any]]:
    headers, body = request
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return pending.pop() if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(dict(message))

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [*headers, (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    await app(scope, receive, send)
    return sent


def answer_of(sent: list[dict[str, Any]]) -> tuple[int, dict[str, str], Any]:
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert len(starts) == 1, sent
    bodies = [m for m in sent if m["type"] == "http.response.body"]
    assert bodies and not bodies[-1].get("more_body", False), sent
    headers = {k.decode(): v.decode() for k, v in starts[0]["headers"]}
    return starts[0]["status"], headers, json.loads(b"".join(m.get("body", b"") for m in bodies))


def failing(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"something broke: {SECRET}")


#: (the layer made to raise, the route, the request, the id the answer carries)
CASES = [
    (ObserveMiddleware, "/all", modern("r-observe"), None),
    (CompatMiddleware, "/all", modern("r-compat"), None),
    (TransportMiddleware, "/all", modern("r-transport"), None),
    (LegacySessionsMiddleware, "/legacy", legacy("r-legacy-sessions"), "r-legacy-sessions"),
    (FlowMiddleware, "/all", modern("r-flow"), "r-flow"),
    (PolicyListLayer, "/all", modern("r-policy", "tools/list"), "r-policy"),
    (RateLimitLayer, "/all", modern("r-rate"), "r-rate"),
    (EdgeCacheLayer, "/all", modern("r-cache", "tools/list"), "r-cache"),
    (EraRouter, "/all", modern("r-era"), "r-era"),
    (HttpProxy, "/modern", modern(7), 7),
    (LegacyBridge, "/legacy", modern(8), 8),
]


@pytest.mark.parametrize(
    ("layer", "path", "request_", "rid"), CASES, ids=[c[0].__name__ for c in CASES]
)
async def test_whatever_raises_the_answer_is_json_rpc_for_the_id(
    app: GatewayApp,
    layer: type,
    path: str,
    request_: Any,
    rid: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(layer, "__call__", failing)
    with caplog.at_level(logging.DEBUG, logger="mcp_edge"):
        status, headers, doc = answer_of(await call(app, path, request_))
    assert status == 500 and headers["content-type"] == "application/json"
    assert doc == {
        "jsonrpc": "2.0",
        "id": rid,
        "error": {"code": -32603, "message": "Internal error", "data": {"reason": "internal"}},
    }
    failures = [r for r in caplog.records if r.getMessage() == "request failed inside the gateway"]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert all(SECRET not in r.getMessage() and not r.exc_info for r in caplog.records)
    assert failures[0].fields["error"] == "RuntimeError"  # type: ignore[attr-defined]


async def test_the_control_route_answers(app: GatewayApp) -> None:
    status, _, doc = answer_of(await call(app, "/inproc", modern("ok")))
    assert status == 200 and doc["id"] == "ok" and "result" in doc


async def test_a_failure_after_the_answer_started_ends_it(
    app: GatewayApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Transport starts a streamed answer, then fails: the stream is ended, nothing else is
    sent (a second response would be a protocol error)."""

    async def started_then_failed(self: Any, scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b"event: message\n", "more_body": True})
        raise RuntimeError(SECRET)

    monkeypatch.setattr(TransportMiddleware, "__call__", started_then_failed)
    with caplog.at_level(logging.DEBUG, logger="mcp_edge"):
        sent = await call(app, "/inproc", modern("late"))
    assert [m["type"] for m in sent] == [
        "http.response.start",
        "http.response.body",
        "http.response.body",
    ]
    assert sent[1]["more_body"] is True and sent[2] == {
        "type": "http.response.body",
        "body": b"",
        "more_body": False,
    }
    failures = [r for r in caplog.records if r.getMessage() == "request failed inside the gateway"]
    assert len(failures) == 1 and all(SECRET not in r.getMessage() for r in caplog.records)
