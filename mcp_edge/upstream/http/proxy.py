"""Streaming reverse proxy to a Streamable HTTP upstream (pooled keep-alive connections).

Bytes are streamed as they arrive, in both content types; a client that goes away cancels the
upstream request (in 2026-07-28, closing the stream is cancellation). A ``subscriptions/listen``
stream ends, between two chunks, when the process begins draining (mcp_edge.edge.draining): the
upstream's stream is closed and the client's ends without a response, so the client listens
again (elsewhere).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp_edge.core import headers as h
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from mcp_edge.core.sse import encode_event
from mcp_edge.core.urls import redact
from mcp_edge.edge.asgi import Receive, Scope, Send, send_rpc_error, start_response
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.draining import Draining
from mcp_edge.edge.forwarding import Forwarding
from mcp_edge.edge.responses import GATEWAY_EVENT
from mcp_edge.edge.timers import wheel
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.observability.observer import Observer
from mcp_edge.upstream.http.client import UpstreamClient, UpstreamError, UpstreamResponse
from mcp_edge.upstream.http.era import looks_legacy


def upstream_error(reason: str, message: str, status: int) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": reason}, status=status)


class HttpProxy:
    """ASGI app forwarding one route to its upstream endpoint(s)."""

    def __init__(
        self,
        *,
        route: str,
        endpoints: Sequence[str],
        client: UpstreamClient | Callable[[], UpstreamClient],
        forwarding: Forwarding | None = None,
        metrics: Metrics | None = None,
        affinity: bool = True,
        on_reachable: Callable[[], None] | None = None,
        on_era_doubt: Callable[[], None] | None = None,
        draining: Draining | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("an upstream route needs at least one endpoint")
        self.route = route
        self.endpoints = list(endpoints)
        self._client = client
        self._cycle = itertools.cycle(range(len(self.endpoints)))
        #: What the upstream gets of each request (the edge cache keys on the same description).
        self.forwarding = forwarding or Forwarding()
        self.metrics = metrics or Metrics()
        self.affinity = affinity
        self.on_reachable = on_reachable
        #: Called when a 2026-07-28 request got the answer a legacy server gives (era in doubt).
        self.on_era_doubt = on_era_doubt
        #: The process's graceful shutdown, which ends listen streams (None: they never end).
        self.draining = draining
        #: OpenTelemetry spans for upstream calls (mcp_edge.observability.tracing), when tracing is on.
        self.tracing: Any = None
        self._hosts = {e: urlsplit(e).netloc for e in self.endpoints}
        # Labelled children resolved once, off the per-request path.
        self._gateway_seconds = Observer(self.metrics.gateway_seconds.labels(route))
        self._upstream_seconds = Observer(self.metrics.upstream_seconds.labels(route))

    @property
    def client(self) -> UpstreamClient:
        c = self._client
        return c if isinstance(c, UpstreamClient) else c()

    def set_endpoints(self, endpoints: Sequence[str], *, host: str | None = None) -> None:
        """Replace the endpoint list (DNS refresh). ``host``: the Host header to send to all of
        them (the resolved name), instead of each endpoint's own address."""
        if endpoints:
            self.endpoints = list(endpoints)
            self._cycle = itertools.cycle(range(len(self.endpoints)))
            self._hosts = {e: host or urlsplit(e).netloc for e in self.endpoints}

    def host_for(self, endpoint: str) -> str:
        """The Host header for requests to ``endpoint`` (the DNS name for resolved addresses)."""
        return self._hosts.get(endpoint) or urlsplit(endpoint).netloc

    def choose(self, ctx: RequestContext) -> str | None:
        session_endpoint = getattr(ctx, "session_endpoint", None)
        if session_endpoint is not None:  # a legacy session lives in one upstream process
            return session_endpoint if session_endpoint in self._hosts else None
        if self.affinity and ctx.pinned_endpoint is not None:
            return ctx.pinned_endpoint if ctx.pinned_endpoint in self._hosts else None
        if len(self.endpoints) == 1:
            return self.endpoints[0]
        return self.endpoints[next(self._cycle) % len(self.endpoints)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        endpoint = self.choose(ctx)
        if endpoint is None and ctx.session_endpoint is not None:
            # The process holding this legacy session is gone: the client starts a new session.
            await send_rpc_error(
                send, RpcError(INVALID_REQUEST, "Session not found", status=404), ctx.request_id
            )
            return
        if endpoint is None:
            await send_rpc_error(
                send,
                upstream_error(
                    "endpoint_gone",
                    "The upstream endpoint holding this flow is no longer available; restart the flow",
                    502,
                ),
                ctx.request_id,
            )
            return
        # Exactly what the edge cache keys on (mcp_edge.core.forwarded), at this endpoint. The body
        # is the one the edge read (and the flow left); ``receive`` only tells of a disconnect.
        forwarded = self.forwarding.describe(scope, ctx, self._hosts[endpoint])
        url = forwarded.url(endpoint)
        method, headers, body = forwarded.method, forwarded.headers, forwarded.body
        if self.tracing is not None:
            # Trace context replaces the client's (the cache key leaves it out: it names one request).
            span, headers, body = self.tracing.start_upstream(scope, ctx, url, headers, body)
            try:
                await self._exchange(
                    method,
                    url,
                    headers,
                    body,
                    endpoint,
                    ctx,
                    receive,
                    self.tracing.watch_upstream(span, send),
                )
            finally:
                self.tracing.end_upstream(span)
            return
        await self._exchange(method, url, headers, body, endpoint, ctx, receive, send)

    async def _exchange(
        self,
        method: str,
        url: str,
        raw_headers: list[tuple[bytes, bytes]],
        body: bytes,
        endpoint: str,
        ctx: RequestContext,
        receive: Receive,
        send: Send,
    ) -> None:
        """Send upstream and relay the answer, cancelling the upstream request if the client
        goes away first (for 2026-07-28 upstreams a closed stream is the cancellation)."""
        state = _Watch(receive, ctx.loop)
        response: UpstreamResponse | None = None
        try:
            started = time.perf_counter()
            if ctx.arrived:
                self._gateway_seconds.observe(started - ctx.arrived)
            try:
                response = await self.client.request(method, url, raw_headers, body)
            except TimeoutError:
                self._fail("timeout", endpoint)
                await send_rpc_error(
                    send,
                    upstream_error("upstream_timeout", "Upstream timed out", 504),
                    ctx.request_id,
                )
                return
            except (UpstreamError, OSError) as exc:
                self._fail("unreachable", endpoint, exc)
                await send_rpc_error(
                    send,
                    upstream_error("upstream_unreachable", "Upstream unreachable", 502),
                    ctx.request_id,
                )
                return
            except ValueError:  # a header that cannot be sent
                await send_rpc_error(
                    send,
                    RpcError(INVALID_REQUEST, "Request headers cannot be forwarded", status=400),
                    ctx.request_id,
                )
                return
            self._upstream_seconds.observe(time.perf_counter() - started)
            ctx.answered_by = endpoint
            if self.on_reachable is not None:
                self.on_reachable()
            await self._relay(response, ctx, send, state)
        except asyncio.CancelledError:
            if state.disconnected:
                if response is not None:
                    response.close()  # drop the connection: the upstream sees the cancellation
                    response = None
                return
            raise
        finally:
            state.stop()
            if response is not None:
                response.release()

    async def _relay(
        self, response: UpstreamResponse, ctx: RequestContext, send: Send, state: _Watch
    ) -> None:
        content_type = (
            (response.header(b"content-type") or b"")
            .split(b";", 1)[0]
            .strip()
            .lower()
            .decode("latin-1")
        )
        sse = content_type == "text/event-stream"
        if (
            ctx.modern
            and response.status >= 500
            and content_type not in ("application/json", "text/event-stream")
        ):
            self._fail("bad_status", None)
            state.done = True
            await send_rpc_error(
                send,
                RpcError(
                    INTERNAL_ERROR,
                    "Upstream failed",
                    {"reason": "upstream_error", "status": response.status},
                    status=502,
                ),
                ctx.request_id,
            )
            return
        headers = h.client_response_headers(response.raw_headers, keep_length=True)
        if sse and not any(k == b"x-accel-buffering" for k, _ in headers):
            headers.append((b"x-accel-buffering", b"no"))
        await start_response(send, response.status, headers)
        watch_era = self.on_era_doubt is not None and ctx.modern and response.status in (400, 404)
        drained = (
            self.draining.future()
            if sse and self.draining is not None and ctx.rpc_method == LISTEN
            else None
        )
        try:
            while True:
                if drained is None:
                    chunk = await response.read()
                else:
                    chunk = await _read_unless_drained(response, drained)
                if chunk is None:
                    if drained is not None and drained.done():
                        response.close()  # the process drains: the upstream's stream goes too
                    break
                if watch_era and self.on_era_doubt is not None:
                    watch_era = False
                    if looks_legacy(response.status, chunk):
                        self.on_era_doubt()
                if response.finished:  # the last chunk: it ends the answer
                    state.done = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                    return
                state.start()  # a streamed answer: from now on, a client that goes away ends it
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (TimeoutError, UpstreamError) as exc:
            kind = "timeout" if isinstance(exc, TimeoutError) else "broken_stream"
            self._fail(kind, ctx.answered_by, exc)
            response.close()
            if sse and ctx.modern and ctx.request_id is not None:
                err = upstream_error(
                    "upstream_" + kind, "Upstream stream ended before the response", 200
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": encode_event(err.body(ctx.request_id)),
                        "more_body": True,
                        GATEWAY_EVENT: True,
                    }
                )
        state.done = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _fail(self, kind: str, endpoint: str | None, exc: Exception | None = None) -> None:
        self.metrics.upstream_errors.labels(self.route, kind).inc()
        if kind == "unreachable" and self.on_era_doubt is not None:
            self.on_era_doubt()  # a replaced upstream may speak another era
        event(
            logging.WARNING,
            "upstream error",
            route=self.route,
            kind=kind,
            endpoint=redact(endpoint) if endpoint else endpoint,
            error=type(exc).__name__ if exc else None,
        )


#: The method whose answer is a stream that never ends by itself.
LISTEN = "subscriptions/listen"


async def _read_unless_drained(
    response: UpstreamResponse, drained: asyncio.Future[None]
) -> bytes | None:
    """The next chunk of a listen stream; None at its end, or once ``drained`` is done first."""
    if drained.done():
        return None
    reading = asyncio.ensure_future(response.read())
    try:
        await asyncio.wait((reading, drained), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not reading.done():
            reading.cancel()
    if not reading.done() or reading.cancelled():
        return None
    return reading.result()


#: How long the upstream may take to answer before the client's side is watched for a disconnect
#: (most answers come sooner, and then no watcher is started at all).
WATCH_AFTER_SECONDS = 0.02


class _Watch:
    """Cancels the request's task when the client goes away before the answer is complete.

    The watcher (a task reading ``receive``) starts only when it may be needed: once the upstream
    has taken :data:`WATCH_AFTER_SECONDS` to answer, or once an answer turns out to be streamed;
    a small answer that comes at once never starts one."""

    __slots__ = ("_receive", "_slot", "_task", "_watcher", "_wheel", "disconnected", "done")

    def __init__(self, receive: Receive, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._receive = receive
        if loop is None:
            loop = asyncio.get_running_loop()
        self._task = asyncio.current_task(loop)
        self._watcher: asyncio.Task[None] | None = None
        # A coarse timer (mcp_edge.edge.timers), the watch its own entry: it may start a tick later.
        self._wheel = wheel(loop)
        self._slot: int | None = self._wheel.arm(self, loop.time() + WATCH_AFTER_SECONDS)
        self.done = False
        self.disconnected = False

    def callback(self) -> None:
        """The wheel's call, once the upstream has taken WATCH_AFTER_SECONDS."""
        self._slot = None
        self.start()

    def start(self) -> None:
        self._disarm()
        if self._watcher is None and not self.done:
            self._watcher = asyncio.ensure_future(self._watch())

    def _disarm(self) -> None:
        if self._slot is not None:
            self._wheel.disarm(self, self._slot)
            self._slot = None

    async def _watch(self) -> None:
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                if not self.done and self._task is not None:
                    self.disconnected = True
                    self._task.cancel()
                return

    def stop(self) -> None:
        self._disarm()
        if self._watcher is not None:
            self._watcher.cancel()
