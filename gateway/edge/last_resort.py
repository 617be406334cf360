"""The last-resort net between the edge middlewares and the route's features and upstream.

Every failure an upstream adapter knows of becomes a JSON-RPC error where it happens. This catches
the rest (a bug, an exception nobody expected from a dying transport): before the response started,
the client gets ``-32603`` for its request's id with HTTP 500 instead of the server's plain-text
500; after, the stream is ended. Either way one event is logged, with the exception's type only.
"""

from __future__ import annotations

import logging

from gateway.core.errors import INTERNAL_ERROR, RpcError
from gateway.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_rpc_error
from gateway.edge.context import get_context
from gateway.edge.responses import ResponseInspector
from gateway.observability.logs import event

INTERNAL = RpcError(INTERNAL_ERROR, "Internal error", {"reason": "internal"}, status=500)


class _Tracked:
    """``send``, remembering how far the inner app's response went and whether a send failed
    (``gateway.edge.responses.ResponseInspector`` keeps the same account of what passes it)."""

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
