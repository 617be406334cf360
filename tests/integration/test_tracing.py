"""Optional OpenTelemetry tracing: a span per request and per upstream call, W3C trace context
continued from the client and propagated upstream (HTTP headers and ``params._meta``). Spans go to
an in-memory exporter; the upstream is a small ASGI app served by uvicorn that records what it
received."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mcp_edge.observability.config import TracingSection
from mcp_edge.observability.tracing import build_tracing
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config
from tests.integration.test_misbehaving_upstream import RING, _free_port, _wait_port, hdrs, rpc

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


class RecordingUpstream:
    def __init__(self) -> None:
        self.seen: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        doc = orjson.loads(body)
        self.seen.append(({k.decode(): v.decode() for k, v in scope["headers"]}, doc))
        payload = orjson.dumps(
            {"jsonrpc": "2.0", "id": doc["id"], "result": {"resultType": "complete", "content": []}}
        )
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture
def traced():
    upstream = RecordingUpstream()
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(upstream, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        _wait_port(port)
        config = load_config(
            None, env={}, flags={"upstream": f"http://127.0.0.1:{port}/mcp", "anonymous": True}
        )
        config.routes[0].era = "modern"
        app = GatewayApp(config, RING, tracer_provider=provider)
        yield app, upstream, exporter
    finally:
        server.should_exit = True
        thread.join(5)


async def _post(app, doc, headers):
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as client:
        return await client.post("/mcp", json=doc, headers=headers)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


@pytest.mark.timeout(30)
async def test_request_and_upstream_spans_continue_the_clients_trace(traced):
    app, upstream, exporter = traced
    r = await _post(
        app,
        rpc("tools/call", 5, name="lookup"),
        {**hdrs("tools/call", "lookup"), "traceparent": TRACEPARENT, "tracestate": "vendor=1"},
    )
    assert r.json()["result"]["resultType"] == "complete"
    await app.aclose()
    spans = {s.kind: s for s in exporter.get_finished_spans()}
    server, client = spans[SpanKind.SERVER], spans[SpanKind.CLIENT]

    assert server.name == "tools/call lookup" and client.name == "tools/call lookup"
    assert _hex(server.context.trace_id, 32) == TRACE_ID
    assert _hex(server.parent.span_id, 16) == CLIENT_SPAN and server.parent.is_remote
    assert client.parent.span_id == server.context.span_id
    assert client.context.trace_id == server.context.trace_id
    assert server.attributes["mcp.method.name"] == "tools/call"
    assert server.attributes["gen_ai.tool.name"] == "lookup"
    assert server.attributes["gen_ai.operation.name"] == "execute_tool"
    assert server.attributes["jsonrpc.request.id"] == "5"
    assert server.attributes["mcp.protocol.version"] == "2026-07-28"
    assert server.attributes["http.response.status_code"] == 200
    assert "error.type" not in server.attributes and server.status.status_code == StatusCode.UNSET
    assert client.attributes["server.address"] == "127.0.0.1"
    assert client.attributes["http.response.status_code"] == 200

    headers, doc = upstream.seen[-1]
    propagated = f"00-{TRACE_ID}-{_hex(client.context.span_id, 16)}-01"
    assert headers["traceparent"] == propagated  # the gateway's upstream call is the parent now
    assert headers["tracestate"] == "vendor=1"
    assert doc["params"]["_meta"]["traceparent"] == propagated  # where MCP servers read it
    assert doc["params"]["_meta"]["tracestate"] == "vendor=1"


@pytest.mark.timeout(30)
async def test_trace_context_in_meta_wins_and_the_http_one_is_linked(traced):
    app, upstream, exporter = traced
    meta_parent = "1111111111111111"
    doc = rpc("tools/list", 6)
    doc["params"]["_meta"]["traceparent"] = f"00-{TRACE_ID}-{meta_parent}-01"
    other = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-2222222222222222-01"
    await _post(app, doc, {**hdrs("tools/list"), "traceparent": other})
    await app.aclose()
    server = next(s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER)
    assert server.name == "tools/list"
    assert _hex(server.parent.span_id, 16) == meta_parent
    assert [_hex(link.context.span_id, 16) for link in server.links] == ["2222222222222222"]
    assert upstream.seen[-1][1]["params"]["_meta"]["traceparent"].startswith(f"00-{TRACE_ID}-")


@pytest.mark.timeout(30)
async def test_a_request_refused_at_the_edge_is_an_error_span_without_an_upstream_call(traced):
    app, upstream, exporter = traced
    doc = rpc("tools/call", 7, name="lookup", inputResponses={"a": {}}, requestState="forged")
    r = await _post(app, doc, {**hdrs("tools/call", "lookup"), "traceparent": TRACEPARENT})
    assert r.status_code == 400
    await app.aclose()
    spans = exporter.get_finished_spans()
    assert [s.kind for s in spans] == [SpanKind.SERVER] and upstream.seen == []
    assert spans[0].attributes["error.type"] == "-32602"
    assert spans[0].attributes["rpc.response.status_code"] == "-32602"
    assert spans[0].status.status_code == StatusCode.ERROR


@pytest.mark.timeout(30)
async def test_a_body_that_is_not_json_still_gets_a_span(traced):
    app, _, exporter = traced
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8080") as client:
        r = await client.post(
            "/mcp", content=b"{nope", headers={**hdrs("tools/list"), "traceparent": TRACEPARENT}
        )
    assert r.status_code == 400
    await app.aclose()
    (span,) = exporter.get_finished_spans()
    assert (
        span.attributes["error.type"] == "-32700" and _hex(span.parent.span_id, 16) == CLIENT_SPAN
    )


def test_tracing_is_off_by_default_and_builds_an_otlp_exporter_when_on():
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    assert config.observability.tracing.enabled is False
    assert GatewayApp(config, RING).tracing is None
    tracing = build_tracing(
        TracingSection(enabled=True, endpoint="http://127.0.0.1:9/v1/traces", sample_ratio=0.5),
        gateway_id="edge-1",
    )
    assert tracing is not None
    resource = tracing.provider.resource.attributes
    assert resource["service.name"] == "mcp-edge" and resource["mcp_edge.gateway.id"] == "edge-1"
    assert "TraceIdRatioBased" in tracing.provider.sampler.get_description()
    tracing.shutdown()


class Collector:
    """An OTLP/HTTP traces receiver: keeps the spans of each export request it gets."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}.get(
                "service.name"
            )
            for scope_spans in resource_spans.scope_spans:
                self.spans.extend((service, span) for span in scope_spans.spans)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send({"type": "http.response.body", "body": b""})


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_a_gateway_process_exports_spans_over_otlp(module_tmp, state_key):
    """Tracing on in the config, a real SDK upstream, spans arriving at an OTLP/HTTP endpoint."""
    import time
    from contextlib import ExitStack

    from tests.conftest import start_gateway, start_upstream

    collector = Collector()
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(collector, host="127.0.0.1", port=port, log_level="error", lifespan="off")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_port(port)
        with ExitStack() as stack:
            upstream = start_upstream(
                stack, "streaming.py", module_tmp, "--events", str(module_tmp / "ev.txt")
            )
            config = {
                "observability": {
                    "tracing": {
                        "enabled": True,
                        "endpoint": f"http://127.0.0.1:{port}/v1/traces",
                        "service_name": "edge-under-test",
                    }
                },
                "routes": [
                    {"name": "default", "path": "/mcp", "upstream": upstream.url, "era": "modern"}
                ],
            }
            gateway = start_gateway(
                stack,
                module_tmp,
                config=config,
                keys=state_key,
                env={"OTEL_BSP_SCHEDULE_DELAY": "100"},
            )
            with httpx.Client(timeout=10, trust_env=False) as client:
                r = client.post(
                    gateway.url,
                    json=rpc("tools/list", 1),
                    headers={**hdrs("tools/list"), "traceparent": TRACEPARENT},
                )
            assert r.status_code == 200 and "tools" in r.json()["result"]
            deadline = time.monotonic() + 20
            while len(collector.spans) < 2 and time.monotonic() < deadline:
                time.sleep(0.1)
    finally:
        server.should_exit = True
        thread.join(5)
    names = sorted((service, span.name, span.kind) for service, span in collector.spans)
    assert ("edge-under-test", "tools/list", 2) in names  # SPAN_KIND_SERVER
    assert ("edge-under-test", "tools/list", 3) in names  # SPAN_KIND_CLIENT
    assert all(span.trace_id.hex() == TRACE_ID for _, span in collector.spans)
