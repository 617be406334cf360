"""One fetch in flight per key."""

from __future__ import annotations

import asyncio

import pytest

from mcp_edge.identity.flight import SingleFlight, TooManyFlights


async def test_concurrent_callers_share_one_fetch():
    flights: SingleFlight[str, int] = SingleFlight()
    release = asyncio.Event()
    calls = 0

    async def fetch() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return 42

    waiters = [asyncio.ensure_future(flights.run("k", fetch)) for _ in range(50)]
    other = asyncio.ensure_future(flights.run("other", fetch))
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(*waiters) == [42] * 50
    assert await other == 42
    assert calls == 2 and flights.started == 2 and len(flights) == 0


async def test_a_failure_reaches_every_waiter_and_the_next_call_fetches_again():
    flights: SingleFlight[str, int] = SingleFlight()
    gate = asyncio.Event()

    async def failing() -> int:
        await gate.wait()
        raise RuntimeError("down")

    waiters = [asyncio.ensure_future(flights.run("k", failing)) for _ in range(3)]
    await asyncio.sleep(0)
    gate.set()
    for result in await asyncio.gather(*waiters, return_exceptions=True):
        assert isinstance(result, RuntimeError)

    async def ok() -> int:
        return 1

    assert await flights.run("k", ok) == 1


async def test_a_cancelled_caller_does_not_cancel_the_fetch_for_the_others():
    flights: SingleFlight[str, int] = SingleFlight()
    gate = asyncio.Event()

    async def fetch() -> int:
        await gate.wait()
        return 7

    first = asyncio.ensure_future(flights.run("k", fetch))
    second = asyncio.ensure_future(flights.run("k", fetch))
    await asyncio.sleep(0)
    first.cancel()
    gate.set()
    assert await second == 7
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_bounded_number_of_flights():
    flights: SingleFlight[int, int] = SingleFlight(max_keys=2)
    gate = asyncio.Event()

    async def fetch() -> int:
        await gate.wait()
        return 0

    running = [asyncio.ensure_future(flights.run(n, fetch)) for n in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(TooManyFlights):
        await flights.run(3, fetch)
    gate.set()
    await asyncio.gather(*running)
