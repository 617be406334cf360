"""mcp_edge.edge.deadline: the request path's cheaper ``asyncio.timeout``, with the same meaning."""

from __future__ import annotations

import asyncio

import pytest

from mcp_edge.edge.deadline import Deadline

pytestmark = pytest.mark.timeout(10)


async def test_passing_the_deadline_raises_timeout_error() -> None:
    with pytest.raises(TimeoutError), Deadline(0.05) as d:
        await asyncio.sleep(5)
    assert d.expired()


async def test_work_done_in_time_is_untouched() -> None:
    with Deadline(5) as d:
        await asyncio.sleep(0.01)
    assert not d.expired()
    await asyncio.sleep(0)  # the timer is gone: nothing cancels this task later


async def test_no_deadline() -> None:
    with Deadline(None) as d:
        await asyncio.sleep(0.01)
    assert d.when() is None and not d.expired()


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    async def guarded() -> None:
        with Deadline(5):
            await asyncio.sleep(5)

    task = asyncio.ensure_future(guarded())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_reschedule_shortens_and_extends() -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError), Deadline(5) as d:
        d.reschedule(loop.time() + 0.05)
        await asyncio.sleep(5)
    started = loop.time()
    with Deadline(0.05) as d:
        d.reschedule(loop.time() + 5)
        await asyncio.sleep(0.1)
    assert not d.expired() and loop.time() - started >= 0.1
    with pytest.raises(TimeoutError), Deadline(5) as d:
        d.reschedule(loop.time() - 1)  # already past: fires at once
        await asyncio.sleep(5)


async def test_the_task_can_be_cancelled_again_after_an_expired_deadline() -> None:
    """The deadline's own cancellation is taken back (uncancel), so later ones still work."""
    with pytest.raises(TimeoutError), Deadline(0.01):
        await asyncio.sleep(5)
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
