"""Reusable legacy sessions for one-shot calls.

A legacy session is opened with one caller's capabilities and identity (``initialize`` declares
the capabilities for the whole session; the upstream may tie what it returns to the session or to
the identity headers the gateway sends). So a session is only ever reused under the same key:
the endpoint, the principal, the capabilities and client info declared, the log level and the
upstream headers the gateway adds for that caller. Two callers never share a session, and one
caller never gets a session opened with capabilities it did not declare. A session serves one
request at a time; one that turns into a multi-round flow leaves the pool for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar


class Closable(Protocol):
    async def close(self) -> None: ...


PoolKey = tuple[str, ...]
S = TypeVar("S", bound=Closable)


class SessionPool(Generic[S]):
    def __init__(
        self,
        *,
        idle_seconds: float = 60.0,
        max_idle: int = 64,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_seconds = idle_seconds
        self.max_idle = max_idle
        self._clock = clock
        self._idle: dict[PoolKey, list[tuple[S, float]]] = {}
        self._count = 0
        self._closing: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.opened = 0
        self.reused = 0

    @property
    def idle(self) -> int:
        return self._count

    async def acquire(self, key: PoolKey, create: Callable[[], Awaitable[S]]) -> S:
        """An idle session for ``key`` (the most recently used), or a new one."""
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_forever())
        now = self._clock()
        entries = self._idle.get(key)
        while entries:
            session, since = entries.pop()
            self._count -= 1
            if not entries:
                del self._idle[key]
            if now - since < self.idle_seconds:
                self.reused += 1
                return session
            self.discard(session)
        session = await create()
        self.opened += 1
        return session

    def release(self, key: PoolKey, session: S) -> None:
        """Give a healthy session back after a request completed on it."""
        self.sweep()
        if self._count >= self.max_idle:
            self.discard(session)
            return
        self._idle.setdefault(key, []).append((session, self._clock()))
        self._count += 1

    def discard(self, session: S) -> None:
        """Close a session in the background (DELETE); nothing waits for it."""
        task = asyncio.ensure_future(session.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def sweep(self) -> None:
        """Close sessions idle for longer than ``idle_seconds``."""
        now = self._clock()
        for key in list(self._idle):
            entries = self._idle[key]
            fresh = [(s, t) for s, t in entries if now - t < self.idle_seconds]
            for session, since in entries:
                if now - since >= self.idle_seconds:
                    self.discard(session)
            self._count -= len(entries) - len(fresh)
            if fresh:
                self._idle[key] = fresh
            else:
                del self._idle[key]

    async def _sweep_forever(self) -> None:
        """Idle sessions end (DELETE) on time even when no request comes to notice them."""
        while True:
            await asyncio.sleep(max(self.idle_seconds / 2, 0.05))
            self.sweep()

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for entries in self._idle.values():
            for session, _ in entries:
                self.discard(session)
        self._idle.clear()
        self._count = 0
        if self._closing:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._closing), timeout=10.0)
