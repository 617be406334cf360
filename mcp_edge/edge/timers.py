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
from typing import Any, Protocol

#: The wheel's resolution, in seconds.
TICK = 0.05

_log = logging.getLogger(__name__)


class Timer:
    """One armed coarse timer: :meth:`cancel` it as an ``asyncio.TimerHandle``."""

    __slots__ = ("_slot", "_wheel", "callback")

    def __init__(self, wheel: Wheel, callback: Callable[[], object]) -> None:
        self._wheel = wheel
        self._slot = 0
        self.callback = callback

    def cancel(self) -> None:
        self._wheel.disarm(self, self._slot)


class Entry(Protocol):
    """What the wheel keeps: anything with a ``callback()`` (a :class:`Timer`, or an object that
    is its own timer and saves the allocation, as ``mcp_edge.edge.deadline.Deadline`` does)."""

    def callback(self) -> object: ...


class Wheel:
    """The coarse timers of one event loop (:func:`wheel` gives the running loop's)."""

    __slots__ = ("_buckets", "_handle", "_loop", "_queued", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: Slot number (time / TICK, rounded up) -> the entries due then (a dict kept as an
        #: ordered set: removal by identity is O(1)).
        self._buckets: dict[int, dict[Any, None]] = {}
        #: The slot numbers queued for a sweep, earliest first, each once (a slot whose bucket
        #: emptied stays queued until it is due, and is skipped then).
        self._slots: list[int] = []
        self._queued: set[int] = set()
        self._handle: asyncio.TimerHandle | None = None

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Call ``callback`` at loop time ``when``, or at most a tick later."""
        timer = Timer(self, callback)
        timer._slot = self.arm(timer, when)
        return timer

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        return self.call_at(self._loop.time() + delay, callback)

    def arm(self, entry: Entry, when: float) -> int:
        """Call ``entry.callback()`` at loop time ``when``, or at most a tick later; the slot to
        :meth:`disarm` it with."""
        slot = -int(-when // TICK)
        bucket = self._buckets.get(slot)
        if bucket is None:
            bucket = self._buckets[slot] = {}
            if slot not in self._queued:
                self._queued.add(slot)
                heapq.heappush(self._slots, slot)
        bucket[entry] = None
        if self._handle is None:
            self._handle = self._loop.call_later(TICK, self._sweep)
        return slot

    def disarm(self, entry: Entry, slot: int) -> None:
        """Forget ``entry``, armed in ``slot`` (nothing when it already fired or was disarmed)."""
        buckets = self._buckets
        bucket = buckets.get(slot)
        if bucket is not None:
            bucket.pop(entry, None)
            if not bucket:
                del buckets[slot]

    def _sweep(self) -> None:
        self._handle = None
        now = self._loop.time()
        slots, buckets = self._slots, self._buckets
        while slots and slots[0] * TICK <= now:
            slot = heapq.heappop(slots)
            self._queued.discard(slot)
            bucket = buckets.pop(slot, None)
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
            self._queued.clear()


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
