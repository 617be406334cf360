"""``subscriptions/listen`` through the bridge: a listen stream fed by a legacy session (or the
route's processes) held for as long as the client listens (see
:mod:`mcp_edge.upstream.legacy.subscriptions` for what it relays), and ended without a response
when the process begins draining (mcp_edge.edge.draining): the client listens again, elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from mcp_edge.core.errors import METHOD_NOT_FOUND, RpcError
from mcp_edge.edge.draining import Draining
from mcp_edge.upstream.legacy import subscriptions, wire
from mcp_edge.upstream.legacy.http_session import SessionGone, UpstreamRefused, UpstreamUnavailable
from mcp_edge.upstream.legacy.request import BridgeRequest
from mcp_edge.upstream.legacy.sessions import Feed, Sessions

#: A listen stream with nothing to say sends an SSE comment this often (idle proxies and load
#: balancers close silent connections).
LISTEN_KEEPALIVE = 15.0


class Listening:
    def __init__(
        self, *, sessions: Sessions, draining: Draining | None, background: Callable[[Any], None]
    ) -> None:
        self.sessions = sessions
        self.draining = draining
        self.background = background

    async def serve(self, req: BridgeRequest) -> None:
        """A listen stream, fed by a legacy session (or the route's processes) held for as
        long as the client listens: acknowledged with what the server can deliver, then every
        notification of those kinds, tagged; ended abruptly when the upstream goes away or the
        process drains (the client listens again), gracefully when nothing can ever come."""
        feed = await self.sessions.listen(req.caller, req.ctx)
        feed.hold_in(req.reservation)
        try:
            capabilities = feed.capabilities
            if not subscriptions.offered(capabilities):
                # Neither advertised (server/discover) nor served: as for any method without use.
                await req.writer.error(
                    RpcError(METHOD_NOT_FOUND, "Method not found", {"method": req.method})
                )
                return
            flags, uris = subscriptions.honored(subscriptions.requested(req.params), capabilities)
            if subscriptions.delivers(flags, uris) and not await feed.open():
                flags, uris = {}, []  # no standalone stream on this server: nothing can come
            accepted = [uri for uri in uris if await feed.subscribe(uri)]
            sid = req.writer.request_id
            await req.writer.notify(subscriptions.acknowledgement(flags, accepted, sid))
            if not subscriptions.delivers(flags, accepted):
                await req.writer.result(subscriptions.closing(sid, feed.server_info))
                return
            await self._relay(req, feed, flags, accepted)
        finally:
            self.background(feed.close())

    async def _relay(
        self, req: BridgeRequest, feed: Feed, flags: dict[str, Any], uris: list[str]
    ) -> None:
        sid = req.writer.request_id
        declared = req.caller.capabilities
        answered: set[str] = set()
        reading: asyncio.Future[Any] | None = None
        drained = self.draining.future() if self.draining is not None else None
        try:
            while True:
                if reading is None:
                    reading = asyncio.ensure_future(feed.next())
                waits: list[asyncio.Future[Any]] = [reading]
                if drained is not None:
                    waits.append(drained)
                await asyncio.wait(
                    waits, timeout=LISTEN_KEEPALIVE, return_when=asyncio.FIRST_COMPLETED
                )
                if not reading.done():
                    if drained is not None and drained.done():
                        await req.writer.abort()
                        return
                    await req.writer.comment()
                    continue
                read, reading = reading, None
                try:
                    message = read.result()
                except (UpstreamUnavailable, SessionGone, UpstreamRefused):
                    message = None
                if message is None:
                    await req.writer.abort()
                    return
                incoming = wire.classify(message)
                if isinstance(incoming, wire.Notification):
                    note = subscriptions.event(incoming, flags, uris, sid)
                    if note is not None:
                        await req.writer.notify(note)
                elif isinstance(incoming, wire.ServerRequest):
                    key = wire.request_key(incoming.id)
                    if key not in answered:
                        answered.add(key)
                        with contextlib.suppress(UpstreamUnavailable, SessionGone, UpstreamRefused):
                            await feed.post(wire.unsolicited_answer(incoming, declared, None))
        finally:
            if reading is not None:
                reading.cancel()
