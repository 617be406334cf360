"""A legacy session's standalone (GET) stream, read for as long as the session has it open.

SDK servers send there what they do not tie to a request: ``roots/list`` of their own (the npm
``server-everything`` 350 ms after a session starts, and in its ``get-roots-list``), and most
1.x servers' mid-call questions (FastMCP's ``ctx.session.create_message(...)`` and
``list_roots()`` take no related request id). What arrives goes:

* to the call in flight on the session, while one that may ask is (a session serves one request
  at a time, so it is the only one): it decides which are its questions (see
  :mod:`mcp_edge.upstream.legacy.questions`);
* otherwise, between calls or during a one-shot request, it is answered at once, as the manual's
  table says (:func:`wire.unsolicited_answer`), for the capabilities the session declared.

A request is handled once: its key goes into the session's ``answered``, which the call's
rounds share (and carry in their sealed state), so one an event store replays is neither asked
nor answered again. What waits to be taken is counted in the answer budget (kind ``bridge``,
as what the stream itself holds is): a message the budget has no room for ends the reading of
the stream (a warning is logged; the server's request goes unanswered, as on a stream that
broke). What a call had not taken when it ends is answered here too. Where a resumed
call must pick the stream up (:attr:`Standalone.resume_id`) is before the first message it was
handed and had not taken, so nothing is skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, MutableSet
from typing import Any, Protocol

from mcp_edge.edge.body import Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES
from mcp_edge.observability.logs import event
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.errors import (
    AnswerOverBudget,
    SessionGone,
    UpstreamRefused,
    UpstreamUnavailable,
)

Post = Callable[[dict[str, Any]], Awaitable[None]]
#: Messages handed to a call and not taken yet, at most: past that the stream is not read until
#: the call takes one (the server waits, as its connection's buffers fill).
MAX_HANDED = 64


class Stream(Protocol):
    """The standalone stream (``http_session.EventStream``)."""

    consumed_id: str | None
    before_last: str | None

    @property
    def last_size(self) -> int: ...

    async def next(self) -> tuple[str | None, Any] | None: ...

    def close(self) -> None: ...


class Standalone:
    def __init__(
        self,
        stream: Stream,
        *,
        post: Post,
        capabilities: dict[str, Any],
        answered: MutableSet[str],
        reservation: Reservation,
    ) -> None:
        self.stream = stream
        #: What waits in ``_handed`` (by item, and in all), counted here.
        self.reservation = reservation
        self._sizes: deque[int] = deque()
        self._waiting = 0
        self._post = post
        self._capabilities = capabilities
        self.answered = answered
        #: A call that may ask is in flight on the session: what arrives is its to read.
        self.attached = False
        #: Handed to the call and not taken yet: (resume point before it, event id, message).
        self._handed: deque[tuple[str | None, str | None, Any]] = deque()
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self.ended = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = asyncio.ensure_future(self._read())

    # ------------------------------------------------------------------ the call's side

    def attach(self) -> None:
        self.attached = True

    def detach(self) -> None:
        """The call is over: what it had not taken is answered here, as anything after it."""
        self.attached = False
        left = [message for _, _, message in self._handed]
        self._handed.clear()
        self._sizes.clear()
        self._count(0)
        self._room.set()
        if left:
            self._spawn(self._answer_all(left))

    def take(self) -> tuple[str | None, Any] | None:
        """The next message handed to the call, if one is waiting."""
        if not self._handed:
            return None
        _, ev_id, message = self._handed.popleft()
        self._count(self._waiting - self._sizes.popleft())
        self._room.set()
        return ev_id, message

    @property
    def handed(self) -> int:
        """How many messages wait for the call to take them."""
        return len(self._handed)

    async def wait(self) -> None:
        """Until a message is handed to the call, or the stream ends."""
        while not self._handed and not self.ended:
            self._arrived.clear()
            await self._arrived.wait()

    @property
    def resume_id(self) -> str | None:
        """Where a resumed call picks the stream up: everything up to it has been handled."""
        if self._handed:
            return self._handed[0][0]
        return self.stream.consumed_id

    # ------------------------------------------------------------------ reading

    async def _read(self) -> None:
        try:
            while True:
                while self.attached and len(self._handed) >= MAX_HANDED:
                    self._room.clear()
                    await self._room.wait()
                item = await self.stream.next()
                if item is None:
                    break
                if self.attached:
                    size = self.stream.last_size
                    self._count(self._waiting + size)
                    self._handed.append((self.stream.before_last, *item))
                    self._sizes.append(size)
                    self._arrived.set()
                else:
                    await self._answer(item[1])
        except (UpstreamUnavailable, UpstreamRefused):
            event(logging.DEBUG, "legacy session's standalone stream broke")
        except AnswerOverBudget:
            event(
                logging.WARNING,
                "legacy session's standalone stream not read further: answer budget spent",
            )
        finally:
            self.ended = True
            self._arrived.set()

    async def _answer_all(self, messages: list[Any]) -> None:
        for message in messages:
            await self._answer(message)

    async def _answer(self, message: Any) -> None:
        """A message no call reads: a request is answered now (notifications mean nothing here)."""
        incoming = wire.classify(message)
        if not isinstance(incoming, wire.ServerRequest):
            return
        key = wire.request_key(incoming.id)
        if key in self.answered:
            return  # asked or answered already: a replay, never a second answer
        self.answered.add(key)
        answer = wire.unsolicited_answer(incoming, self._capabilities, None)
        with contextlib.suppress(UpstreamUnavailable, UpstreamRefused, SessionGone):
            await self._post(answer)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _count(self, waiting: int) -> None:
        """``waiting`` bytes wait to be taken now; AnswerOverBudget when the budget has no room."""
        if not self.reservation.resize(waiting if waiting > UNCOUNTED_BYTES else 0):
            raise AnswerOverBudget
        self._waiting = waiting

    def close(self) -> None:
        self._reader.cancel()
        for task in list(self._tasks):
            task.cancel()
        self.stream.close()
        self.reservation.release()
