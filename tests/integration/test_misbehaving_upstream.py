"""Upstreams that break the rules, or break: caught at the edge.

A fake upstream is used only to provoke what no real server does (input_required on tools/list,
undeclared capabilities, unknown input methods, garbage bodies, silence)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.config import load_config
from gateway.core.seal import KeyRing, generate_key, parse_key_spec

MODERN = "2026-07-28"
RING = KeyRing([parse_key_spec(generate_key())])


class FakeUpstream:
    """An ASGI MCP 'server' answering each request with ``reply(request_doc)``."""

    def __init__(self, reply: Callable[[dict[str, Any]], tuple[int, str, bytes]]) -> None:
        self.reply = reply
        self.received: list[dict[str, Any]] = []

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        doc = orjson.loads(body)
        self.received.append(doc)
        status, ctype, payload = self.reply(doc)
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", ctype.encode())]})
        await send({"type": "http.response.body", "body": payload})


def result_reply(result: dict[str, Any], sse: bool = False):
    def reply(doc):
        msg = orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result})
        if sse:
            note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/progress",
                                 "params": {"progressToken": "t", "progress": 1}})  # fmt: skip
            return 200, "text/event-stream", b"event: message\r\ndata: " + note + b"\r\n\r\nevent: message\r\ndata: " + msg + b"\r\n\r\n"
        return 200, "application/json", msg

    return reply


def make_gateway(upstream, **config_overrides) -> GatewayApp:
    config = load_config(None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True})
    for section, values in config_overrides.items():
        for k, v in values.items():
            setattr(getattr(config, section), k, v)
    inner = {"default": upstream} if upstream is not None else None
    return GatewayApp(config, RING, inner_apps=inner)


def rpc(method: str, request_id: int = 1, caps: dict | None = None, **params):
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {},
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def hdrs(method: str, name: str | None = None) -> dict[str, str]:
    h = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Accept": "application/json, text/event-stream"}
    if name:
        h["Mcp-Name"] = name
    return h


async def post(app, doc, headers) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as client:
        return await client.post("/mcp", json=doc, headers=headers)


ELICIT = {"method": "elicitation/create", "params": {"message": "?", "requestedSchema": {"type": "object"}}}


async def test_input_required_on_tools_list_never_reaches_the_client():
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT}}))
    app = make_gateway(upstream)
    r = await post(app, rpc("tools/list", 5, {"elicitation": {}}), hdrs("tools/list"))
    assert r.status_code == 200
    assert r.json()["id"] == 5 and r.json()["error"]["code"] == -32603
    assert "tools/list" in r.json()["error"]["message"]
    assert "result" not in r.json()
    assert 'mcp_edge_input_required_violations_total{kind="input_required_on_method",route="default"} 1.0' in (
        _metrics(app))


async def test_input_required_on_other_method_over_sse_is_replaced():
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "requestState": "x"}, sse=True))
    r = await post(make_gateway(upstream), rpc("prompts/list", 6), hdrs("prompts/list"))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert "notifications/progress" in events[0]
    final = orjson.loads(events[-1])
    assert final["id"] == 6 and final["error"]["code"] == -32603


@pytest.mark.parametrize(
    "result,caps,status,code",
    [
        ({"resultType": "input_required", "inputRequests": {"a": ELICIT}}, {"sampling": {}}, 400, -32021),
        ({"resultType": "input_required", "inputRequests": {"a": {"method": "ping", "params": {}}}}, {"elicitation": {}}, 200, -32603),
        ({"resultType": "input_required"}, {"elicitation": {}}, 200, -32603),
        ({"resultType": "input_required", "inputRequests": {}}, {"elicitation": {}}, 200, -32603),
    ],
)
async def test_misbehaving_input_required_is_caught(result, caps, status, code):
    upstream = FakeUpstream(result_reply(result))
    r = await post(make_gateway(upstream), rpc("tools/call", 7, caps, name="t", arguments={}), hdrs("tools/call", "t"))
    assert r.status_code == status
    assert r.json()["id"] == 7 and r.json()["error"]["code"] == code
    if code == -32021:
        assert r.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_sse_input_required_is_sealed_in_the_last_event():
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT},
                                          "requestState": "plain"}, sse=True))  # fmt: skip
    r = await post(make_gateway(upstream), rpc("tools/call", 8, {"elicitation": {}}, name="t"), hdrs("tools/call", "t"))
    final = orjson.loads([line[6:] for line in r.text.splitlines() if line.startswith("data: ")][-1])
    assert final["result"]["requestState"].startswith("mcpe1.")
    assert final["result"]["inputRequests"] == {"a": ELICIT}


async def test_state_only_result_gets_sealed_state():
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "requestState": "handoff"}))
    r = await post(make_gateway(upstream), rpc("resources/read", 9, uri="x://1"), hdrs("resources/read", "x://1"))
    assert r.json()["result"]["requestState"].startswith("mcpe1.")


async def test_upstream_without_state_gets_none_back():
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT}}))
    app = make_gateway(upstream)
    r = await post(app, rpc("prompts/get", 1, {"elicitation": {}}, name="p"), hdrs("prompts/get", "p"))
    state = r.json()["result"]["requestState"]
    upstream.reply = result_reply({"resultType": "complete", "messages": []})
    retry = rpc("prompts/get", 2, {"elicitation": {}}, name="p", inputResponses={"a": {"action": "decline"}},
                requestState=state)  # fmt: skip
    r = await post(app, retry, hdrs("prompts/get", "p"))
    assert r.json()["result"]["resultType"] == "complete"
    forwarded = upstream.received[-1]["params"]
    assert "requestState" not in forwarded and forwarded["inputResponses"] == {"a": {"action": "decline"}}


async def test_mrtr_fields_on_other_methods_never_reach_the_upstream():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "tools": []}))
    doc = rpc("tools/list", 3, inputResponses={"a": {}}, requestState="whatever")
    r = await post(make_gateway(upstream), doc, hdrs("tools/list"))
    assert r.json()["result"]["tools"] == []
    assert "inputResponses" not in upstream.received[-1]["params"]
    assert "requestState" not in upstream.received[-1]["params"]


async def test_strict_route_rejects_responses_without_state():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "content": []}))
    app = make_gateway(upstream)
    for guard in app.routes.values():
        guard.s.strict = True
    r = await post(app, rpc("tools/call", 4, name="t", inputResponses={"a": {}}), hdrs("tools/call", "t"))
    assert r.status_code == 400 and r.json()["error"]["data"] == {"reason": "missing"}
    assert upstream.received == []


async def test_garbage_from_upstream_on_mrtr_method_is_502():
    upstream = FakeUpstream(lambda doc: (200, "application/json", b"<html>oops"))
    r = await post(make_gateway(upstream), rpc("tools/call", 11, name="t"), hdrs("tools/call", "t"))
    assert r.status_code == 502 and r.json()["id"] == 11 and r.json()["error"]["code"] == -32603


async def test_html_500_from_upstream_is_a_jsonrpc_502():
    """Through the real proxy adapter: an upstream that answers 500 text/html."""
    import uvicorn

    async def app500(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"text/html")]})
        await send({"type": "http.response.body", "body": b"<h1>boom</h1>"})

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app500, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_port(port)
        app = _proxy_gateway(f"http://127.0.0.1:{port}/mcp")
        r = await post(app, rpc("tools/list", 12), hdrs("tools/list"))
        assert r.status_code == 502 and r.json()["id"] == 12
        await app.aclose()
    finally:
        server.should_exit = True
        thread.join(5)


async def test_dead_upstream_is_502_with_the_id():
    port = _free_port()  # nothing listens there
    app = _proxy_gateway(f"http://127.0.0.1:{port}/mcp")
    r = await post(app, rpc("tools/call", 13, name="t"), hdrs("tools/call", "t"))
    assert r.status_code == 502
    assert r.json()["id"] == 13 and r.json()["error"]["data"]["reason"] == "upstream_unreachable"
    await app.aclose()


async def test_silent_upstream_is_504_not_a_hang():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        app = _proxy_gateway(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", read_timeout=0.5)
        r = await post(app, rpc("tools/call", 14, name="t"), hdrs("tools/call", "t"))
        assert r.status_code == 504 and r.json()["id"] == 14
        await app.aclose()
    finally:
        listener.close()


# ---------------------------------------------------------------- helpers


def _metrics(app: GatewayApp) -> str:
    from prometheus_client import generate_latest

    return generate_latest(app.metrics.registry).decode()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int) -> None:
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(port)


def _proxy_gateway(upstream: str, read_timeout: float = 5.0) -> GatewayApp:
    config = load_config(None, env={}, flags={"upstream": upstream, "anonymous": True})
    config.limits.read_timeout = read_timeout
    return GatewayApp(config, RING)


async def test_oversized_upstream_state_is_refused_at_seal_time():
    from gateway.edge.guard import MAX_UPSTREAM_STATE_CHARS

    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT},
                                          "requestState": "s" * (MAX_UPSTREAM_STATE_CHARS + 1)}))  # fmt: skip
    r = await post(make_gateway(upstream), rpc("tools/call", 15, {"elicitation": {}}, name="t"), hdrs("tools/call", "t"))
    assert r.json()["id"] == 15 and r.json()["error"]["data"] == {"violation": "state_too_large"}


async def test_largest_upstream_state_round_trips():
    from gateway.edge.guard import MAX_UPSTREAM_STATE_CHARS

    big = "s" * MAX_UPSTREAM_STATE_CHARS
    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT},
                                          "requestState": big}))  # fmt: skip
    app = make_gateway(upstream)
    r = await post(app, rpc("tools/call", 16, {"elicitation": {}}, name="t"), hdrs("tools/call", "t"))
    state = r.json()["result"]["requestState"]
    upstream.reply = result_reply({"resultType": "complete", "content": []})
    retry = rpc("tools/call", 17, {"elicitation": {}}, name="t", inputResponses={"a": {"action": "decline"}},
                requestState=state)  # fmt: skip
    r = await post(app, retry, hdrs("tools/call", "t"))
    assert r.json()["result"]["resultType"] == "complete"
    assert upstream.received[-1]["params"]["requestState"] == big


async def test_upstream_state_that_would_seal_too_large_is_refused():
    # Within the character limit, but control characters grow sixfold once JSON-escaped.
    from gateway.edge.guard import MAX_UPSTREAM_STATE_CHARS

    upstream = FakeUpstream(result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT},
                                          "requestState": "\x01" * MAX_UPSTREAM_STATE_CHARS}))  # fmt: skip
    r = await post(make_gateway(upstream), rpc("tools/call", 18, {"elicitation": {}}, name="t"), hdrs("tools/call", "t"))
    assert r.json()["error"]["data"] == {"violation": "state_too_large"}


async def test_mrtr_answer_over_the_inspection_limit_is_a_502():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "content": [{"type": "text", "text": "x" * 500}]}))
    app = make_gateway(upstream, limits={"max_inspect_bytes": 200})
    r = await post(app, rpc("tools/call", 19, name="t"), hdrs("tools/call", "t"))
    assert r.status_code == 502
    assert r.json() == {"jsonrpc": "2.0", "id": 19, "error": {
        "code": -32603, "message": "Upstream response too large to inspect",
        "data": {"reason": "upstream_response_too_large"}}}
