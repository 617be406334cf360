"""Coarse timers for the request path: arming and disarming is a dict operation, not a loop timer.

Every request sets bounds it almost never reaches (its body must arrive within 30 s, an MRTR
method's answer within 600 s, the client is watched for a disconnect after 20 ms). A loop timer
per bound costs an allocation, a timer start and a cancel each time; these bounds need no
millisecond precision. So timers are kept in buckets of :data:`TICK` seconds (a hashed wheel):
one loop timer sweeps the due buckets every tick while any timer is armed, and none runs when
nothing is. A timer fires between its time and one tick later, never before.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import weakref
from collections.abc import Callable

#: The wheel's resolution, in seconds.
TICK = 0.05

_log = logging.getLogger(__name__)


class Timer:
    """One armed coarse timer: :meth:`cancel` it as an ``asyncio.TimerHandle``."""

    __slots__ = ("_slot", "_wheel", "callback")

    def __init__(self, wheel: Wheel, slot: int, callback: Callable[[], object]) -> None:
        self._wheel = wheel
        self._slot = slot
        self.callback = callback

    def cancel(self) -> None:
        buckets = self._wheel._buckets
        bucket = buckets.get(self._slot)
        if bucket is not None:
            bucket.pop(self, None)
            if not bucket:
                del buckets[self._slot]


class Wheel:
    """The coarse timers of one event loop (:func:`wheel` gives the running loop's)."""

    __slots__ = ("_buckets", "_handle", "_loop", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: Slot number (time / TICK, rounded up) -> the timers due then (a dict kept as an
        #: ordered set: removal by identity is O(1)).
        self._buckets: dict[int, dict[Timer, None]] = {}
        #: The slot numbers in ``_buckets``, earliest first (emptied ones are skipped on the way).
        self._slots: list[int] = []
        self._handle: asyncio.TimerHandle | None = None

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback`` at loop time ``when``, or at most a tick later."""
        slot = -int(-when // TICK)
        timer = Timer(self, slot, callback)
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            heapq.heappush(self._slots, slot)
        bucket[timer] = None
        if self._handle is None:
            self._handle = self._loop.call_later(TICK, self._sweep)
        return timer

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return self.call_at(self._loop.time() + delay, callback)

    def _sweep(self) -> None:
        self._handle = None
        now = self._loop.time()
        slots, buckets = self._slots, self._buckets
        while slots and slots[0] * TICK <= now:
            bucket = buckets.pop(heapq.heappop(slots), None)
            if bucket is None:
                continue
            for timer in bucket:
                try:
                    timer.callback()
                except Exception:  # one timer's failure must not lose the others
                    _log.exception("timer callback failed")
        if buckets:
            self._handle = self._loop.call_later(TICK, self._sweep)
        else:
            slots.clear()


_current: tuple[asyncio.AbstractEventLoop, Wheel] | None = None


def wheel(loop: asyncio.AbstractEventLoop) -> Wheel:
    """The coarse timers of ``loop`` (the loop running the request path)."""
    global _current
    current = _current
    if current is not None and current[0] is loop:
        return current[1]
    found = _wheels.get(loop)
    if found is None:
        found = _wheels[loop] = Wheel(loop)
    _current = (loop, found)
    return found


_wheels: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Wheel] = weakref.WeakKeyDictionary()
