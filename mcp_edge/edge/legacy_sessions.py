"""Sealed session ids for 2025-era clients (routes with ``seal_sessions``, the default).

A 2025-era session lives in one upstream process, and its client keeps the ``Mcp-Session-Id`` for
the whole session. The client never sees the upstream's id: it gets a token sealed with the key
ring (mcp_edge.core.session_token) naming the endpoint and the upstream's id, bound to the caller
and the route. On each later request the token is opened (a token of another caller or route,
or tampered with, gets 404 "Session not found" and reaches no upstream) and the request goes to
that endpoint with the upstream's own id; on the answer, the upstream's id is sealed again.
2026-07-28 requests have no sessions: the transport middleware sends them past this one (and
were one to arrive, it would pass untouched).
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from mcp_edge.core.errors import INVALID_REQUEST, RpcError
from mcp_edge.core.seal import KeyRing
from mcp_edge.core.session_token import UpstreamSession, open_session, seal_session
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.observability.logs import event

_SESSION = b"mcp-session-id"
_NOT_FOUND = RpcError(INVALID_REQUEST, "Session not found", status=404)


class LegacySessionsMiddleware:
    def __init__(self, app: ASGIApp, *, route: str, ring: KeyRing, audience: str) -> None:
        self.app = app
        self.route = route
        self.ring = ring
        self.audience = audience

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        if scope["type"] != "http" or ctx.modern:
            await self.app(scope, receive, send)
            return
        principal_id = ctx.principal.id if ctx.principal else ""
        presented: tuple[str, UpstreamSession] | None = None
        token = ctx.headers.get(_SESSION)
        if token is not None:
            upstream = open_session(
                self.ring, token, audience=self.audience, principal_id=principal_id
            )
            if upstream is None:
                event(
                    logging.INFO,
                    "legacy session token refused",
                    route=self.route,
                    request_uid=ctx.request_uid,
                )
                await send_rpc_error(send, _NOT_FOUND, ctx.request_id)
                return
            presented = (token, upstream)
            ctx.session_endpoint = upstream.endpoint
            ctx.session_id = upstream.session_id
            scope["headers"] = [
                *(item for item in scope["headers"] if item[0] != _SESSION),
                (_SESSION, upstream.session_id.encode("latin-1")),
            ]

        async def sealing_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = self._seal(
                    message.get("headers", []), ctx, principal_id, presented
                )
            await send(message)

        await self.app(scope, receive, sealing_send)

    def _seal(
        self,
        headers: Any,
        ctx: RequestContext,
        principal_id: str,
        presented: tuple[str, UpstreamSession] | None,
    ) -> list[tuple[bytes, bytes]]:
        """The answer's headers with the upstream's session id sealed (the client's own token when
        it names the same session on the same endpoint)."""
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name.lower() != _SESSION:
                out.append((name, value))
                continue
            endpoint = ctx.answered_by
            session_id = value.decode("latin-1")
            if endpoint is None:
                continue  # no upstream answered: nothing to map back to
            if (
                presented is not None
                and presented[1].session_id == session_id
                and presented[1].endpoint == endpoint
            ):
                out.append((name, presented[0].encode("latin-1")))
            else:
                token = seal_session(
                    self.ring,
                    audience=self.audience,
                    principal_id=principal_id,
                    endpoint=endpoint,
                    session_id=session_id,
                )
                out.append((name, token.encode("ascii")))
        return out
