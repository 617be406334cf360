"""One legacy call in flight: the messages of its own stream, merged with those of its session's
standalone stream. What the server sends there is not tied to any call (SDK servers send
``roots/list`` there on their own, e.g. right after a session starts): it is read while the call
runs so that the bridge answers it, and a server waiting for that answer is not left hanging; it
never becomes a question of the call (see :mod:`mcp_edge.upstream.legacy.driver`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mcp_edge.observability.logs import event
from mcp_edge.upstream.legacy.http_session import (
    EventStream,
    LegacyHttpSession,
    ResumedStream,
    UpstreamUnavailable,
)

#: (from the standalone stream?, SSE event id, message)
Item = tuple[bool, str | None, Any]


class UpstreamCall:
    def __init__(
        self, session: LegacyHttpSession, main: EventStream | ResumedStream, call_id: str
    ) -> None:
        self.session = session
        self.main = main
        self.call_id = call_id
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
            if self._main_read is None:
                self._main_read = asyncio.ensure_future(self.main.next())
            side_read = self.session.side_reader()
            waiting = [self._main_read] if side_read is None else [self._main_read, side_read]
            done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            if self._main_read in done:
                read, self._main_read = self._main_read, None
                item = read.result()
                return None if item is None else (False, *item)
            assert side_read is not None
            self.session.side_read = None
            try:
                side_item = side_read.result()
            except UpstreamUnavailable:
                side_item = None
            if side_item is None:
                event(logging.DEBUG, "legacy session's standalone stream ended")
                self.session.drop_side()
                continue
            return (True, *side_item)

    def close(self) -> None:
        """Drop the call's stream (the session and its standalone stream stay with the session)."""
        if self._main_read is not None:
            read, self._main_read = self._main_read, None
            read.cancel()
            with contextlib.suppress(BaseException):
                if read.done() and not read.cancelled():
                    read.exception()
        self.main.close()
