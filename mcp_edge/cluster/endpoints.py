"""The replicas' own endpoints (``/.mcp-edge/*``), served on the cluster listener (or the public one
when there is none, see mcp_edge.cluster.listeners):

``/.mcp-edge/forward``  a retry for a call parked here, forwarded by the replica it reached
                        (mcp_edge.cluster.forward): answered with the parked call's answer, sealed
                        (held in the answer budget as kind ``forwarded`` until it is sent);
``/.mcp-edge/legacy``   a 2025-era request for a virtual session held here, relayed by the replica
                        it reached (mcp_edge.cluster.relay): served by the route's front, its
                        answer streamed back.

Nothing is read from a caller that is not a replica: each request is admitted by the gate first
(mcp_edge.cluster.gate: method, sealed header bound to the path and body, body bounds, once only).
What serves them (the routes' bridges and fronts) is handed in by the wiring, by route name.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from mcp_edge.auth.base import Principal
from mcp_edge.cluster import forward
from mcp_edge.cluster.gate import PeerEndpoint, PeerGate
from mcp_edge.cluster.listeners import PEER_PREFIX
from mcp_edge.cluster.relay import RELAY_METHODS, RELAY_PATH
from mcp_edge.core import headers as h
from mcp_edge.core import peer
from mcp_edge.core.seal import KeyRing
from mcp_edge.edge.asgi import (
    ASGIApp,
    Receive,
    Scope,
    Send,
    replay_body,
    send_empty,
    send_text,
    start_response,
)
from mcp_edge.edge.body import AnswerBudget, BodyBudget, Reservation
from mcp_edge.edge.context import get_context
from mcp_edge.edge.responses import UNCOUNTED_BYTES

_NOT_FOUND = b"Not Found"

#: Serves a forwarded retry's payload: the parked call's answer (``{"lost": True}`` if gone),
#: what it collected of it counted in the reservation it is given (kept until it is sent).
ServeForwarded = Callable[[dict[str, Any], Reservation], Awaitable[dict[str, Any]]]


async def not_found(send: Send) -> None:
    """404 for a path not served here, from the request's head alone: the connection is closed,
    so the server never reads the body the request announced (it would otherwise read and drop
    it to keep the connection for the next request)."""
    await start_response(
        send,
        404,
        [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(_NOT_FOUND)),
            (b"connection", b"close"),
        ],
    )
    await send({"type": "http.response.body", "body": _NOT_FOUND})


def _same_session(claims: dict[str, Any], scope: Scope) -> bool:
    """A relayed request's sealed header names the session id it carries."""
    return claims.get("s") == h.first(scope["headers"], "mcp-session-id")


class PeerEndpoints:
    """The ``/.mcp-edge/*`` endpoints (an ASGI app for paths under :data:`PEER_PREFIX`)."""

    def __init__(
        self,
        ring: KeyRing,
        *,
        budget: BodyBudget,
        body_timeout: float,
        max_body_bytes: int,
        forwarded: Mapping[str, ServeForwarded],
        fronts: Mapping[str, ASGIApp],
        answer_budget: AnswerBudget | None = None,
        on_refused: Callable[[str, str], None] | None = None,
        on_over_budget: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ring = ring
        self.clock = clock
        #: What a forwarded retry's answer is held in until it is sent (kind ``forwarded``);
        #: ``on_over_budget`` is told the route of one the budget had no room for.
        self.answer_budget = answer_budget
        self.on_over_budget = on_over_budget
        #: The routes' bridges (what serves a forwarded retry) and stdio fronts, by route name.
        self.forwarded = forwarded
        self.fronts = fronts
        self.gate = PeerGate(
            ring, budget=budget, body_timeout=body_timeout, on_refused=on_refused, clock=clock
        )
        self._forward = PeerEndpoint(
            "forward", peer.FORWARD, frozenset({"POST"}), forward.body_limit(max_body_bytes)
        )
        self._relay = PeerEndpoint(
            "relay", peer.RELAY, RELAY_METHODS, max_body_bytes, matches=_same_session
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path == forward.FORWARD_PATH:
            await self.gate.serve(self._forward, scope, receive, send, self._forwarded(send))
        elif path == RELAY_PATH:
            await self.gate.serve(self._relay, scope, receive, send, self._relayed(scope, send))
        else:
            await not_found(send)

    def _relayed(self, scope: Scope, send: Send) -> Any:
        """A 2025-era request for a virtual session held here, relayed by another replica (which
        authenticated the caller and opened the session token)."""

        async def serve(claims: dict[str, Any], body: bytes, receive: Receive) -> None:
            front = self.fronts.get(str(claims.get("r")))
            if front is None:
                await not_found(send)
                return
            # What the relaying replica's edge established, sealed into the header: this request's
            # caller and its body (read by the gate, within the bounds of a client's).
            ctx = get_context(scope)
            ctx.principal = Principal(id=str(claims.get("p")))
            ctx.body = body
            if body.strip():
                try:
                    ctx.message, ctx.parsed = orjson.loads(body), True
                except orjson.JSONDecodeError:
                    ctx.message = None
            await front(scope, replay_body(body, receive), send)

        return serve

    def _forwarded(self, send: Send) -> Any:
        """A retry forwarded by another replica for a call parked here."""

        async def serve(claims: dict[str, Any], body: bytes, receive: Receive) -> None:
            payload = forward.open_payload(
                self.ring,
                forward.BODY_PURPOSE,
                body.decode("ascii", "replace"),
                now=self.clock(),
                max_chars=len(body),
            )
            if payload is None or payload.get("route") != claims.get("r"):
                await send_empty(send, 403, [(b"connection", b"close")])
                return
            route = str(payload.get("route"))
            serve_forwarded = self.forwarded.get(route)
            held = Reservation(self.answer_budget, kind="forwarded")
            try:
                reply = (
                    await serve_forwarded(payload, held)
                    if serve_forwarded is not None
                    else {"lost": True}
                )
                sealed = forward.seal_answer(self.ring, reply, claims, now=self.clock())
                del reply  # (what was collected: the sealed answer is held from here)
                if not held.resize(len(sealed) if len(sealed) > UNCOUNTED_BYTES else 0):
                    held.release()
                    if self.on_over_budget is not None:
                        self.on_over_budget(route)
                    sealed = forward.seal_answer(
                        self.ring,
                        forward.over_budget_reply(payload.get("id")),
                        claims,
                        now=self.clock(),
                    )
                await send_text(send, 200, sealed, b"text/plain")
            finally:
                held.release()

        return serve


__all__ = ["PEER_PREFIX", "PeerEndpoints", "not_found"]
