"""The answer budget in process: what the response side holds of an upstream answer counts against
``limits.max_inflight_answer_bytes``; over it the client gets a JSON-RPC error for its id (503
with ``Retry-After``, or the last event of a stream already begun) and
``mcp_edge_answer_refused`` counts it; a large answer reaches the server in slices; what was
taken is given back when the request is over. The process-level view (RSS with clients that do
not read) is ``tests/integration/test_answer_budget.py``."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge.responses import SLICE_BYTES, UNCOUNTED_BYTES
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config

MODERN = "2026-07-28"
RING = KeyRing([parse_key_spec(generate_key())])
BUDGET = 1024 * 1024
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def answer(rid: Any, text_bytes: int) -> bytes:
    contents = [{"uri": "big://x", "text": "x" * text_bytes}]
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", "contents": contents}}
    )


class Upstream:
    """Answers ``resources/read`` with ``size`` bytes of text, as JSON or as an SSE stream (a
    progress notification, then the result), in 16 KiB chunks."""

    def __init__(self, size: int, sse: bool = False) -> None:
        self.size = size
        self.sse = sse

    async def __call__(self, scope, receive, send) -> None:
        rid = orjson.loads((await receive())["body"])["id"]
        body = answer(rid, self.size)
        ctype = b"application/json"
        if self.sse:
            ctype = b"text/event-stream"
            note = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": "t", "progress": 1},
                }
            )
            body = b"event: message\r\ndata: %b\r\n\r\nevent: message\r\ndata: %b\r\n\r\n" % (
                note,
                body,
            )
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", ctype)]}
        )
        for start in range(0, len(body), 16384):
            await send(
                {
                    "type": "http.response.body",
                    "body": body[start : start + 16384],
                    "more_body": True,
                }
            )
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def gateway(upstream: Upstream) -> GatewayApp:
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    config.limits.max_inflight_answer_bytes = BUDGET
    return GatewayApp(config, RING, inner_apps={"default": upstream})


async def read(app: GatewayApp, rid: Any) -> tuple[int, dict[str, str], list[bytes]]:
    """One ``resources/read`` through the app: status, headers, and the body messages' bytes."""
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "resources/read",
            "params": {"uri": "big://x", "_meta": META},
        }
    )
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"localhost:8080"),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"mcp-protocol-version", MODERN.encode()),
            (b"mcp-method", b"resources/read"),
            (b"mcp-name", b"big://x"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    out: dict[str, Any] = {"parts": []}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        raise AssertionError("the gateway waited for the client")

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            out["parts"].append(bytes(message.get("body", b"")))

    await app(scope, receive, send)
    return out["status"], out["headers"], out["parts"]


def refused(app: GatewayApp) -> float:
    for line in generate_latest(app.metrics.registry).decode().splitlines():
        if line.startswith("mcp_edge_answer_refused_total{") and 'reason="answer_budget"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def held(app: GatewayApp) -> float:
    for line in generate_latest(app.metrics.registry).decode().splitlines():
        if line.startswith("mcp_edge_answer_bytes_held "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("mcp_edge_answer_bytes_held is not exposed")


async def test_an_answer_over_the_budget_gets_a_json_rpc_error_for_its_id():
    app = gateway(Upstream(300 * 1024))
    budget = app.stacks.answer_budget
    others = BUDGET - 200 * 1024  # what answers in flight for other clients hold
    assert budget.try_take(others)
    status, headers, parts = await read(app, "r-1")
    assert status == 503 and headers["retry-after"] == "1"
    doc = orjson.loads(b"".join(parts))
    assert doc == {
        "jsonrpc": "2.0",
        "id": "r-1",
        "error": {
            "code": -32603,
            "message": "The gateway is holding as many answers as it may; retry shortly",
            "data": {"reason": "answer_budget"},
        },
    }
    assert refused(app) == 1
    assert budget.in_use == others  # nothing of the refused answer stays counted
    assert held(app) == others


async def test_a_stream_already_begun_ends_with_the_error_event():
    app = gateway(Upstream(300 * 1024, sse=True))
    assert app.stacks.answer_budget.try_take(BUDGET - 200 * 1024)
    status, _, parts = await read(app, 7)
    assert status == 200
    events = [
        orjson.loads(line[len(b"data: ") :])
        for line in b"".join(parts).split(b"\r\n")
        if line.startswith(b"data: ")
    ]
    assert events[0]["method"] == "notifications/progress"
    assert events[-1] == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32603,
            "message": "The gateway is holding as many answers as it may; retry shortly",
            "data": {"reason": "answer_budget"},
        },
    }
    assert len(events) == 2 and refused(app) == 1


async def test_small_answers_are_never_refused_for_the_budget():
    app = gateway(Upstream(UNCOUNTED_BYTES - 1024))
    assert app.stacks.answer_budget.try_take(BUDGET)  # all of it held by others
    status, _, parts = await read(app, 1)
    assert status == 200 and orjson.loads(b"".join(parts))["result"]["contents"]
    assert refused(app) == 0


@pytest.mark.parametrize("sse", [False, True])
async def test_a_large_answer_reaches_the_server_in_slices_and_gives_the_budget_back(sse):
    size = 900 * 1024
    app = gateway(Upstream(size, sse=sse))
    status, _, parts = await read(app, 3)
    assert status == 200
    whole = b"".join(parts)
    if sse:
        whole = whole.split(b"data: ")[-1].strip()
    assert orjson.loads(whole)["result"]["contents"][0]["text"] == "x" * size
    assert max(len(p) for p in parts) <= SLICE_BYTES and len(parts) > size // SLICE_BYTES
    assert app.stacks.answer_budget.in_use == 0 and held(app) == 0 and refused(app) == 0
