"""In-process single-use store, for a gateway running as one replica.

Replicas do not share it: behind a balancer a replayed state can land on a replica that has not
seen it. Use the Redis store there.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from mcp_edge.core.seal import StateRejected
from mcp_edge.store.base import StoreUnavailable


class MemoryStore:
    """A bounded set of used ids; expired ids are swept on every write (amortised O(log n))."""

    def __init__(
        self, *, max_entries: int = 1_000_000, clock: Callable[[], float] = time.time
    ) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._expiry: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []

    def __len__(self) -> int:
        return len(self._expiry)

    def _sweep(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            expires_at, jti = heapq.heappop(heap)
            if self._expiry.get(jti) == expires_at:
                del self._expiry[jti]

    async def consume(self, jti: str, expires_at: int) -> None:
        now = self.clock()
        self._sweep(now)
        if jti in self._expiry:
            raise StateRejected("replayed")
        if len(self._expiry) >= self.max_entries:
            # Evicting a live id would let its state be replayed: refuse instead (fail closed).
            raise StoreUnavailable("single-use store is full")
        self._expiry[jti] = expires_at
        heapq.heappush(self._heap, (expires_at, jti))

    async def aclose(self) -> None:
        self._expiry.clear()
        self._heap.clear()
