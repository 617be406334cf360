"""Optional OpenTelemetry tracing (``observability.tracing``; off by default, and then nothing here
runs on a request).

Following the OpenTelemetry semantic conventions for MCP:

- a ``SERVER`` span per request the gateway answers, named ``{mcp.method.name} {target}`` (the
  tool or prompt name), from the request's arrival until its response is complete (opened when
  first needed: the parent of an upstream call's span, or at the end), with
  ``error.type`` / ``rpc.response.status_code`` as the metrics have them, and status ERROR then;
- a ``CLIENT`` span per upstream call of the HTTP proxy, a child of the request's span.

Trace context is W3C ``traceparent`` / ``tracestate``. It is continued from the client's
``params._meta`` (where MCP carries it, SEP-414), else from the HTTP headers (when both are
there and differ, the HTTP one is kept as a span link); it is propagated upstream in both places:
the HTTP headers and, for 2026-07-28 requests, ``params._meta`` (the request body is re-encoded
for that, only when tracing is on).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import orjson

from mcp_edge.core.errors import ERROR_CODE
from mcp_edge.observability.config import TracingSection
from mcp_edge.observability.logs import event
from mcp_edge.version import __version__

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Traced(Protocol):
    """What tracing reads of a request's context (mcp_edge.edge.context.RequestContext)."""

    span: Any
    arrived: float
    parsed: bool
    message: Any
    modern: bool
    rpc_method: str | None
    request_id: Any
    retry_round: int


TRACE_KEYS = ("traceparent", "tracestate")
_TRACE_HEADERS = frozenset(k.encode() for k in TRACE_KEYS)
_MAX_NAME = 128


def _str(value: Any) -> str | None:
    return value[:_MAX_NAME] if isinstance(value, str) else None


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    for k, v in headers:
        if k == name:
            return v.decode("latin-1")
    return None


class Tracing:
    """Spans for one gateway, from a ``TracerProvider`` it owns (shut down with the app)."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.provider = provider
        self._trace = trace
        self._tracer = provider.get_tracer("mcp-edge", __version__)
        self._propagator = TraceContextTextMapPropagator()

    # ------------------------------------------------------------------ context

    def _extract(self, carrier: dict[str, str]) -> Any:
        """A context holding the carrier's remote span, or None if it carries no valid one."""
        if "traceparent" not in carrier:
            return None
        context = self._propagator.extract(carrier)
        if not self._trace.get_current_span(context).get_span_context().is_valid:
            return None
        return context

    def _parents(
        self, scope: MutableMapping[str, Any], params: dict[str, Any] | None
    ) -> tuple[Any, list[Any]]:
        headers = scope.get("headers") or []
        http = self._extract(
            {k: v for k in TRACE_KEYS if (v := _header(headers, k.encode())) is not None}
        )
        meta = params.get("_meta") if isinstance(params, dict) else None
        mcp = None
        if isinstance(meta, dict):
            mcp = self._extract({k: meta[k] for k in TRACE_KEYS if isinstance(meta.get(k), str)})
        if mcp is None:
            return http, []
        links = []
        if http is not None:
            linked = self._trace.get_current_span(http).get_span_context()
            if linked != self._trace.get_current_span(mcp).get_span_context():
                links.append(self._trace.Link(linked))
        return mcp, links

    # ------------------------------------------------------------------ server spans

    def request_span(self, scope: MutableMapping[str, Any], ctx: Traced) -> Any:
        """The request's span, opened now if it is not yet: named after the parsed message when the
        body was read (its parent may be in ``_meta``), a bare ``mcp`` span otherwise."""
        if ctx.span is None:
            if ctx.parsed:
                self._start_request(scope, ctx, ctx.message)
            else:
                parent, _ = self._parents(scope, None)
                ctx.span = self._tracer.start_span(
                    "mcp",
                    context=parent,
                    kind=self._trace.SpanKind.SERVER,
                    attributes=self._transport(scope),
                    start_time=_start_ns(ctx),
                )
        return ctx.span

    def _start_request(self, scope: MutableMapping[str, Any], ctx: Traced, doc: Any) -> None:
        message = doc if isinstance(doc, dict) else {}
        method = _str(message.get("method")) or "-"
        params = message.get("params")
        name, attributes = _describe(method, params if isinstance(params, dict) else {})
        attributes.update(self._transport(scope))
        request_id = message.get("id")
        if request_id is not None and not isinstance(request_id, (dict, list)):
            attributes["jsonrpc.request.id"] = str(request_id)[:_MAX_NAME]
        parent, links = self._parents(scope, params)
        ctx.span = self._tracer.start_span(
            name,
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            attributes=attributes,
            links=links,
            start_time=_start_ns(ctx),
        )

    def end_request(
        self,
        scope: MutableMapping[str, Any],
        ctx: Traced,
        *,
        status: int,
        error_type: str,
        outcome: Any = None,
    ) -> None:
        span = self.request_span(scope, ctx)
        ctx.span = None
        if status:
            span.set_attribute("http.response.status_code", status)
        if ctx.retry_round:
            span.set_attribute("mcp_edge.mrtr.round", ctx.retry_round)
        if outcome is not None and getattr(outcome, "input_required", False):
            span.set_attribute("mcp_edge.mrtr.input_required", True)
        _set_error(self._trace, span, error_type)
        span.end()

    @staticmethod
    def _transport(scope: MutableMapping[str, Any]) -> dict[str, Any]:
        attributes: dict[str, Any] = {"network.transport": "tcp", "network.protocol.name": "http"}
        if scope.get("http_version"):
            attributes["network.protocol.version"] = scope["http_version"]
        client = scope.get("client")
        if client:
            attributes["client.address"] = str(client[0])
            if len(client) > 1 and isinstance(client[1], int):
                attributes["client.port"] = client[1]
        version = _header(scope.get("headers") or [], b"mcp-protocol-version")
        if version:
            attributes["mcp.protocol.version"] = version[:40]
        return attributes

    # ------------------------------------------------------------------ upstream calls

    def start_upstream(
        self,
        scope: MutableMapping[str, Any],
        ctx: Traced,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
    ) -> tuple[Any, list[tuple[bytes, bytes]], bytes]:
        """A CLIENT span for one upstream call; returns it with the headers and body carrying its
        trace context."""
        doc: Any = None
        if ctx.modern and body:
            # The message the edge parsed, as the flow left it (the body is its encoding): copied
            # where its trace context is set, the rest shared.
            doc = ctx.message
            if isinstance(doc, dict) and isinstance(doc.get("params"), dict):
                doc = {**doc, "params": {**doc["params"]}}
                if isinstance(doc["params"].get("_meta"), dict):
                    doc["params"]["_meta"] = {**doc["params"]["_meta"]}
        method = ctx.rpc_method or "-"
        params = doc.get("params") if isinstance(doc, dict) else None
        name, attributes = _describe(method, params if isinstance(params, dict) else {})
        parts = urlsplit(url)
        attributes.update(
            {
                "network.transport": "tcp",
                "network.protocol.name": "http",
                "server.address": parts.hostname or "",
                "url.full": f"{parts.scheme}://{parts.netloc}{parts.path}",
            }
        )
        if parts.port:
            attributes["server.port"] = parts.port
        if ctx.request_id is not None and not isinstance(ctx.request_id, (dict, list)):
            attributes["jsonrpc.request.id"] = str(ctx.request_id)[:_MAX_NAME]
        # The request's span is its parent (a 2025-era GET or DELETE, which has no body, has none).
        request = self.request_span(scope, ctx) if ctx.parsed else ctx.span
        parent = self._trace.set_span_in_context(request) if request is not None else None
        span = self._tracer.start_span(
            name, context=parent, kind=self._trace.SpanKind.CLIENT, attributes=attributes
        )
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._trace.set_span_in_context(span))
        headers = [(k, v) for k, v in headers if k not in _TRACE_HEADERS]
        headers.extend(
            (k.encode(), carrier[k].encode("latin-1")) for k in TRACE_KEYS if k in carrier
        )
        if isinstance(doc, dict) and "params" in doc and isinstance(doc["params"], dict):
            meta = doc["params"].get("_meta")
            if isinstance(meta, dict):
                for key in TRACE_KEYS:
                    if key in carrier:
                        meta[key] = carrier[key]
                    else:
                        meta.pop(key, None)
                body = orjson.dumps(doc)
        return span, headers, body

    def watch_upstream(self, span: Any, send: Send) -> Send:
        """``send`` that records the answer's status (and the gateway's own error) on the span."""

        async def watching(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                span.set_attribute("http.response.status_code", status)
                code = message.get(ERROR_CODE)
                if code is not None:
                    span.set_attribute("rpc.response.status_code", str(code))
                if status >= 400:
                    _set_error(self._trace, span, "timeout" if status == 504 else str(status))
            await send(message)

        return watching

    @staticmethod
    def end_upstream(span: Any) -> None:
        span.end()

    # ------------------------------------------------------------------ lifetime

    def shutdown(self) -> None:
        try:
            self.provider.force_flush(5_000)
            self.provider.shutdown()
        except (
            Exception
        ) as exc:  # an exporter that cannot reach its collector must not stop the gateway
            event(logging.WARNING, "tracing shutdown failed", error=type(exc).__name__)


def _describe(method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Span name and the MCP attributes of one request."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    target = None
    if method == "tools/call":
        target = _str(params.get("name"))
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target is not None:
            attributes["gen_ai.tool.name"] = target
    elif method == "prompts/get":
        target = _str(params.get("name"))
        if target is not None:
            attributes["gen_ai.prompt.name"] = target
    elif method == "resources/read" and isinstance(params.get("uri"), str):
        attributes["mcp.resource.uri"] = params["uri"][:1024]
    return (f"{method} {target}" if target else method), attributes


def _set_error(trace: Any, span: Any, error_type: str) -> None:
    if not error_type:
        return
    span.set_attribute("error.type", error_type)
    if error_type.lstrip("-").isdigit() and error_type.startswith("-"):
        span.set_attribute("rpc.response.status_code", error_type)
    span.set_status(trace.StatusCode.ERROR)


def _start_ns(ctx: Traced) -> int | None:
    if not ctx.arrived:
        return None
    return time.time_ns() - int((time.perf_counter() - ctx.arrived) * 1e9)


def build_tracing(
    section: TracingSection, *, gateway_id: str, provider: Any = None
) -> Tracing | None:
    """The gateway's tracing: ``provider`` when given (tests: an in-memory exporter), else an
    OTLP/HTTP exporter behind a batch processor when the section enables it, else None."""
    if provider is not None:
        return Tracing(provider)
    if not section.enabled:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    attributes: dict[str, Any] = {"service.version": __version__, "mcp_edge.gateway.id": gateway_id}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attributes["service.name"] = section.service_name
    provider = TracerProvider(
        resource=Resource.create(attributes),
        sampler=ParentBased(TraceIdRatioBased(section.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=section.endpoint)))
    return Tracing(provider)
