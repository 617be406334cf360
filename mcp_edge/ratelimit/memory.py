"""Moving-window budgets in the process's own memory, without I/O.

The exact moving window of ``limits`` (``moving-window`` strategy on its memory storage), kept
natively: a request of cost ``n`` fits a budget of ``N`` per ``w`` seconds when the units spent in
the last ``w`` seconds (those spent at ``t > now - w``) plus ``n`` are at most ``N``. Several budgets
are all or nothing: nothing is spent unless every one has room. One event loop owns the windows,
and nothing here awaits, so a look and the spend that follows cannot interleave with another
request: no lock, no timeout.

:class:`FirstUses` answers whether a key (an MRTR retry's state) is presented for the first time
within its time to live, the same way.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from mcp_edge.ratelimit.rules import Check

#: How often windows nobody spent from lately are dropped.
SWEEP_SECONDS = 5.0


class _Window:
    """One key's spends in its window: (time, units), oldest first, and their sum."""

    __slots__ = ("seconds", "spent", "units")

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.spent: deque[tuple[float, int]] = deque()
        self.units = 0

    def count(self, now: float) -> int:
        """Units spent in the window ending at ``now`` (older spends are dropped)."""
        spent = self.spent
        cutoff = now - self.seconds
        while spent and spent[0][0] <= cutoff:
            self.units -= spent.popleft()[1]
        return self.units


class MovingWindows:
    """Every budget key's moving window (see the module docstring)."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, sweep_seconds: float = SWEEP_SECONDS
    ) -> None:
        self.clock = clock
        self.sweep_seconds = sweep_seconds
        self._windows: dict[tuple[Any, ...], _Window] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._windows)

    def spend(self, checks: list[Check]) -> Check | None:
        """Spend every check's cost; return the first check over its budget (then nothing is
        spent), or None when all had room."""
        now = self.clock()
        if now >= self._next_sweep:
            self._sweep(now)
        windows = self._windows
        found = []
        for c in checks:
            item = c.budget.item
            key = (c.identifiers, item.amount, item.multiples, item.GRANULARITY.name)
            window = windows.get(key)
            if window is None:
                window = windows[key] = _Window(item.get_expiry())
            if window.count(now) + c.cost > item.amount:
                return c
            found.append(window)
        for c, window in zip(checks, found, strict=True):
            window.spent.append((now, c.cost))
            window.units += c.cost
        return None

    def reset_at(self, check: Check) -> float:
        """When ``check``'s budget has room for one more unit: when the oldest spend still in
        its window leaves it (a full window from now when nothing is spent)."""
        now = self.clock()
        item = check.budget.item
        window = self._windows.get(
            (check.identifiers, item.amount, item.multiples, item.GRANULARITY.name)
        )
        if window is None or not window.count(now):
            return now + item.get_expiry()
        return window.spent[0][0] + window.seconds

    def _sweep(self, now: float) -> None:
        """Drop the windows whose every spend has left them (the memory of idle callers)."""
        self._next_sweep = now + self.sweep_seconds
        idle = [
            k for k, w in self._windows.items() if not w.spent or w.spent[-1][0] <= now - w.seconds
        ]
        for k in idle:
            del self._windows[k]


class FirstUses:
    """Keys presented, each kept until its time to live is over: a key presented again within it
    is not a first use (``limits``' counter with an expiry, read as "was it 1?")."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, sweep_seconds: float = SWEEP_SECONDS
    ) -> None:
        self.clock = clock
        self.sweep_seconds = sweep_seconds
        self._until: dict[str, float] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._until)

    def first(self, key: str, ttl_seconds: float) -> bool:
        """True the first time ``key`` is presented within ``ttl_seconds`` of that time."""
        now = self.clock()
        if now >= self._next_sweep:
            self._next_sweep = now + self.sweep_seconds
            self._until = {k: t for k, t in self._until.items() if t > now}
        until = self._until.get(key)
        if until is not None and until > now:
            return False
        self._until[key] = now + ttl_seconds
        return True
