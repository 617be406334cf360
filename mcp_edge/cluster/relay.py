"""2025-era requests relayed to the replica that holds their virtual session (a local server's
session lives in the replica that runs its process, see mcp_edge.upstream.stdio.front).

The replica to relay to is only ever read from a session id the edge opened from a sealed token,
never from what a client sent. The relayed request carries the route, the caller and its session
id in a header sealed with the key ring and bound to its method, path and body
(mcp_edge.core.peer); the answer is streamed back byte for byte (an SSE stream with the server's
questions included). The holding replica admits it at its gate (mcp_edge.cluster.gate) and serves it
(mcp_edge.cluster.endpoints).

No caller's token travels: the holder needs none, as a stdio route takes no upstream identity
(``upstream_auth.token_exchange`` / ``oauth`` are refused at start, mcp_edge.upstream.config);
a 2025-era client of an HTTP route is never relayed (each replica sends its requests upstream
itself, with the credential it makes from the caller's token).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp

from mcp_edge.cluster.gate import REFUSED_HEADER
from mcp_edge.core import peer
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from mcp_edge.core.seal import KeyRing
from mcp_edge.edge.asgi import Receive, Scope, Send, send_rpc_error, start_response
from mcp_edge.edge.context import get_context

RELAY_PATH = "/.mcp-edge/legacy"
#: Methods a relayed request may have (the 2025 transport's).
RELAY_METHODS = frozenset({"POST", "GET", "DELETE"})
#: Request headers a relayed 2025-era request keeps (the rest is the gateway's business).
_RELAYED_REQUEST_HEADERS = frozenset(
    {"accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"}
)
_RELAYED_RESPONSE_HEADERS = frozenset(
    {"content-type", "mcp-session-id", "cache-control", "allow", "x-accel-buffering"}
)


def relay_claims(route: str, principal_id: str, session_id: str | None) -> dict[str, Any]:
    """What a relayed request's sealed header says besides its method, path and body."""
    return {"r": route, "p": principal_id, "s": session_id}


class Relay:
    """Passes a 2025-era request for a virtual session to the replica that holds it, and streams
    its answer back byte for byte (an SSE stream with the server's questions included)."""

    def __init__(
        self,
        ring: KeyRing,
        client: Callable[[], aiohttp.ClientSession],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ring = ring
        self._client = client
        self.clock = clock

    async def pass_on(
        self, owner: str, route: str, principal_id: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        method = scope["method"]
        body = get_context(scope).body if method == "POST" else b""  # read at the edge
        headers = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k.decode("latin-1") in _RELAYED_REQUEST_HEADERS
        }
        claims = relay_claims(route, principal_id, headers.get("mcp-session-id"))
        headers[peer.HEADER] = peer.seal_message(
            self.ring,
            peer.RELAY,
            claims,
            method=method,
            path=RELAY_PATH,
            body=body,
            now=self.clock(),
        )
        try:
            async with self._client().request(
                method,
                owner.rstrip("/") + RELAY_PATH,
                data=body if method == "POST" else None,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=None),
            ) as response:
                if response.headers.get(REFUSED_HEADER) is not None:
                    await self._refused(response.status, send, get_context(scope).request_id)
                    return
                out = [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in response.headers.items()
                    if k.lower() in _RELAYED_RESPONSE_HEADERS
                ]
                await start_response(send, response.status, out)
                async for chunk in response.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (TimeoutError, aiohttp.ClientError, OSError):
            # The replica holding the session is gone: the client starts a new session.
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "Session not found", status=404))

    @staticmethod
    async def _refused(status: int, send: Send, request_id: Any) -> None:
        """The replica holding the session refused the relayed request itself (mcp_edge.cluster.gate)."""
        if status == 503:  # its body budget: the client may try again shortly
            error = RpcError(
                INTERNAL_ERROR,
                "The gateway is holding as many request bodies as it may; retry shortly",
                {"reason": "body_budget"},
                status=503,
                headers={"Retry-After": "1"},
            )
        else:
            error = RpcError(
                INTERNAL_ERROR,
                "The gateway replica holding this session refused the relayed request",
                {"reason": "relay_refused"},
                status=502,
            )
        await send_rpc_error(send, error, request_id)
