"""The process's draining signal (mcp_edge.edge.draining): one future per loop for every waiter,
done once draining begins, whether it began before or after the waiter looked."""

from __future__ import annotations

import asyncio

from mcp_edge.edge.draining import Draining


def test_a_waiter_is_woken_when_draining_begins_and_a_later_one_at_once():
    draining = Draining()

    async def go() -> None:
        first = draining.future()
        assert draining.future() is first and not first.done()
        done, _ = await asyncio.wait([first], timeout=0.05)
        assert not done
        asyncio.get_running_loop().call_later(0.01, draining.begin)
        await asyncio.wait_for(asyncio.shield(first), 5)
        draining.begin()  # again: nothing more
        assert draining.future().done()

    asyncio.run(go())
    assert draining.begun


def test_begun_before_any_loop_and_looked_at_from_another_loop():
    draining = Draining()

    async def look() -> bool:
        return draining.future().done()

    assert asyncio.run(look()) is False
    draining.begin()  # the first loop is closed: its future is nobody's
    assert asyncio.run(look()) is True


def test_a_waiter_that_cancels_the_future_does_not_end_the_others():
    draining = Draining()

    async def go() -> None:
        draining.future().cancel()  # (what no waiter should do)
        assert not draining.future().done()

    asyncio.run(go())
