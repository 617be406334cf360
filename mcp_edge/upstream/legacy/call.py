"""One legacy call in flight: the messages of its own stream, merged, for a call that may ask
the client, with what its session's standalone stream brings meanwhile (see
:mod:`mcp_edge.upstream.legacy.standalone`: while such a call is in flight, what the server
sends there is handed to it, and :mod:`mcp_edge.upstream.legacy.questions` says which of those
requests are its questions)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mcp_edge.observability.logs import event
from mcp_edge.upstream.legacy.http_session import EventStream, LegacyHttpSession, ResumedStream

#: (from the standalone stream?, SSE event id, message)
Item = tuple[bool, str | None, Any]


class UpstreamCall:
    def __init__(
        self,
        session: LegacyHttpSession,
        main: EventStream | ResumedStream,
        call_id: str,
        *,
        asks: bool = False,
    ) -> None:
        self.session = session
        self.main = main
        self.call_id = call_id
        #: A call that may ask the client: what the standalone stream brings meanwhile is its.
        self.asks = asks
        self._main_read: asyncio.Future[tuple[str | None, Any] | None] | None = None

    @property
    def resumable(self) -> bool:
        """Can another connection pick this call up where it stands (the server keeps events)?
        A standalone stream that has carried nothing yet needs no resume point: it is opened
        afresh before the answers are sent, so nothing the server sends after them is missed."""
        side = self.session.side
        return (
            self.main.has_event_ids
            and self.main.consumed_id is not None
            and (side is None or side.has_event_ids or not side.seen_any)
        )

    async def next(self) -> Item | None:
        """The next message from either stream; None when the call's own stream has ended."""
        while True:
            side = self.session.standalone if self.asks else None
            if side is not None:
                taken = side.take()
                if taken is not None:
                    return (True, *taken)
            if self._main_read is None:
                self._main_read = asyncio.ensure_future(self.main.next())
            waiting: list[asyncio.Future[Any]] = [self._main_read]
            side_wait = None
            if side is not None and not side.ended:
                side_wait = asyncio.ensure_future(side.wait())
                waiting.append(side_wait)
            try:
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if side_wait is not None and not side_wait.done():
                    side_wait.cancel()
            if self._main_read in done:
                read, self._main_read = self._main_read, None
                item = read.result()
                return None if item is None else (False, *item)
            if side is not None and side.ended and not side.handed:
                event(logging.DEBUG, "legacy session's standalone stream ended")
                self.session.drop_side()

    def close(self) -> None:
        """Drop the call's stream (the session and its standalone stream stay with the session,
        which answers from now on what the server sends there)."""
        if self.asks:
            self.session.end_questions()
        if self._main_read is not None:
            read, self._main_read = self._main_read, None
            read.cancel()
            with contextlib.suppress(BaseException):
                if read.done() and not read.cancelled():
                    read.exception()
        self.main.close()
