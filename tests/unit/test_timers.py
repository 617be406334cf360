"""mcp_edge.edge.timers: coarse timers fire no earlier than asked, at most a tick later, and cost
no loop timer while nothing is armed."""

from __future__ import annotations

import asyncio

import pytest

from mcp_edge.edge.timers import TICK, wheel

pytestmark = pytest.mark.timeout(10)


async def test_a_timer_fires_not_before_its_time_and_within_a_tick() -> None:
    loop = asyncio.get_running_loop()
    fired: list[float] = []
    when = loop.time() + 0.12
    wheel(loop).call_at(when, lambda: fired.append(loop.time()))
    while not fired and loop.time() < when + 5:
        await asyncio.sleep(0.01)
    assert len(fired) == 1
    # A tick late at most on a quiet machine; the slack beyond it is a loaded machine's.
    assert when <= fired[0] <= when + TICK + 1.0  # never early


async def test_a_cancelled_timer_never_fires_and_others_in_its_slot_do() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    w = wheel(loop)
    when = loop.time() + 0.05
    first = w.call_at(when, lambda: fired.append("first"))
    w.call_at(when, lambda: fired.append("second"))
    first.cancel()
    first.cancel()  # twice is harmless
    await asyncio.sleep(0.05 + 3 * TICK)
    assert fired == ["second"]


async def test_one_failing_callback_does_not_lose_the_others() -> None:
    loop = asyncio.get_running_loop()
    fired: list[int] = []

    def boom() -> None:
        raise RuntimeError("boom")

    w = wheel(loop)
    when = loop.time() + 0.02
    w.call_at(when, boom)
    w.call_at(when, lambda: fired.append(1))
    await asyncio.sleep(0.02 + 3 * TICK)
    assert fired == [1]


async def test_the_sweeper_stops_when_nothing_is_armed() -> None:
    loop = asyncio.get_running_loop()
    w = wheel(loop)
    w.call_later(0.01, lambda: None).cancel()
    await asyncio.sleep(3 * TICK)
    assert w._handle is None and not w._buckets  # no loop timer left behind


async def test_each_loop_has_its_own_wheel() -> None:
    loop = asyncio.get_running_loop()
    assert wheel(loop) is wheel(loop)
    other = asyncio.new_event_loop()
    try:
        assert wheel(other) is not wheel(loop)
    finally:
        other.close()


async def test_arming_and_disarming_in_one_slot_queues_it_once() -> None:
    """Requests arm and disarm their bounds in the same slot thousands of times a second: the
    slot is queued for the sweep once, however often its bucket empties and fills again."""
    loop = asyncio.get_running_loop()
    w = wheel(loop)
    when = loop.time() + 30
    for _ in range(1000):
        w.call_at(when, lambda: None).cancel()
    assert len(w._slots) == 1


async def test_an_object_can_be_its_own_entry() -> None:
    """What the request path arms (a deadline, a disconnect watch) is its own entry: no timer
    object per use. Disarmed, it never fires; armed, it fires once."""
    loop = asyncio.get_running_loop()
    w = wheel(loop)
    fired: list[str] = []

    class Entry:
        def __init__(self, name: str) -> None:
            self.name = name

        def callback(self) -> None:
            fired.append(self.name)

    kept, dropped = Entry("kept"), Entry("dropped")
    when = loop.time() + 0.02
    w.arm(kept, when)
    w.disarm(dropped, w.arm(dropped, when))
    while not fired and loop.time() < when + 5:  # a loaded machine may sweep late
        await asyncio.sleep(0.01)
    await asyncio.sleep(2 * TICK)
    assert fired == ["kept"]
