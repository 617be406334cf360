"""A deadline for the task running a block: ``asyncio.timeout`` without its per-use overhead.

The request path sets two per request (the body must arrive in time; an MRTR method's final
response must come in time), and ``asyncio.timeout``'s async context manager costs about twice
a plain timer. Same semantics: when the deadline passes, the task is cancelled and the block
raises ``TimeoutError``; a cancellation from elsewhere stays a cancellation. The timer is a
coarse one (mcp_edge.edge.timers): it fires at most one tick (50 ms) after the deadline, which
these bounds (seconds to minutes) do not notice, and arming it costs a dict entry (the deadline
is its own entry in the wheel: no timer object, no bound method per use).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from mcp_edge.edge.timers import Wheel, wheel


class Deadline:
    """``with Deadline(seconds) as d:`` inside a task. ``d.reschedule(when)`` moves it (loop time),
    ``d.expired()`` says whether it fired."""

    __slots__ = (
        "_cancelling",
        "_delay",
        "_expired",
        "_given",
        "_loop",
        "_slot",
        "_soon",
        "_task",
        "_wheel",
        "_when",
    )

    def __init__(self, delay: float | None, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """``loop``: the running loop, when the caller has it at hand (else it is looked up)."""
        self._delay = delay
        self._given = loop
        self._when: float | None = None
        #: The wheel slot the deadline is armed in (None: not in the wheel), or the loop handle
        #: when it is due at once.
        self._slot: int | None = None
        self._soon: asyncio.Handle | None = None
        self._expired = False
        self._cancelling = 0

    def __enter__(self) -> Deadline:
        loop = self._given
        if loop is None:
            loop = asyncio.get_running_loop()
        self._loop = loop
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._wheel: Wheel = wheel(loop)
        if self._delay is not None:
            now = loop.time()
            self._arm(now + self._delay, now)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._disarm()
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
        self._disarm()
        if when is None:
            self._when = None
            return
        self._arm(when, self._loop.time())

    def _arm(self, when: float, now: float) -> None:
        """Arm the (disarmed) deadline for loop time ``when``; ``now`` is the loop's time."""
        self._when = when
        if when <= now:
            self._soon = self._loop.call_soon(self.callback)
        else:
            self._slot = self._wheel.arm(self, when)

    def _disarm(self) -> None:
        if self._slot is not None:
            self._wheel.disarm(self, self._slot)
            self._slot = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None

    def callback(self) -> None:
        """Called by the wheel (or the loop) when the deadline is due."""
        self._slot = self._soon = None
        if self._expired:
            return
        self._expired = True
        self._task.cancel()
