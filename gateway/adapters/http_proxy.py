"""Streaming reverse proxy to a Streamable HTTP upstream (httpx, pooled connections).

Bytes are streamed as they arrive, in both content types; a client that goes away cancels the
upstream request (in 2026-07-28, closing the stream is cancellation).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

import anyio
import httpx

from gateway.core import headers as h
from gateway.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from gateway.core.sse import encode_event
from gateway.edge.asgi import Receive, Scope, Send, send_rpc_error
from gateway.edge.context import EdgeContext, get_context
from gateway.observability.logs import event
from gateway.observability.metrics import Metrics

#: Extra headers for the upstream request, computed per request (credentials, identity, tracing).
HeaderHook = Callable[[EdgeContext], Sequence[tuple[str, str]]]


def upstream_error(reason: str, message: str, status: int) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": reason}, status=status)


def build_client(
    *,
    connect_timeout: float = 5.0,
    read_timeout: float = 300.0,
    write_timeout: float = 30.0,
    max_connections: int = 512,
    max_keepalive_connections: int = 128,
) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            connect=connect_timeout, read=read_timeout, write=write_timeout, pool=connect_timeout
        ),
        limits=httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=30.0,
        ),
        follow_redirects=False,
        trust_env=False,
        # The gateway must be able to read MRTR answers: ask for them uncompressed.
        headers={"accept-encoding": "identity"},
    )


class HttpProxy:
    """ASGI app forwarding one route to its upstream endpoint(s)."""

    def __init__(
        self,
        *,
        route: str,
        endpoints: Sequence[str],
        client: httpx.AsyncClient | Callable[[], httpx.AsyncClient],
        header_hook: HeaderHook | None = None,
        drop_headers: Sequence[str] = (),
        metrics: Metrics | None = None,
        affinity: bool = True,
        on_reachable: Callable[[], None] | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("an upstream route needs at least one endpoint")
        self.route = route
        self.endpoints = list(endpoints)
        self._client = client
        self._cycle = itertools.cycle(range(len(self.endpoints)))
        self.header_hook = header_hook
        self.drop_headers = tuple(drop_headers)
        self.metrics = metrics or Metrics()
        self.affinity = affinity
        self.on_reachable = on_reachable
        self._hosts = {e: urlsplit(e).netloc for e in self.endpoints}

    @property
    def client(self) -> httpx.AsyncClient:
        c = self._client
        return c if isinstance(c, httpx.AsyncClient) else c()

    def set_endpoints(self, endpoints: Sequence[str], *, host: str | None = None) -> None:
        """Replace the endpoint list (DNS refresh). ``host``: the Host header to send to all of
        them (the resolved name), instead of each endpoint's own address."""
        if endpoints:
            self.endpoints = list(endpoints)
            self._cycle = itertools.cycle(range(len(self.endpoints)))
            self._hosts = {e: host or urlsplit(e).netloc for e in self.endpoints}

    def choose(self, ctx: EdgeContext) -> str | None:
        if self.affinity and ctx.pinned_endpoint is not None:
            return ctx.pinned_endpoint if ctx.pinned_endpoint in self._hosts else None
        if len(self.endpoints) == 1:
            return self.endpoints[0]
        return self.endpoints[next(self._cycle) % len(self.endpoints)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        body = b""
        if scope["method"] in ("POST", "PUT", "PATCH"):
            parts = []
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    break
            body = b"".join(parts)

        endpoint = self.choose(ctx)
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
        url = endpoint
        query = _without_tokens(scope.get("query_string", b""))
        if query:
            url = f"{endpoint}?{query}"
        extra = list(self.header_hook(ctx)) if self.header_hook else []
        headers = h.upstream_request_headers(
            scope["headers"], upstream_host=self._hosts[endpoint], drop=self.drop_headers, extra=extra
        )
        client = self.client
        request = client.build_request(scope["method"], url, headers=headers, content=body)

        response: httpx.Response | None = None
        async with anyio.create_task_group() as tg:

            async def watch_disconnect() -> None:
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(watch_disconnect)
            try:
                started = time.perf_counter()
                if ctx.arrived:
                    self.metrics.gateway_seconds.labels(self.route).observe(started - ctx.arrived)
                try:
                    response = await client.send(request, stream=True)
                except httpx.LocalProtocolError:
                    await send_rpc_error(
                        send, RpcError(INVALID_REQUEST, "Request headers cannot be forwarded", status=400),
                        ctx.request_id,
                    )
                    return
                except httpx.TimeoutException:
                    self._fail("timeout", endpoint)
                    await send_rpc_error(send, upstream_error("upstream_timeout", "Upstream timed out", 504), ctx.request_id)
                    return
                except httpx.HTTPError as exc:
                    self._fail("unreachable", endpoint, exc)
                    await send_rpc_error(
                        send, upstream_error("upstream_unreachable", "Upstream unreachable", 502), ctx.request_id
                    )
                    return
                self.metrics.upstream_seconds.labels(self.route).observe(time.perf_counter() - started)
                ctx.answered_by = endpoint
                if self.on_reachable is not None:
                    self.on_reachable()
                await self._relay(response, ctx, send)
            finally:
                tg.cancel_scope.cancel()
                if response is not None:
                    with anyio.CancelScope(shield=True):
                        await response.aclose()

    async def _relay(self, response: httpx.Response, ctx: EdgeContext, send: Send) -> None:
        content_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        sse = content_type == "text/event-stream"
        if ctx.modern and response.status_code >= 500 and content_type not in ("application/json", "text/event-stream"):
            self._fail("bad_status", None)
            await send_rpc_error(
                send,
                RpcError(INTERNAL_ERROR, "Upstream failed", {"reason": "upstream_error", "status": response.status_code}, status=502),
                ctx.request_id,
            )
            return
        headers = h.client_response_headers(response.headers.raw, keep_length=True)
        if sse and not any(k == b"x-accel-buffering" for k, _ in headers):
            headers.append((b"x-accel-buffering", b"no"))
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        try:
            async for chunk in response.aiter_raw():
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            kind = "timeout" if isinstance(exc, httpx.TimeoutException) else "broken_stream"
            self._fail(kind, ctx.answered_by, exc)
            if sse and ctx.modern and ctx.request_id is not None:
                err = upstream_error("upstream_" + kind, "Upstream stream ended before the response", 200)
                await send({"type": "http.response.body", "body": encode_event(err.body(ctx.request_id)), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _fail(self, kind: str, endpoint: str | None, exc: Exception | None = None) -> None:
        self.metrics.upstream_errors.labels(self.route, kind).inc()
        event(logging.WARNING, "upstream error", route=self.route, kind=kind, endpoint=endpoint,
              error=type(exc).__name__ if exc else None)  # fmt: skip



def _without_tokens(query: bytes) -> str:
    """The query string minus any ``access_token`` (tokens never travel in URLs, and a client's
    token is never passed upstream by accident)."""
    if not query:
        return ""
    text = query.decode("latin-1")
    if "access_token" not in text:
        return text
    return "&".join(p for p in text.split("&") if p.split("=", 1)[0] != "access_token")
