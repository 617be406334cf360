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

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config

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
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", ctype.encode())],
            }
        )
        await send({"type": "http.response.body", "body": payload})


def result_reply(result: dict[str, Any], sse: bool = False):
    def reply(doc):
        msg = orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result})
        if sse:
            note = orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {"progressToken": "t", "progress": 1},
                }
            )
            return (
                200,
                "text/event-stream",
                b"event: message\r\ndata: "
                + note
                + b"\r\n\r\nevent: message\r\ndata: "
                + msg
                + b"\r\n\r\n",
            )
        return 200, "application/json", msg

    return reply


def make_gateway(upstream, route: dict[str, Any] | None = None, **config_overrides) -> GatewayApp:
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    for k, v in (route or {}).items():
        setattr(config.routes[0], k, v)
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
    h = {
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        "Accept": "application/json, text/event-stream",
    }
    if name:
        h["Mcp-Name"] = name
    return h


async def post(app, doc, headers) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as client:
        return await client.post("/mcp", json=doc, headers=headers)


ELICIT = {
    "method": "elicitation/create",
    "params": {"message": "?", "requestedSchema": {"type": "object"}},
}


async def test_input_required_on_tools_list_never_reaches_the_client():
    upstream = FakeUpstream(
        result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT}})
    )
    app = make_gateway(upstream)
    r = await post(app, rpc("tools/list", 5, {"elicitation": {}}), hdrs("tools/list"))
    assert r.status_code == 200
    assert r.json()["id"] == 5 and r.json()["error"]["code"] == -32603
    assert "tools/list" in r.json()["error"]["message"]
    assert "result" not in r.json()
    assert (
        'mcp_edge_input_required_violations_total{kind="input_required_on_method",route="default"} 1.0'
        in (_metrics(app))
    )


async def test_input_required_on_other_method_over_sse_is_replaced():
    upstream = FakeUpstream(
        result_reply({"resultType": "input_required", "requestState": "x"}, sse=True)
    )
    r = await post(make_gateway(upstream), rpc("prompts/list", 6), hdrs("prompts/list"))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert "notifications/progress" in events[0]
    final = orjson.loads(events[-1])
    assert final["id"] == 6 and final["error"]["code"] == -32603


@pytest.mark.parametrize(
    "result,caps,status,code",
    [
        (
            {"resultType": "input_required", "inputRequests": {"a": ELICIT}},
            {"sampling": {}},
            400,
            -32021,
        ),
        (
            {
                "resultType": "input_required",
                "inputRequests": {"a": {"method": "ping", "params": {}}},
            },
            {"elicitation": {}},
            200,
            -32603,
        ),
        ({"resultType": "input_required"}, {"elicitation": {}}, 200, -32603),
        ({"resultType": "input_required", "inputRequests": {}}, {"elicitation": {}}, 200, -32603),
    ],
)
async def test_misbehaving_input_required_is_caught(result, caps, status, code):
    upstream = FakeUpstream(result_reply(result))
    r = await post(
        make_gateway(upstream),
        rpc("tools/call", 7, caps, name="t", arguments={}),
        hdrs("tools/call", "t"),
    )
    assert r.status_code == status
    assert r.json()["id"] == 7 and r.json()["error"]["code"] == code
    if code == -32021:
        assert r.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_sse_input_required_is_sealed_in_the_last_event():
    upstream = FakeUpstream(
        result_reply(
            {
                "resultType": "input_required",
                "inputRequests": {"a": ELICIT},
                "requestState": "plain",
            },
            sse=True,
        )
    )
    r = await post(
        make_gateway(upstream),
        rpc("tools/call", 8, {"elicitation": {}}, name="t"),
        hdrs("tools/call", "t"),
    )
    final = orjson.loads(
        [line[6:] for line in r.text.splitlines() if line.startswith("data: ")][-1]
    )
    assert final["result"]["requestState"].startswith("mcpe1.")
    assert final["result"]["inputRequests"] == {"a": ELICIT}


async def test_state_only_result_gets_sealed_state():
    upstream = FakeUpstream(
        result_reply({"resultType": "input_required", "requestState": "handoff"})
    )
    r = await post(
        make_gateway(upstream),
        rpc("resources/read", 9, uri="x://1"),
        hdrs("resources/read", "x://1"),
    )
    assert r.json()["result"]["requestState"].startswith("mcpe1.")


async def test_upstream_without_state_gets_none_back():
    upstream = FakeUpstream(
        result_reply({"resultType": "input_required", "inputRequests": {"a": ELICIT}})
    )
    app = make_gateway(upstream)
    r = await post(
        app, rpc("prompts/get", 1, {"elicitation": {}}, name="p"), hdrs("prompts/get", "p")
    )
    state = r.json()["result"]["requestState"]
    upstream.reply = result_reply({"resultType": "complete", "messages": []})
    retry = rpc(
        "prompts/get",
        2,
        {"elicitation": {}},
        name="p",
        inputResponses={"a": {"action": "decline"}},
        requestState=state,
    )
    r = await post(app, retry, hdrs("prompts/get", "p"))
    assert r.json()["result"]["resultType"] == "complete"
    forwarded = upstream.received[-1]["params"]
    assert "requestState" not in forwarded and forwarded["inputResponses"] == {
        "a": {"action": "decline"}
    }


async def test_mrtr_fields_on_other_methods_never_reach_the_upstream():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "tools": []}))
    doc = rpc("tools/list", 3, inputResponses={"a": {}}, requestState="whatever")
    r = await post(make_gateway(upstream), doc, hdrs("tools/list"))
    assert r.json()["result"]["tools"] == []
    assert "inputResponses" not in upstream.received[-1]["params"]
    assert "requestState" not in upstream.received[-1]["params"]


async def test_strict_route_rejects_responses_without_state():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "content": []}))
    app = make_gateway(upstream, route={"strict": True})
    r = await post(
        app, rpc("tools/call", 4, name="t", inputResponses={"a": {}}), hdrs("tools/call", "t")
    )
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
        await send(
            {
                "type": "http.response.start",
                "status": 500,
                "headers": [(b"content-type", b"text/html")],
            }
        )
        await send({"type": "http.response.body", "body": b"<h1>boom</h1>"})

    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(app500, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
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
    from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS

    upstream = FakeUpstream(
        result_reply(
            {
                "resultType": "input_required",
                "inputRequests": {"a": ELICIT},
                "requestState": "s" * (MAX_UPSTREAM_STATE_CHARS + 1),
            }
        )
    )
    r = await post(
        make_gateway(upstream),
        rpc("tools/call", 15, {"elicitation": {}}, name="t"),
        hdrs("tools/call", "t"),
    )
    assert r.json()["id"] == 15 and r.json()["error"]["data"] == {"violation": "state_too_large"}


async def test_largest_upstream_state_round_trips():
    from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS

    big = "s" * MAX_UPSTREAM_STATE_CHARS
    upstream = FakeUpstream(
        result_reply(
            {"resultType": "input_required", "inputRequests": {"a": ELICIT}, "requestState": big}
        )
    )
    app = make_gateway(upstream)
    r = await post(
        app, rpc("tools/call", 16, {"elicitation": {}}, name="t"), hdrs("tools/call", "t")
    )
    state = r.json()["result"]["requestState"]
    upstream.reply = result_reply({"resultType": "complete", "content": []})
    retry = rpc(
        "tools/call",
        17,
        {"elicitation": {}},
        name="t",
        inputResponses={"a": {"action": "decline"}},
        requestState=state,
    )
    r = await post(app, retry, hdrs("tools/call", "t"))
    assert r.json()["result"]["resultType"] == "complete"
    assert upstream.received[-1]["params"]["requestState"] == big


async def test_upstream_state_that_would_seal_too_large_is_refused():
    # Within the character limit, but control characters grow sixfold once JSON-escaped.
    from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS

    upstream = FakeUpstream(
        result_reply(
            {
                "resultType": "input_required",
                "inputRequests": {"a": ELICIT},
                "requestState": "\x01" * MAX_UPSTREAM_STATE_CHARS,
            }
        )
    )
    r = await post(
        make_gateway(upstream),
        rpc("tools/call", 18, {"elicitation": {}}, name="t"),
        hdrs("tools/call", "t"),
    )
    assert r.json()["error"]["data"] == {"violation": "state_too_large"}


async def test_mrtr_answer_over_the_inspection_limit_is_a_502():
    upstream = FakeUpstream(
        result_reply({"resultType": "complete", "content": [{"type": "text", "text": "x" * 500}]})
    )
    app = make_gateway(upstream, limits={"max_inspect_bytes": 200})
    r = await post(app, rpc("tools/call", 19, name="t"), hdrs("tools/call", "t"))
    assert r.status_code == 502
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": 19,
        "error": {
            "code": -32603,
            "message": "Upstream response too large to inspect",
            "data": {"reason": "upstream_response_too_large"},
        },
    }


# ---------------------------------------------------------------- hostile upstreams, end to end
#
# A real gateway process in front of tests/support/hostile_upstream.py (raw HTTP/1.1, one script
# per tool name). Every case must end with a JSON-RPC error carrying the request's id (or, where
# noted, the one valid response), within the configured time, with the gateway's peak RSS
# growing by a bounded amount while it handles the case.

FINAL_TIMEOUT = 3.0  # limits.final_response_timeout of the gateway under test
INSPECT_LIMIT = 16 * 1024 * 1024  # the default limits.max_inspect_bytes
MEMORY_BOUND = 4 * INSPECT_LIMIT + 32 * 1024 * 1024  # peak RSS growth allowed for one case

# case -> (method, HTTP status, transport, JSON-RPC code or "result", data key, data value, seconds)
HOSTILE_CASES: dict[str, tuple[str, int, str, Any, str | None, str | None, float]] = {
    "ir_not_final": ("tools/call", 200, "sse", -32603, "violation", "after_final", 10),
    "two_responses_sse": ("tools/call", 200, "sse", -32603, "violation", "after_final", 10),
    "two_responses_json": ("tools/call", 502, "json", -32603, "reason", "upstream_no_response", 10),
    "other_id_json": ("tools/call", 502, "json", -32603, "reason", "upstream_no_response", 10),
    "other_id_sse": ("tools/call", 200, "sse", -32603, "reason", "upstream_no_response", 10),
    "event_over_limit": (
        "tools/call",
        200,
        "sse",
        -32603,
        "reason",
        "upstream_response_too_large",
        20,
    ),
    "keepalive_forever": (
        "tools/call",
        200,
        "sse",
        -32603,
        "reason",
        "upstream_timeout",
        FINAL_TIMEOUT + 10,
    ),
    "progress_forever": (
        "tools/call",
        200,
        "sse",
        -32603,
        "reason",
        "upstream_timeout",
        FINAL_TIMEOUT + 10,
    ),
    "json_endless": (
        "tools/call",
        502,
        "json",
        -32603,
        "reason",
        "upstream_response_too_large",
        20,
    ),
    "json_trickle": (
        "tools/call",
        504,
        "json",
        -32603,
        "reason",
        "upstream_timeout",
        FINAL_TIMEOUT + 10,
    ),
    "gzip_json": ("tools/call", 502, "json", -32603, "reason", "upstream_encoding", 10),
    "gzip_sse": ("tools/call", 502, "json", -32603, "reason", "upstream_encoding", 10),
    "result_type_capitalised": ("tools/call", 200, "json", -32603, "violation", "result_type", 10),
    "result_type_dashed": ("tools/call", 200, "json", -32603, "violation", "result_type", 10),
    "result_type_missing": ("tools/call", 200, "json", -32603, "violation", "result_type", 10),
    "result_type_unknown": ("tools/call", 200, "json", -32603, "violation", "result_type", 10),
    "state_10mb": ("tools/call", 200, "json", -32603, "violation", "state_too_large", 20),
    "server_request": ("tools/call", 200, "sse", -32603, "violation", "server_request", 10),
    "html_200": ("tools/call", 502, "json", -32603, "reason", "upstream_content_type", 10),
    "text_plain_json": ("tools/call", 502, "json", -32603, "reason", "upstream_content_type", 10),
    "no_content_type": ("tools/call", 502, "json", -32603, "reason", "upstream_content_type", 10),
    "duplicate_result_type": ("tools/call", 200, "json", -32603, "violation", "duplicate_keys", 10),
    "null_id_error": ("tools/call", 200, "json", -32602, None, None, 10),
    "final_then_silence": ("tools/call", 200, "sse", "result", None, None, 10),
    "final_then_reset": ("tools/call", 200, "sse", "result", None, None, 10),
    "escaped_on_tools_list": (
        "tools/list",
        200,
        "json",
        -32603,
        "violation",
        "input_required_on_method",
        10,
    ),
    "ndjson_call": ("tools/call", 200, "sse", "result", None, None, 10),
    "ndjson_forever": (
        "tools/call",
        200,
        "sse",
        -32603,
        "reason",
        "upstream_timeout",
        FINAL_TIMEOUT + 10,
    ),
    "status_202": ("tools/call", 502, "json", -32603, "reason", "upstream_status", 10),
}
#: Cases whose upstream streams until the gateway closes the connection: it must close it.
ENDLESS = {
    "keepalive_forever",
    "progress_forever",
    "json_endless",
    "json_trickle",
    "server_request",
    "event_over_limit",
    "final_then_silence",
    "ndjson_forever",
}

_hostile_results: list[str] = []


@pytest.fixture(scope="module")
def hostile_gateway(module_tmp, state_key):
    from contextlib import ExitStack

    from tests.conftest import start_gateway
    from tests.support.hostile_upstream import HostileUpstream

    upstream = HostileUpstream().start()
    config = {
        "limits": {"final_response_timeout": FINAL_TIMEOUT, "read_timeout": 10},
        "routes": [{"name": "default", "path": "/mcp", "upstream": upstream.url, "era": "modern"}],
    }
    try:
        with ExitStack() as stack:
            gateway = start_gateway(stack, module_tmp, config=config, keys=state_key)
            yield gateway, upstream
    finally:
        upstream.stop()
        if _hostile_results:
            table = "\n".join(
                [
                    "| case | client got | seconds | peak RSS growth |",
                    "|---|---|--:|--:|",
                    *_hostile_results,
                ]
            )
            (module_tmp / "hostile-upstreams.md").write_text(table + "\n")
            print("\n" + table)


def _peak_rss(pid: int, reset: bool = False) -> int:
    """The process's peak RSS in bytes; ``reset`` starts a new peak from now (Linux >= 4.0)."""
    if reset:
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            pass
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


@pytest.mark.integration
@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", list(HOSTILE_CASES))
def test_hostile_upstream(case, hostile_gateway):
    import time

    gateway, upstream = hostile_gateway
    method, status, transport, code, key, value, limit = HOSTILE_CASES[case]
    request_id = f"req-{case}"
    if method == "tools/call":
        doc = rpc(method, caps={"elicitation": {}}, name=case)
        headers = hdrs(method, case)
    else:
        doc = rpc(method)
        headers = hdrs(method)
    doc["id"] = request_id
    pid = gateway.process.pid
    _peak_rss(pid, reset=True)
    before = _rss(pid)
    started = time.monotonic()
    with httpx.Client(timeout=limit + 10, trust_env=False) as client:
        r = client.post(gateway.url, json=doc, headers=headers)
    elapsed = time.monotonic() - started
    growth = max(0, _peak_rss(pid) - before)

    assert r.status_code == status, r.text[:500]
    if transport == "sse":
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        final = orjson.loads(events[-1])
        assert all(orjson.loads(e).get("id") in (None, request_id) for e in events)
        assert sum(1 for e in events if "id" in orjson.loads(e)) == 1, (
            events
        )  # one response, the last
    else:
        assert r.headers["content-type"].startswith("application/json")
        final = r.json()
    assert final["id"] == request_id
    if code == "result":
        assert final["result"]["resultType"] == "complete"
        got = "the upstream's result"
    else:
        assert final["error"]["code"] == code, final
        if key is not None:
            assert final["error"]["data"][key] == value, final
        got = f"`{code}` {key or ''}{': ' + value if value else ''}".strip()
    assert elapsed < limit, f"{case} took {elapsed:.1f} s"
    assert growth < MEMORY_BOUND, f"{case}: peak RSS grew by {growth / 2**20:.1f} MiB"
    if case in ENDLESS:
        deadline = time.monotonic() + 10
        while case not in upstream.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert case in upstream.closed, f"{case}: the gateway did not close the upstream stream"
    _hostile_results.append(
        f"| {case} | HTTP {status} {transport}, {got} | {elapsed:.2f} | {growth / 2**20:.1f} MiB |"
    )


@pytest.mark.integration
@pytest.mark.timeout(60)
def test_a_newline_delimited_listen_stream_flows_through_as_sse(hostile_gateway):
    """subscriptions/listen answered with newline-delimited JSON that never ends: each message
    reaches the client as an SSE event (the stream never ends: a buffered one would deliver
    nothing), and closing the client's stream closes the upstream's."""
    import time

    gateway, upstream = hostile_gateway
    doc = rpc("subscriptions/listen", notifications={"toolsListChanged": True})
    doc["id"] = "listen-ndjson"
    events: list[dict] = []
    with (
        httpx.Client(timeout=10, trust_env=False) as client,
        client.stream("POST", gateway.url, json=doc, headers=hdrs("subscriptions/listen")) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(orjson.loads(line[6:]))
            if len(events) == 3:
                break
    assert events[0]["method"] == "notifications/subscriptions/acknowledged", events
    assert [e["method"] for e in events[1:]] == ["notifications/tools/list_changed"] * 2
    deadline = time.monotonic() + 30
    while "subscriptions/listen" not in upstream.closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "subscriptions/listen" in upstream.closed, (
        "the gateway did not close the upstream stream"
    )


async def test_operation_metric_labels_stay_bounded():
    """gen_ai_tool_name: names the upstream answered with a result that is not isError, up to
    the cap; error_type from what the gateway read (tool_error, JSON-RPC codes), never from
    bodies it does not parse."""
    from prometheus_client.parser import text_string_to_metric_families

    def reply(doc):
        name = doc["params"].get("name")
        if doc["method"] == "tools/list":
            return (
                200,
                "application/json",
                orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": doc["id"],
                        "error": {"code": -32603, "message": "not parsed here"},
                    }
                ),
            )
        if name.startswith("junk"):
            return (
                200,
                "application/json",
                orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": doc["id"],
                        "error": {"code": -32602, "message": "Unknown tool"},
                    }
                ),
            )
        if name == "weird_code":
            return (
                200,
                "application/json",
                orjson.dumps(
                    {"jsonrpc": "2.0", "id": doc["id"], "error": {"code": 12345, "message": "?"}}
                ),
            )
        result = {"resultType": "complete", "content": [], "isError": name == "b"}
        return (
            200,
            "application/json",
            orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}),
        )

    app = make_gateway(FakeUpstream(reply), observability={"max_tool_names": 2})
    for i, name in enumerate(["junk1", "a", "b", "c", "junk2", "a", "weird_code"]):
        await post(app, rpc("tools/call", i, name=name), hdrs("tools/call", name))
    await post(app, rpc("tools/list", 99), hdrs("tools/list"))
    await post(
        app, rpc("tools/list", 100), {**hdrs("tools/list"), "MCP-Protocol-Version": "2999-01-01"}
    )
    counts = {
        (
            s.labels["mcp_method_name"],
            s.labels["gen_ai_tool_name"],
            s.labels["error_type"],
            s.labels["mcp_protocol_version"],
        ): s.value
        for family in text_string_to_metric_families(_metrics(app))
        if family.name == "mcp_server_operation_duration_seconds"
        for s in family.samples
        if s.name.endswith("_count")
    }
    assert counts == {
        (
            "tools/call",
            "_OTHER",
            "-32602",
            MODERN,
        ): 2.0,  # unknown tools never get a label of their own
        ("tools/call", "a", "", MODERN): 2.0,
        ("tools/call", "_OTHER", "tool_error", MODERN): 1.0,  # "b": isError proves nothing
        ("tools/call", "c", "", MODERN): 1.0,  # the second name of the cap of two
        ("tools/call", "_OTHER", "_OTHER", MODERN): 1.0,  # a code outside the spec's
        ("tools/list", "", "", MODERN): 1.0,  # an error inside an unparsed 200 is not seen
        (
            "tools/list",
            "",
            "-32020",
            "_OTHER",
        ): 1.0,  # refused at the edge: header and body disagree
    }
