"""A deadline for the task running a block: ``asyncio.timeout`` without its per-use overhead.

The request path sets two per request (the body must arrive in time; an MRTR method's final
response must come in time), and ``asyncio.timeout``'s async context manager costs about twice
a plain timer. Same semantics: when the deadline passes, the task is cancelled and the block
raises ``TimeoutError``; a cancellation from elsewhere stays a cancellation.
"""

from __future__ import annotations

import asyncio
from types import TracebackType


class Deadline:
    """``with Deadline(seconds) as d:`` inside a task. ``d.reschedule(when)`` moves it (loop time),
    ``d.expired()`` says whether it fired."""

    __slots__ = ("_cancelling", "_delay", "_expired", "_handle", "_loop", "_task", "_when")

    def __init__(self, delay: float | None) -> None:
        self._delay = delay
        self._when: float | None = None
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._expired = False
        self._cancelling = 0

    def __enter__(self) -> Deadline:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._delay is not None:
            self.reschedule(self._loop.time() + self._delay)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (
            self._expired
            and exc_type is asyncio.CancelledError
            and self._task.uncancel() <= self._cancelling
        ):
            raise TimeoutError from exc

    def when(self) -> float | None:
        return self._when

    def expired(self) -> bool:
        return self._expired

    def reschedule(self, when: float | None) -> None:
        if self._expired:
            raise RuntimeError("the deadline already passed")
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = when
        if when is None:
            return
        if when <= self._loop.time():
            self._handle = self._loop.call_soon(self._fire)
        else:
            self._handle = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._expired = True
        self._task.cancel()
