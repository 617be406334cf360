"""Parked calls: legacy calls held open on this replica while their client answers a question.

The upstream keeps running the tool (a legacy disconnect is not a cancellation, but the open
stream is where its result will come); the answer arrives on a later request, here or forwarded
from another replica. A parked call waits a bounded time, then is cancelled upstream and its
session ended, so nothing is held for a client that never comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp_edge.observability.logs import event
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.call import UpstreamCall


@dataclass(slots=True)
class ParkedCall:
    route: str
    principal_id: str
    call: UpstreamCall
    ticket: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    timer: asyncio.TimerHandle | None = None


class ParkingLot:
    """Every parked call of this process, bounded in number and in time."""

    def __init__(self, max_parked: int = 256) -> None:
        self.max_parked = max_parked
        self._calls: dict[str, ParkedCall] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.expired = 0
        #: Told the route of a call that left the lot on its own (waited too long), so the
        #: parked-calls gauge follows expiries too.
        self.on_expired: Callable[[str], None] | None = None

    def __len__(self) -> int:
        return len(self._calls)

    @property
    def full(self) -> bool:
        return len(self._calls) >= self.max_parked

    def park(self, call: ParkedCall, wait_seconds: float) -> str:
        """Hold ``call`` under its ticket for at most ``wait_seconds``."""
        if call.timer is not None:
            call.timer.cancel()
        call.timer = asyncio.get_running_loop().call_later(wait_seconds, self._expire, call.ticket)
        self._calls[call.ticket] = call
        return call.ticket

    def take(self, ticket: Any) -> ParkedCall | None:
        """The parked call for ``ticket``, removed from the lot; None if it is not (or no longer) here."""
        call = self._calls.pop(ticket, None) if isinstance(ticket, str) else None
        if call is not None and call.timer is not None:
            call.timer.cancel()
        return call

    def _expire(self, ticket: str) -> None:
        call = self._calls.pop(ticket, None)
        if call is None:
            return
        self.expired += 1
        if self.on_expired is not None:
            self.on_expired(call.route)
        event(logging.INFO, "parked call waited too long; cancelled upstream", route=call.route)
        self._background(abandon(call.call, "no answer in time"))

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for ticket in list(self._calls):
            call = self.take(ticket)
            if call is not None:
                self._background(abandon(call.call, "gateway shutting down"))
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._tasks), timeout=10.0)


async def abandon(call: UpstreamCall, reason: str) -> None:
    """Cancel a legacy call and end its session; never raises."""
    call.close()
    with contextlib.suppress(Exception):
        await call.session.post(wire.cancelled_notification(call.call_id, reason))
    await call.session.close()
