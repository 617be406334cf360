"""An ASGI app the gateway wraps in its own process, as a route's upstream.

:class:`InProcessApp` is the route's upstream adapter, in the place the HTTP proxy has on a sidecar
route, and it keeps the proxy's wire: the app gets the request as the proxy would send it (the
body as the edge read it and the flow left it; hop-by-hop, gateway-owned and credential headers
dropped, the route's upstream headers added; ``access_token`` never in the query), except that
``Host`` stays the client's (there is no hop to name); the client gets the app's answer as the
proxy relays it (hop-by-hop headers dropped, ``X-Accel-Buffering: no`` on a stream, a 5xx that is
no MCP answer replaced by the JSON-RPC error the proxy gives, a stream that breaks ended with the
proxy's error event). An exception the app raises is what its server would make of it: a 500 the
edge replaces in the same way.

:class:`AppLifespan` runs the app's own ASGI lifespan (the SDK's streamable HTTP app starts its
session manager there) beside the gateway's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from typing import Any

from mcp_edge.core import headers as h
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.forwarding import Forwarding
from mcp_edge.edge.responses import GATEWAY_EVENT
from mcp_edge.observability.logs import event, logger
from mcp_edge.observability.metrics import Metrics
from mcp_edge.observability.observer import Observer

#: What sealed state and sealed 2025-era session ids name as the endpoint that answered.
ENDPOINT = "in-process"

_CONTENT_TYPE = b"content-type"
_MCP_TYPES = (b"application/json", b"text/event-stream")


#: The proxy's error event for a stream that ends before its response (mcp_edge.upstream.http.proxy).
_BROKEN_STREAM = RpcError(
    INTERNAL_ERROR,
    "Upstream stream ended before the response",
    {"reason": "upstream_broken_stream"},
    status=200,
)


def _failed(status: int) -> RpcError:
    """What the proxy answers for an upstream 5xx that is no MCP answer."""
    return RpcError(
        INTERNAL_ERROR,
        "Upstream failed",
        {"reason": "upstream_error", "status": status},
        status=502,
    )


class InProcessApp:
    """ASGI app forwarding one route to an ASGI app in this process."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        route: str,
        forwarding: Forwarding | None = None,
        metrics: Metrics | None = None,
        tracing: Any = None,
    ) -> None:
        self.app = app
        self.route = route
        #: What the app gets of each request (the edge cache keys on the same description): the
        #: client's Host among it.
        self.forwarding = forwarding or Forwarding(client_host=True)
        if not self.forwarding.client_host:
            raise ValueError("an app in this process gets the client's Host (client_host=True)")
        self.metrics = metrics or Metrics()
        #: OpenTelemetry spans for the call into the app (mcp_edge.observability.tracing), or None.
        self.tracing = tracing
        self._gateway_seconds = Observer(self.metrics.gateway_seconds.labels(route))
        self._upstream_seconds = Observer(self.metrics.upstream_seconds.labels(route))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        if ctx.session_endpoint not in (None, ENDPOINT):
            await send_rpc_error(  # not a session of this app (the proxy's answer)
                send, RpcError(INVALID_REQUEST, "Session not found", status=404), ctx.request_id
            )
            return
        post = scope["method"] == "POST"
        # The request a sidecar's upstream would get, but for Host: the client's (none if none),
        # which the edge cache keys on too (one description: ``forwarding.client_host``).
        forwarded = self.forwarding.describe(scope, ctx)
        headers, body = forwarded.headers, forwarded.body
        if post:
            headers.append((b"content-length", b"%d" % len(body)))
        span = None
        if self.tracing is not None:
            url = f"asgi://{ENDPOINT}{scope.get('path', '')}"
            span, headers, body = self.tracing.start_upstream(scope, ctx, url, headers, body)
            send = self.tracing.watch_upstream(span, send)
        inner = dict(scope)
        inner["headers"] = headers
        inner["query_string"] = forwarded.query.encode("latin-1")
        ctx.answered_by = ENDPOINT
        relay = _Relay(send, ctx, self)
        started = time.perf_counter()
        if ctx.arrived:
            self._gateway_seconds.observe(started - ctx.arrived)
        relay.started_at = started
        try:
            await self.app(inner, _body_then(body, receive), relay)
        except Exception as exc:
            if relay.send_failed:
                raise  # the client's side stopped the app
            self._fail("exception", exc)
            await relay.broken(exc)
        else:
            await relay.finish()
        finally:
            if span is not None:
                self.tracing.end_upstream(span)

    def _fail(self, kind: str, exc: BaseException | None = None) -> None:
        self.metrics.upstream_errors.labels(self.route, kind).inc()
        if exc is not None:
            # The app's own bug: its traceback belongs in the host's log, as its server would
            # have written it (the client gets a JSON-RPC error, never the traceback).
            logger.error(
                "the in-process app raised %s",
                type(exc).__name__,
                exc_info=exc,
                extra={"fields": {"route": self.route, "error": type(exc).__name__}},
            )
        else:
            event(logging.WARNING, "upstream error", route=self.route, kind=kind)


def _body_then(body: bytes, receive: Receive) -> Receive:
    """The body once, then the client's own messages (a disconnect)."""
    sent = False

    async def forwarded() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return forwarded


class _Relay:
    """The app's ``send``: its answer relayed as the proxy relays an upstream's."""

    __slots__ = (
        "app",
        "ctx",
        "ended",
        "replaced",
        "send",
        "send_failed",
        "sse",
        "started",
        "started_at",
    )

    def __init__(self, send: Send, ctx: RequestContext, app: InProcessApp) -> None:
        self.send = send
        self.ctx = ctx
        self.app = app
        self.started = self.ended = self.sse = self.send_failed = False
        #: The app's answer was replaced by the gateway's error: the rest of it is dropped.
        self.replaced = False
        self.started_at = 0.0

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self._start(message)
            return
        if kind != "http.response.body" or self.replaced or self.ended or not self.started:
            return  # (nothing else crosses; a body before its start is the app's bug)
        if not message.get("more_body", False):
            self.ended = True
        await self._send(message)

    async def _start(self, message: Message) -> None:
        if self.started:
            return
        self.started = True
        self.app._upstream_seconds.observe(time.perf_counter() - self.started_at)
        status = message["status"]
        raw = message.get("headers") or []
        content_type = next((v for k, v in raw if k.lower() == _CONTENT_TYPE), b"")
        media = content_type.split(b";", 1)[0].strip().lower()
        self.sse = media == b"text/event-stream"
        if self.ctx.modern and status >= 500 and media not in _MCP_TYPES:
            self.replaced = self.ended = True
            self.app._fail("bad_status")
            await self._error(_failed(status))
            return
        headers = h.client_response_headers(raw, keep_length=True)
        if self.sse and not any(k == b"x-accel-buffering" for k, _ in headers):
            headers.append((b"x-accel-buffering", b"no"))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def _send(self, message: Message) -> None:
        try:
            await self.send(message)
        except BaseException:
            self.send_failed = True
            raise

    async def _error(self, error: RpcError) -> None:
        try:
            await send_rpc_error(self.send, error, self.ctx.request_id)
        except BaseException:
            self.send_failed = True
            raise

    async def finish(self) -> None:
        """The app returned: an answer it never started is its server's 500; one it did not end
        is ended."""
        if not self.started:
            self.started = self.replaced = self.ended = True
            self.app._fail("bad_status")
            await self._error(_failed(500))
        elif not self.ended:
            self.ended = True
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def broken(self, exc: BaseException) -> None:
        """The app raised: before its answer started, its server's 500 (replaced as the proxy
        replaces it); after, the stream ends, with the proxy's error event on a 2026-07-28 one."""
        if not self.started:
            self.started = self.replaced = self.ended = True
            await self._error(_failed(500))
            return
        if self.ended:
            return
        self.ended = True
        ctx = self.ctx
        if self.sse and not self.replaced and ctx.modern and ctx.request_id is not None:
            err = _BROKEN_STREAM
            await self._send(
                {
                    "type": "http.response.body",
                    "body": encode_event(err.body(ctx.request_id)),
                    "more_body": True,
                    GATEWAY_EVENT: True,
                }
            )
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


class LifespanFailed(Exception):
    """The app's lifespan failed (its message is for the operator)."""


class AppLifespan:
    """The wrapped app's ASGI lifespan, driven from the gateway's: ``startup`` and ``shutdown``
    send it the lifespan messages and wait for its answer.

    An app that raises or returns before answering the start-up takes no part in the lifespan
    (ASGI's "unsupported"): it is served without one, as servers serve such apps. An app that
    answers ``lifespan.startup.failed`` (or ``shutdown.failed``) raises :class:`LifespanFailed`.
    """

    #: How long the app's lifespan may take to return once it has answered the shutdown.
    EXIT_SECONDS = 5.0

    def __init__(self, app: ASGIApp, scope: Scope) -> None:
        self.app = app
        self.scope = scope
        self.supported = True
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        await self.app(self.scope, self._to_app.get, self._from_app.put)

    async def _answer(self) -> Message | None:
        """The app's next message, or None once its lifespan has returned or raised."""
        assert self._task is not None
        getter = asyncio.ensure_future(self._from_app.get())
        try:
            await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not getter.done():
                getter.cancel()
        if getter.done() and not getter.cancelled():
            return getter.result()
        return None

    def _ended_with(self) -> BaseException | None:
        task = self._task
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception()

    async def startup(self) -> None:
        self._task = asyncio.ensure_future(self._run())
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._answer()
        if answer is None:
            self.supported = False
            await self._wait_exit()
            exc = self._ended_with()
            if exc is not None:
                event(
                    logging.WARNING,
                    "the wrapped app raised on the lifespan scope: served without a lifespan",
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
            return
        if answer["type"] == "lifespan.startup.failed":
            await self._wait_exit()
            raise LifespanFailed(_message(answer, "its start-up failed"))

    async def shutdown(self) -> None:
        if not self.supported or self._task is None:
            return
        if self._task.done():
            await self._wait_exit()
            exc = self._ended_with()
            why = f"{type(exc).__name__}: {exc}" if exc is not None else "it returned"
            raise LifespanFailed(f"its lifespan ended before the shutdown ({why})"[:500])
        await self._to_app.put({"type": "lifespan.shutdown"})
        answer = await self._answer()
        await self._wait_exit()
        if answer is None:
            exc = self._ended_with()
            why = f"{type(exc).__name__}: {exc}" if exc is not None else "no answer"
            raise LifespanFailed(f"its shutdown failed ({why})"[:500])
        if answer["type"] == "lifespan.shutdown.failed":
            raise LifespanFailed(_message(answer, "its shutdown failed"))

    async def _wait_exit(self) -> None:
        """Let the app's lifespan return (its failure was told by its answer, and is not raised
        again); one that does not within EXIT_SECONDS is cancelled."""
        task = self._task
        if task is None:
            return
        if not task.done():
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(task), self.EXIT_SECONDS)
            if not task.done():
                task.cancel()
                return
        if not task.cancelled():
            task.exception()  # retrieved: no "exception never retrieved" at collection

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _message(answer: Message, default: str) -> str:
    text = answer.get("message")
    if not text:
        return default
    logger.debug("the wrapped app's lifespan failed:\n%s", text)  # (the whole text, traceback too)
    return failure_cause(str(text))


#: The longest cause a lifespan failure's one line gives.
MAX_CAUSE_CHARS = 1000
_TRACEBACK = "Traceback (most recent call last):"
#: A line naming an exception: ``RuntimeError: ...``, ``mod.Error``, within an exception group's
#: ``|`` margin too.
_EXCEPTION_LINE = re.compile(r"[A-Za-z_][\w.]*(?::\s.*)?")


def failure_cause(text: str) -> str:
    """A lifespan failure's message in one line: for a traceback (Starlette's router sends one),
    its exception line(s), the cause; other text as it is. Cut past :data:`MAX_CAUSE_CHARS`."""
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    if lines and _TRACEBACK in lines[0]:  # (``  + Exception Group Traceback ...`` too)
        # The exception follows its last frame's (indented) lines, to the end.
        last_frame = max((i for i, line in enumerate(lines) if line[:1].isspace()), default=-1)
        cause = lines[last_frame + 1 :]
        if not cause:  # an exception group: its last sub-exception's line, in the margin
            bare = (line.strip().lstrip("|+-").strip() for line in reversed(lines))
            cause = [next((b for b in bare if _EXCEPTION_LINE.fullmatch(b)), lines[-1])]
        lines = cause
    one = " ".join(" ".join(lines).split())
    return one if len(one) <= MAX_CAUSE_CHARS else one[:MAX_CAUSE_CHARS] + "..."
