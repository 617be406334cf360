"""A lease on one process of a stdio route for one request: exclusive for a call that may ask
the client (at most one runs on a process at a time), shared for the others."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_edge.edge.body import Reservation
from mcp_edge.upstream.legacy.http_session import NotSent
from mcp_edge.upstream.stdio.process import CallStream, StdioInstance


class StdioSession:
    """A lease on one process for one request (exclusive for a call that may ask the client)."""

    side = None
    standalone = None
    json_mode = False
    stateless = False
    initialized_here = True
    #: Nothing on a process's stdout names the call a server request is for.
    ties_requests = False

    def __init__(self, instance: StdioInstance, *, exclusive: bool) -> None:
        self.stream: CallStream | None = None
        self.instance = instance
        self.generation = instance.generation
        self.exclusive = exclusive
        self.endpoint = instance.endpoint
        self.session_id = f"{instance.index}.{instance.generation}"
        self.version = instance.version
        self.init_result = instance.init_result
        self.closed = False
        #: The server's requests handled for this lease's calls (never answered twice).
        self.answered: set[str] = set()

    @property
    def server_info(self) -> dict[str, Any] | None:
        info = self.init_result.get("serverInfo")
        return info if isinstance(info, dict) else None

    def _check(self) -> None:
        if self.instance.generation != self.generation or self.instance.state != "ready":
            raise NotSent  # (its process is gone: nothing goes to it any more)

    async def request(self, message: dict[str, Any], reservation: Reservation) -> CallStream:
        self._check()
        stream = self.instance.register(message, hold=self.exclusive, reservation=reservation)
        self.stream = stream
        try:
            await self.instance.write(message)
        except BaseException:
            stream.close()
            raise
        return stream

    async def post(self, message: dict[str, Any]) -> None:
        self._check()
        await self.instance.write(message)

    async def open_side(self, last_event_id: str | None = None, **_: Any) -> None:
        return None

    def expect_questions(self) -> None:
        return None  # the process's requests reach the lease holder (``process``)

    def end_questions(self) -> None:
        return None

    def drop_side(self) -> None:
        return None

    def release_lease(self) -> None:
        self.closed = True
        instance = self.instance
        if self.exclusive and instance.lease is self:
            instance.lease = None
            instance.holder = None
            instance.lease_freed.set()

    def suspend(self) -> None:
        """The call waits for its client's answer: it cannot ask anything meanwhile, so the
        process may run another call that may ask (its response still comes to this call)."""
        instance = self.instance
        if self.exclusive and instance.lease is self:
            instance.lease = None
            if instance.holder is self.stream:
                instance.holder = None
            instance.lease_freed.set()

    async def reacquire(self, timeout: float) -> None:
        """Take the process's lease back before the answer goes in (the call may ask again)."""
        instance = self.instance
        async with asyncio.timeout(timeout):
            while instance.lease is not None and instance.lease is not self:
                self._check()
                await instance.lease_freed.wait()
        self._check()
        instance.lease = self
        instance.lease_freed.clear()
        if self.stream is not None:
            instance.holder = self.stream

    async def close(self) -> None:
        self.release_lease()
