"""The replicas' own endpoints (``/.mcp-edge/*``): nothing is read from a caller that is not a
replica.

A peer request is admitted in this order, each step before the next costs anything:

1. its method is one the endpoint takes (405);
2. its header carries a message sealed with the key ring for this endpoint, method and path (and
   whatever else of the head the endpoint binds), not expired (``mcp_edge.core.peer``; 403). This
   is a few hundred bytes opened with one AEAD operation: a caller without the ring is answered
   here, its body never read;
3. its body's length is declared and within the endpoint's bound, derived from
   ``limits.max_body_bytes`` (411 without ``Content-Length``, or chunked; 413 over it);
4. the body is read like a client's (``mcp_edge.edge.body``): counted against the
   process's body budget (503), within ``listen.body_timeout`` (408);
5. its SHA-256 is the one the header was sealed with, and the message has not been acted on
   before in this process (403).

A refusal is a short answer without a body, and the connection is closed (its body, if any, is
not read). The refusal says why in a header (``X-MCP-Edge-Refused``) for the replica that sent
it, and is counted in ``mcp_edge_peer_refused{endpoint, reason}``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp_edge.core import headers as h
from mcp_edge.core import peer
from mcp_edge.core.seal import KeyRing
from mcp_edge.edge.asgi import Receive, Scope, Send, send_empty
from mcp_edge.edge.body import BodyBudget, BodyRefused, Reservation, read_body

REFUSED_HEADER = "x-mcp-edge-refused"
_PEER_HEADER = peer.HEADER.encode("latin-1")
_REFUSED = REFUSED_HEADER.encode("latin-1")


@dataclass(frozen=True, slots=True)
class PeerEndpoint:
    name: str  # for metrics and logs
    purpose: str  # of the sealed header (mcp_edge.core.peer)
    methods: frozenset[str]
    #: Largest body taken (a real forwarded retry or relayed request fits).
    max_body_bytes: int
    #: What else the claims must match in the request's head (checked before the body is read).
    matches: Callable[[dict[str, Any], Scope], bool] | None = None


#: What a handler gets: the header's claims, the body (its digest checked), and ``receive`` for
#: what follows the body (a disconnect).
Handler = Callable[[dict[str, Any], bytes, Receive], Awaitable[None]]


class PeerGate:
    def __init__(
        self,
        ring: KeyRing,
        *,
        budget: BodyBudget,
        body_timeout: float,
        on_refused: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ring = ring
        self.budget = budget
        self.body_timeout = body_timeout
        self.on_refused = on_refused
        self.clock = clock
        self.seen = peer.SeenIds()

    async def serve(
        self, endpoint: PeerEndpoint, scope: Scope, receive: Receive, send: Send, handler: Handler
    ) -> None:
        """Admit the request (or answer the refusal) and hand it to ``handler``; the body stays
        counted in the budget until the handler is done."""
        reservation = Reservation(self.budget)
        try:
            admitted = await self._admit(endpoint, scope, receive, send, reservation)
            if admitted is not None:
                await handler(admitted[0], admitted[1], receive)
        finally:
            reservation.release()

    async def _admit(
        self,
        endpoint: PeerEndpoint,
        scope: Scope,
        receive: Receive,
        send: Send,
        reservation: Reservation,
    ) -> tuple[dict[str, Any], bytes] | None:
        method = scope["method"]
        if method not in endpoint.methods:
            allow = ", ".join(sorted(endpoint.methods))
            await self._refuse(endpoint, send, 405, "method", [(b"allow", allow.encode())])
            return None
        headers = scope["headers"]
        token = next((v.decode("latin-1") for k, v in headers if k == _PEER_HEADER), None)
        claims = peer.open_message(
            self.ring, endpoint.purpose, token, method=method, path=scope["path"], now=self.clock()
        )
        if claims is None or (endpoint.matches is not None and not endpoint.matches(claims, scope)):
            await self._refuse(endpoint, send, 403, "seal")
            return None
        declared = h.first(headers, "content-length")
        if h.first(headers, "transfer-encoding") is not None or (
            declared is None and method == "POST"
        ):
            await self._refuse(endpoint, send, 411, "length")
            return None
        if declared is not None and (
            not declared.isdigit() or int(declared) > endpoint.max_body_bytes
        ):
            await self._refuse(endpoint, send, 413, "size")
            return None
        try:
            body = await read_body(
                h.HeaderIndex(headers),
                receive,
                max_bytes=endpoint.max_body_bytes,
                timeout=self.body_timeout,
                reservation=reservation,
            )
        except BodyRefused as refused:
            if refused.error is None:
                return None  # the sender went away
            status = refused.error.http_status
            reason = {408: "body_timeout", 503: "body_budget"}.get(status, "size")
            extra = [(b"retry-after", b"1")] if status == 503 else []
            await self._refuse(endpoint, send, status, reason, extra)
            return None
        if not peer.body_matches(claims, body):
            await self._refuse(endpoint, send, 403, "body")
            return None
        if not self.seen.first_time(claims, self.clock()):
            await self._refuse(endpoint, send, 403, "replayed")
            return None
        return claims, body

    async def _refuse(
        self,
        endpoint: PeerEndpoint,
        send: Send,
        status: int,
        reason: str,
        extra: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        if self.on_refused is not None:
            self.on_refused(endpoint.name, reason)
        await send_empty(
            send, status, [(b"connection", b"close"), (_REFUSED, reason.encode()), *(extra or [])]
        )
        return None
