"""Observation of each request on a route: the outermost middleware.

It gives the request its context (:class:`~mcp_edge.edge.context.RequestContext`: arrival time and
request id) and, once the response is complete, records it: ``mcp_edge_requests`` (method,
status), ``mcp_edge_request_seconds`` (to the response's start), ``mcp_edge_inflight_requests``,
``mcp_server_operation_duration_seconds`` (mcp_edge.observability.operations), the request's span
(mcp_edge.observability.tracing) and, when configured, one access-log line. Every response carries
the request id back in ``X-Request-Id``.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Collection
from typing import TYPE_CHECKING, Any

from mcp_edge.core import headers as h
from mcp_edge.core.errors import ERROR_CODE
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send
from mcp_edge.edge.context import SCOPE_KEY, RequestContext, serving_loop
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.observability.observer import Count, Observer
from mcp_edge.observability.operations import (
    MAX_TOOL_NAME_CHARS,
    OperationMetrics,
    error_type,
    protocol_version,
)

if TYPE_CHECKING:
    from mcp_edge.observability.tracing import Tracing

_REQUEST_ID = b"x-request-id"
#: Bounds of the memo of what requests record (see ObserveMiddleware._record).
_MAX_RECORDERS = 4096
_MAX_KEYED_VERSION = 64
_PROTOCOL_VERSION = h.PROTOCOL_VERSION.encode()

#: Methods that get their own metrics label; anything else a client sends is "other", so callers
#: cannot grow the metrics without bound.
KNOWN_METHODS = frozenset(
    {
        "server/discover",
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "subscriptions/listen",
        "logging/setLevel",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "-",
    }
)


def metric_method(method: str) -> str:
    if method in KNOWN_METHODS:
        return method
    if method.startswith("notifications/"):
        return "notifications"
    return "other"


def request_uid(offered: str | None) -> str:
    """The client's X-Request-Id when it is a sane token (it ends up in logs), else a new one."""
    if offered and len(offered) <= 64 and all(c.isalnum() or c in "-_.:" for c in offered):
        return offered
    # Not a secret (clients and logs see it): a fast PRNG is enough, no system call per request.
    return f"{random.getrandbits(64):016x}"


def _method_and_tool(ctx: RequestContext) -> tuple[str, Any]:
    """The JSON-RPC method the metrics name (``-`` when none was read) and, for ``tools/call``,
    the tool name the client gave."""
    if ctx.modern:
        rpc = ctx.rpc
        if rpc is None:
            return "-", None
        method = rpc.method
    else:
        doc = ctx.message
        if not isinstance(doc, dict) or not isinstance(doc.get("method"), str):
            return "-", None
        method = doc["method"]
        rpc = None
    if method != "tools/call":
        return method, None
    params = rpc.params if rpc is not None else ctx.message.get("params")
    return method, params.get("name") if isinstance(params, dict) else None


class _Observed:
    """The response as observe sees it: its status and the gateway's own error code."""

    __slots__ = ("code", "send", "started", "status", "uid", "watch")

    def __init__(self, send: Send, uid: bytes, started: float, watch: Any) -> None:
        self.send = send
        self.uid = uid
        self.started = started
        self.watch = watch
        self.status = 0
        self.code: Any = None

    def __call__(self, message: Message) -> Awaitable[None]:
        # A plain function handing back the client's send (awaited by the caller): no coroutine
        # of its own around every message of every response.
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.code = message.get(ERROR_CODE)
            self.watch.observe(time.perf_counter() - self.started)
            message["headers"] = [*message.get("headers", []), (_REQUEST_ID, self.uid)]
        return self.send(message)


class ObserveMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        route: str,
        metrics: Metrics,
        tracing: Tracing | None = None,
        access_log: bool = False,
        max_tool_names: int = 100,
    ) -> None:
        self.app = app
        self.route = route
        self.metrics = metrics
        self.tracing = tracing
        self.access_log = access_log
        # Labelled children resolved once (labels() costs a lock and a dict walk per call), and
        # written without the library's lock (mcp_edge.observability.observer).
        self._inflight = Count(metrics.inflight.labels(route))
        self._request_seconds = Observer(metrics.request_seconds.labels(route))
        self._counters: dict[tuple[str, int], Count] = {}
        #: What a request records, by what it depends on (see _record).
        self._recorders: dict[tuple[Any, ...], tuple[Count, Observer, str]] = {}
        self._operations = OperationMetrics(metrics.operation_seconds, route, max_tool_names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        headers = h.HeaderIndex(scope["headers"])
        uid = request_uid(headers.get(_REQUEST_ID))
        ctx = scope[SCOPE_KEY] = RequestContext(
            arrived=started, request_uid=uid, headers=headers, loop=serving_loop(scope)
        )
        observed = _Observed(send, uid.encode(), started, self._request_seconds)
        self._inflight.inc()
        try:
            await self.app(scope, receive, observed)
        finally:
            self._inflight.dec()
            self._record(scope, ctx, observed, started)

    def _record(
        self, scope: Scope, ctx: RequestContext, observed: _Observed, started: float
    ) -> None:
        raw_method, tool = _method_and_tool(ctx)
        method = metric_method(raw_method)
        status = observed.status
        outcome = ctx.outcome
        code = observed.code
        tool_error = completed = False
        if outcome is not None:
            completed = outcome.completed
            tool_error = outcome.tool_error
            if outcome.error_code is not None:
                code = outcome.error_code
            listing = outcome.listing
            if listing is not None:
                self._forget(self._operations.learn(listing, ctx.request_id))
        version = ctx.headers.get(_PROTOCOL_VERSION)
        # What a request records depends on these alone: a request like one before reuses its
        # metric values (one lookup instead of the label mapping). Only exact types go in the
        # key (1.0 == 1 == True would share an entry while their labels differ), only short
        # values (a key must not hold on to a long string a caller chose), and only so many
        # entries.
        key: tuple[Any, ...] | None = None
        if (
            (tool is None or (type(tool) is str and len(tool) <= MAX_TOOL_NAME_CHARS))
            and (code is None or type(code) is int)
            and (version is None or len(version) <= _MAX_KEYED_VERSION)
        ):
            key = (method, tool, status, code, tool_error, completed, version)
            recorder = self._recorders.get(key)
        else:
            recorder = None
        if recorder is None:
            known = self._operations.known
            recorder = self._recorder(method, tool, status, code, tool_error, completed, version)
            if self._operations.known != known:
                self._forget((tool,))
            if key is not None and len(self._recorders) < _MAX_RECORDERS:
                self._recorders[key] = recorder
        counter, operation, error = recorder
        counter.inc()
        operation.observe(time.perf_counter() - started)
        if self.tracing is not None:
            self.tracing.end_request(
                scope, ctx, status=status, error_type=error, outcome=ctx.outcome
            )
        if self.access_log:
            event(
                logging.INFO,
                "request",
                route=self.route,
                method=method,
                status=status,
                ms=round((time.perf_counter() - started) * 1000, 2),
                request_uid=ctx.request_uid,
            )

    def _forget(self, tools: Collection[Any]) -> None:
        """Drop what was kept for calls of ``tools``, which just got labels of their own (each
        name does once: at most ``observability.max_tool_names`` times per route)."""
        if tools:
            named = frozenset(tools)
            for key in [k for k in self._recorders if k[1] in named]:
                del self._recorders[key]

    def _recorder(
        self,
        method: str,
        tool: Any,
        status: int,
        code: Any,
        tool_error: bool,
        completed: bool,
        version: str | None,
    ) -> tuple[Count, Observer, str]:
        """The ``mcp_edge_requests`` value, the ``mcp_server_operation_duration_seconds`` child
        and the error type of a request with these properties (``method`` as the metrics name
        it: :func:`metric_method`)."""
        key = (method, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = Count(
                self.metrics.requests.labels(self.route, method, str(status))
            )
        error = error_type(code, tool_error, status)
        label = ""
        if method == "tools/call":
            label = self._operations.tool_label(tool, error, completed=completed)
        operation = self._operations.child(method, label, error, protocol_version(version))
        return counter, operation, error
