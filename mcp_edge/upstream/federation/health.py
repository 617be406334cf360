"""Each member's health while nobody asks: a ``server/discover`` through the member's app now
and then (every :data:`DOWN_EVERY` seconds while it is down or not seen yet, every
:data:`UP_EVERY` while it is up). Requests mark it too, as they go (a member that answers again
is up at once, and used at once: no request ever skips a member for being down).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any, Final

from mcp_edge.core.envelope import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import RequestContext

if TYPE_CHECKING:
    from mcp_edge.upstream.federation.route import FederatedRoute, Seat

DOWN_EVERY: Final = 2.0
UP_EVERY: Final = 15.0

PROBE_PARAMS: Final[dict[str, Any]] = {
    "_meta": {
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_CAPABILITIES: {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-edge", "version": "health"},
    }
}


def probe_scope(path: str) -> dict[str, Any]:
    """A request of the gateway's own (no client behind it) to a member of the route at ``path``."""
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
            (b"mcp-protocol-version", MODERN_VERSION.encode()),
        ],
    }


async def _watch(federation: FederatedRoute, seat: Seat) -> None:
    scope = probe_scope("/")
    while True:
        ctx = RequestContext(request_uid="health", modern=True)
        # (Its answer is a member's part like any: counted while it is read.)
        held = Reservation(federation.budget, kind="member_part")
        try:
            with contextlib.suppress(Exception):
                await federation._ask(
                    scope,
                    ctx,
                    seat,
                    "server/discover",
                    dict(PROBE_PARAMS),
                    uncached=True,
                    reservation=held,
                )
        finally:
            held.release()
        await asyncio.sleep(UP_EVERY if seat.member.health.up else DOWN_EVERY)


async def watch_members(federation: FederatedRoute) -> None:
    """Runs for the gateway's life (cancelled at shutdown)."""
    await asyncio.gather(*(_watch(federation, seat) for seat in federation.seats))
