"""One fetch in flight per key: callers asking for the same key while a fetch runs wait for it
instead of starting their own (no stampede on the authorization server under load).

API (stable)::

    flights = SingleFlight(max_keys=1024)
    value = await flights.run(key, fetch)   # fetch: () -> Awaitable[V], run once per key at a time

The fetch runs as its own task: a caller that goes away (its request cancelled) does not cancel
it for the others, and its result or exception goes to every caller waiting then. At most
``max_keys`` fetches run at once; one more raises :class:`TooManyFlights` (the caller fails
closed). Within one process; replicas each run their own.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TooManyFlights(Exception):
    """As many different fetches as allowed are running already."""


class SingleFlight(Generic[K, V]):
    def __init__(self, *, max_keys: int = 1024) -> None:
        self.max_keys = max_keys
        self._flights: dict[K, asyncio.Task[V]] = {}
        #: Fetches started (the others joined one): tests and metrics read it.
        self.started = 0

    def __len__(self) -> int:
        return len(self._flights)

    async def run(self, key: K, fetch: Callable[[], Awaitable[V]]) -> V:
        task = self._flights.get(key)
        if task is None:
            if len(self._flights) >= self.max_keys:
                raise TooManyFlights(f"{self.max_keys} fetches in flight")
            task = asyncio.ensure_future(fetch())
            self.started += 1
            self._flights[key] = task
            task.add_done_callback(functools.partial(self._landed, key))
        return await asyncio.shield(task)

    def _landed(self, key: K, task: asyncio.Task[V]) -> None:
        if self._flights.get(key) is task:
            del self._flights[key]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter may have gone

    async def aclose(self) -> None:
        for task in list(self._flights.values()):
            task.cancel()
        self._flights.clear()
