"""The last-resort net between the edge guard and the route's inner app.

Every failure an upstream adapter knows of becomes a JSON-RPC error where it happens. This catches
the rest (a bug, an exception nobody expected from a dying transport): before the response started,
the client gets ``-32603`` for its request's id with HTTP 500 instead of the server's plain-text
500; after, the stream is ended. Either way one event is logged, with the exception's type only.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from gateway.core.errors import INTERNAL_ERROR, RpcError
from gateway.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from gateway.edge.context import get_context
from gateway.observability.logs import event

INTERNAL = RpcError(INTERNAL_ERROR, "Internal error", {"reason": "internal"}, status=500)


def last_resort(app: ASGIApp, route: str) -> ASGIApp:
    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        started = ended = outside = False

        async def tracking_send(message: MutableMapping[str, Any]) -> None:
            nonlocal started, ended, outside
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            try:
                await send(message)
            except BaseException:
                outside = True  # the client's side (or the response inspector) stopped the app
                raise

        try:
            await app(scope, receive, tracking_send)
        except Exception as exc:
            if outside:
                raise
            ctx = get_context(scope)
            event(logging.ERROR, "request failed inside the gateway", route=route, error=type(exc).__name__,
                  started=started, request_uid=ctx.request_uid)  # fmt: skip
            if not started:
                await send_rpc_error(send, INTERNAL, ctx.request_id)
            elif not ended:
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    return guarded
