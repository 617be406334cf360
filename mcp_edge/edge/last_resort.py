"""The last-resort nets: :class:`LastResort` between the edge middlewares and the route's
features and upstream, and :func:`route_failed` around a route's whole stack.

Every failure an upstream adapter knows of becomes a JSON-RPC error where it happens. These catch
the rest (a bug, an exception nobody expected from a dying transport or a store's client): before
the response started, the client gets ``-32603`` for its request's id (``null`` when it was not
read yet) with HTTP 500 instead of the server's plain-text 500; after, the stream is ended.
Either way one event is logged, with the exception's type only (never its message, which may
quote what a request or a store said), and no traceback.

:class:`LastResort` sits inside the flow middleware, so a failure there is still answered
through the response inspector (and observed with its status). :func:`route_failed` is the net
under everything else (observe, compat, transport, legacy sessions, the flow itself): the app
calls the route with :class:`Sent` as its ``send`` (a plain function, not one more coroutine per
request) and hands it what escaped.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable
from dataclasses import replace

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.context import SCOPE_KEY, get_context
from mcp_edge.edge.responses import ResponseInspector
from mcp_edge.observability.logs import event

INTERNAL = RpcError(INTERNAL_ERROR, "Internal error", {"reason": "internal"}, status=500)


class _Tracked:
    """``send``, remembering how far the inner app's response went and whether a send failed
    (``mcp_edge.edge.responses.ResponseInspector`` keeps the same account of what passes it)."""

    __slots__ = ("app_ended", "app_started", "send", "send_failed")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.app_started = self.app_ended = self.send_failed = False

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.app_started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.app_ended = True
        try:
            await self.send(message)
        except BaseException:
            self.send_failed = True  # the client's side (or the response inspector) stopped the app
            raise


class LastResort:
    def __init__(self, app: ASGIApp, *, route: str) -> None:
        self.app = app
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # A 2026-07-28 request's send is the flow's response inspector, which keeps this account
        # itself: no second wrapper on every message.
        tracked: _Tracked | ResponseInspector = (
            send if type(send) is ResponseInspector else _Tracked(send)
        )
        try:
            await self.app(scope, receive, tracked)
        except Exception as exc:
            if tracked.send_failed:
                raise
            ctx = get_context(scope)
            event(
                logging.ERROR,
                "request failed inside the gateway",
                route=self.route,
                error=type(exc).__name__,
                started=tracked.app_started,
                request_uid=ctx.request_uid,
            )
            if not tracked.app_started:
                await send_rpc_error(send, INTERNAL, ctx.request_id)
            elif not tracked.app_ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


class Sent:
    """The client's ``send``, remembering whether the response started and ended. A plain
    function handing back the client's awaitable: no coroutine of its own per message."""

    __slots__ = ("ended", "send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = self.ended = False

    def __call__(self, message: Message) -> Awaitable[None]:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.ended = True
        return self.send(message)


async def route_failed(scope: Scope, sent: Sent, exc: Exception, *, route: str) -> None:
    """What escaped a route's whole stack: logged once; the client gets ``-32603`` with HTTP 500
    for its request's id (or ``null``) if nothing was sent yet, else its response is ended."""
    ctx = scope.get(SCOPE_KEY)
    uid = ctx.request_uid if ctx is not None else None
    event(
        logging.ERROR,
        "request failed inside the gateway",
        route=route,
        error=type(exc).__name__,
        started=sent.started,
        request_uid=uid,
    )
    # The server may take no more of this response (it was cut already): nothing left to say.
    with contextlib.suppress(Exception):
        if not sent.started:
            error = replace(INTERNAL, headers={"X-Request-Id": uid}) if uid else INTERNAL
            request_id = ctx.request_id if ctx is not None else None
            if type(request_id) not in (str, int):  # none read yet (or none usable)
                request_id = None
            await send_rpc_error(sent.send, error, request_id)
        elif not sent.ended:
            await sent.send({"type": "http.response.body", "body": b"", "more_body": False})
