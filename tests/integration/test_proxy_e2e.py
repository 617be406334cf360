"""The gateway in front of real ``mcp`` 2.x servers, driven by the real ``mcp`` 2.x client."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.types import ElicitResult

from tests.conftest import Running, start_gateway, start_upstream

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    """One streaming fixture upstream and one gateway in front of it, for the module."""
    events = module_tmp / "events.txt"
    events.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "streaming.py", module_tmp, "--events", str(events))
        gateway = start_gateway(stack, module_tmp, upstream=upstream.url, keys=state_key)
        yield {"upstream": upstream, "gateway": gateway, "events": events}


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        out["Mcp-Name"] = name
    out.update(extra)
    return out


def call(request_id, name, arguments=None, caps=None, **params):
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments or {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": caps
                if caps is not None
                else {"elicitation": {}},
            },
            **params,
        },
    }


async def test_sdk_client_tools_and_mrtr_round_trip(env):
    gateway: Running = env["gateway"]
    asked = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"color": "teal"})

    async with Client(gateway.url, mode=MODERN, elicitation_callback=on_elicit) as client:
        tools = await client.list_tools()
        assert {"slow_progress", "sleepy", "big", "ask_color"} <= {t.name for t in tools.tools}
        result = await client.call_tool("big", {"size": 100_000})
        assert result.content[0].text == "x" * 100_000
        result = await client.call_tool("ask_color", {})
        assert asked == ["Favourite colour?"]
        # The upstream got its own state back, untouched, behind the gateway's seal.
        assert result.content[0].text == "colour=teal state=asked-color"


async def test_round_one_state_is_sealed_by_the_gateway(env):
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(
            env["gateway"].url,
            headers=headers("tools/call", "ask_color"),
            json=call(1, "ask_color"),
        )
        body = r.json()
        assert r.status_code == 200 and body["id"] == 1
        state = body["result"]["requestState"]
        assert state.startswith("mcpe1.") and "asked-color" not in state
        assert body["result"]["inputRequests"]["color"]["method"] == "elicitation/create"
        # Retry with the sealed state completes; the upstream saw its own plaintext state.
        retry = call(
            2,
            "ask_color",
            inputResponses={"color": {"action": "accept", "content": {"color": "red"}}},
            requestState=state,
        )
        r2 = await http.post(
            env["gateway"].url, headers=headers("tools/call", "ask_color"), json=retry
        )
        assert r2.json()["result"]["content"][0]["text"] == "colour=red state=asked-color"
        # The upstream's own state is refused by the gateway: only the gateway's seal opens.
        direct = await http.post(
            env["upstream"].url,
            headers=headers("tools/call", "ask_color"),
            json=call(3, "ask_color"),
        )
        forged = call(
            4,
            "ask_color",
            inputResponses={"color": {"action": "accept", "content": {"color": "x"}}},
            requestState=direct.json()["result"]["requestState"],
        )
        r3 = await http.post(
            env["gateway"].url, headers=headers("tools/call", "ask_color"), json=forged
        )
        assert r3.status_code == 400
        assert r3.json() == {
            "jsonrpc": "2.0",
            "id": 4,
            "error": {
                "code": -32602,
                "message": "Invalid or expired requestState",
                "data": {"reason": "malformed"},
            },
        }


async def test_progress_arrives_before_the_result(env):
    """SSE is streamed, not buffered: each progress event reaches the client while the tool
    is still running (the tool waits 0.4 s between steps)."""
    arrivals: list[tuple[float, str]] = []
    async with httpx.AsyncClient(timeout=10) as http:
        body = call(1, "slow_progress", {"steps": 3, "delay": 0.4})
        body["params"]["_meta"]["progressToken"] = "tok"
        start = time.monotonic()
        async with http.stream(
            "POST", env["gateway"].url, headers=headers("tools/call", "slow_progress"), json=body
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers.get("x-accel-buffering") == "no"
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    kind = "progress" if "notifications/progress" in line else "result"
                    arrivals.append((time.monotonic() - start, kind))
    kinds = [k for _, k in arrivals]
    assert kinds == ["progress", "progress", "progress", "result"]
    first_progress, result_at = arrivals[0][0], arrivals[-1][0]
    assert result_at - first_progress >= 1.0, arrivals  # 3 x 0.4 s apart, not delivered at once


async def test_sdk_client_progress_callback(env):
    seen = []

    async def on_progress(progress, total, message):
        seen.append(progress)

    async with Client(env["gateway"].url, mode=MODERN) as client:
        result = await client.call_tool(
            "slow_progress", {"steps": 3, "delay": 0.01}, progress_callback=on_progress
        )
    assert result.content[0].text == "done after 3 steps"
    assert seen == [1, 2, 3]


async def test_client_disconnect_cancels_the_upstream_handler(env):
    events: Path = env["events"]
    before = events.read_text().count("cancelled")
    async with httpx.AsyncClient(timeout=10) as http:
        body = call(1, "sleepy", {"seconds": 30})
        body["params"]["_meta"]["progressToken"] = "tok"
        async with http.stream(
            "POST", env["gateway"].url, headers=headers("tools/call", "sleepy"), json=body
        ) as r:
            async for line in r.aiter_lines():
                if "notifications/progress" in line:
                    break  # the tool is running; now walk away
    with anyio.fail_after(10):
        while events.read_text().count("cancelled") == before:
            await anyio.sleep(0.05)
    assert "finished" not in events.read_text().splitlines()[-1]


async def test_legacy_client_passes_through(env):
    """A 2025-era client (initialize, sessions) works unchanged through the gateway."""
    async with Client(env["gateway"].url, mode="legacy") as client:
        assert client.protocol_version.startswith("2025")
        result = await client.call_tool("slow_progress", {"steps": 1, "delay": 0})
        assert result.content[0].text == "done after 1 steps"


async def test_headers_and_status_preserved(env):
    async with httpx.AsyncClient(timeout=10) as http:
        # An unknown method: the upstream's 404 and error pass through with the id.
        body = {
            "jsonrpc": "2.0",
            "id": "abc",
            "method": "no/such",
            "params": {"_meta": call(0, "x")["params"]["_meta"]},
        }
        r = await http.post(env["gateway"].url, headers=headers("no/such"), json=body)
        assert (
            r.status_code == 404 and r.json()["id"] == "abc" and r.json()["error"]["code"] == -32601
        )
        # 2026-07-28 has no client notifications over HTTP (closing the stream cancels): refused
        # with HTTP 400 and an error without an id, as the transport says for one not accepted.
        r = await http.post(
            env["gateway"].url,
            headers=headers("notifications/cancelled"),
            json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}},
        )
        assert (
            r.status_code == 400 and r.json()["id"] is None and r.json()["error"]["code"] == -32600
        )


@pytest.mark.parametrize(
    "mutate,status,code",
    [
        (lambda b, h: (b"{not json", h), 400, -32700),
        (lambda b, h: (b"[" + b + b"]", h), 400, -32600),
        (lambda b, h: (b, {**h, "Mcp-Name": "other"}), 400, -32020),
        (
            lambda b, h: (
                b.replace(b"2026-07-28", b"2099-01-01"),
                {**h, "MCP-Protocol-Version": "2099-01-01"},
            ),
            400,
            -32022,
        ),
        (lambda b, h: (b.replace(b'"_meta"', b'"_other"'), h), 400, -32602),
        (lambda b, h: (b[:-1] + b',"pad":"' + b"x" * 5_000_000 + b'"}', h), 413, -32600),
    ],
)
async def test_edge_rejections(env, mutate, status, code):
    import orjson

    body, hdrs = mutate(orjson.dumps(call(9, "big", {"size": 1})), headers("tools/call", "big"))
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(env["gateway"].url, headers=hdrs, content=body)
    assert r.status_code == status
    doc = r.json()
    assert doc["error"]["code"] == code
    if code not in (-32700,) and status != 413 and not body.startswith(b"["):
        assert doc["id"] == 9


async def test_get_and_delete_are_405_on_the_modern_wire(env):
    async with httpx.AsyncClient(timeout=10) as http:
        for method in ("GET", "DELETE"):
            r = await http.request(
                method, env["gateway"].url, headers={"MCP-Protocol-Version": MODERN}
            )
            assert r.status_code == 405 and r.headers["allow"] == "POST"


async def test_origin_and_host_checks(env):
    async with httpx.AsyncClient(timeout=10) as http:
        h = headers("tools/list", Origin="http://evil.example")
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {"_meta": call(0, "x")["params"]["_meta"]},
        }
        r = await http.post(env["gateway"].url, headers=h, json=body)
        assert r.status_code == 403
        r = await http.post(
            env["gateway"].url,
            headers=headers("tools/list", Origin="http://localhost:3000"),
            json=body,
        )
        assert r.status_code == 200
        r = await http.post(
            env["gateway"].url, headers=headers("tools/list", Host="evil.example"), json=body
        )
        assert r.status_code == 421


async def test_health_and_readiness(env):
    async with httpx.AsyncClient(timeout=10) as http:
        assert (await http.get(env["gateway"].base + "/healthz")).json()["status"] == "ok"
        with anyio.fail_after(10):
            while (await http.get(env["gateway"].base + "/readyz")).status_code != 200:
                await anyio.sleep(0.1)
        metrics = (await http.get(env["gateway"].base + "/metrics")).text
        assert "mcp_edge_requests_total" in metrics


async def test_what_crosses_to_the_upstream(env):
    """Host rewritten, Origin/Authorization/Cookie not forwarded, trace context and Mcp-* unchanged."""
    hdrs = headers(
        "tools/call",
        "echo_headers",
        Origin="http://localhost:3000",
        Authorization="Bearer secret-token",
        Cookie="session=1",
        traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tracestate="vendor=1",
        **{"Mcp-Param-Region": "eu-west"},
    )
    async with httpx.AsyncClient(timeout=10) as http:
        r = await http.post(env["gateway"].url, headers=hdrs, json=call(1, "echo_headers"))
    seen = r.json()["result"]["structuredContent"]
    assert seen["host"] == f"127.0.0.1:{env['upstream'].port}"
    assert seen["origin"] is None and seen["authorization"] is None and seen["cookie"] is None
    assert seen["traceparent"] == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert seen["tracestate"] == "vendor=1"
    assert (seen["mcp-protocol-version"], seen["mcp-method"], seen["mcp-name"]) == (
        MODERN,
        "tools/call",
        "echo_headers",
    )
    assert seen["mcp-param-region"] == "eu-west"
    assert seen["accept-encoding"] == "identity"
    assert r.headers["x-request-id"]


async def test_metrics_count_rounds_rejections_and_violations(env):
    """One round, its retry and a tampered retry: each counter moves by exactly that much (the
    gateway is shared with the module's other tests, so what counts is the difference)."""
    async with httpx.AsyncClient(timeout=10) as http:
        before = (await http.get(env["gateway"].base + "/metrics")).text
        r = await http.post(
            env["gateway"].url,
            headers=headers("tools/call", "ask_color"),
            json=call(1, "ask_color"),
        )
        state = r.json()["result"]["requestState"]
        answer = {"color": {"action": "accept", "content": {"color": "red"}}}
        await http.post(
            env["gateway"].url,
            headers=headers("tools/call", "ask_color"),
            json=call(2, "ask_color", inputResponses=answer, requestState=state),
        )
        await http.post(
            env["gateway"].url,
            headers=headers("tools/call", "ask_color"),
            json=call(3, "ask_color", inputResponses=answer, requestState=state + "x"),
        )
        metrics = (await http.get(env["gateway"].base + "/metrics")).text

    def value(line_start: str, text: str | None = None) -> float:
        for line in (metrics if text is None else text).splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def grew(line_start: str) -> float:
        return value(line_start) - value(line_start, before)

    assert grew('mcp_edge_mrtr_rounds_issued_total{route="default"}') == 1
    assert grew('mcp_edge_mrtr_retries_accepted_total{route="default"}') == 1
    assert grew('mcp_edge_mrtr_flows_completed_total{route="default"}') == 1
    # (a character added to the state: malformed or failing integrity, by where it falls)
    assert (
        grew('mcp_edge_state_rejections_total{reason="malformed",route="default"}')
        + grew('mcp_edge_state_rejections_total{reason="integrity",route="default"}')
        == 1
    )
    assert grew('mcp_edge_requests_total{method="tools/call",route="default",status="400"}') == 1
    assert (
        "mcp_edge_gateway_overhead_seconds_bucket" in metrics
        and "mcp_edge_upstream_seconds_bucket" in metrics
    )

    # The OpenTelemetry-named histogram: the round and the retry answered, the tampered retry refused.
    from prometheus_client.parser import text_string_to_metric_families

    def counts(text: str) -> dict[tuple[str, ...], float]:
        return {
            (
                s.labels["mcp_method_name"],
                s.labels["gen_ai_tool_name"],
                s.labels["error_type"],
                s.labels["mcp_protocol_version"],
            ): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "mcp_server_operation_duration_seconds"
            for s in family.samples
            if s.name.endswith("_count") and s.labels["route"] == "default"
        }

    now, then = counts(metrics), counts(before)
    for key, added in (
        (("tools/call", "ask_color", "", MODERN), 2),
        (("tools/call", "ask_color", "-32602", MODERN), 1),
    ):
        assert now[key] - then.get(key, 0) == added, (key, now, then)
