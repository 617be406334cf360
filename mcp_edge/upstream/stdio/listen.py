"""``subscriptions/listen`` on a stdio route: what the route's processes push on their own.

A process is one legacy session shared by every caller, and its list changes and resource
updates are the same for all of them: each listen stream gets a listener on every process of the
route that is running when it starts (``StdioInstance._dispatch`` hands each such notification to
every listener). A resource URI is subscribed to once per process, however many streams want it
(counted per process and process generation), and unsubscribed when the last of them ends. A
process that exits ends the streams listening to it (abruptly: the client listens again, and the
new process is subscribed afresh).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Protocol

from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.http_session import (
    AnswerOverBudget,
    UpstreamBusy,
    UpstreamUnavailable,
)

#: How long a ``resources/subscribe`` may take before the URI is left out of the stream.
SUBSCRIBE_TIMEOUT = 10.0
#: Notifications queued for one listener at most (a client that does not read loses the rest:
#: they only say "this changed", and the next one says it again).
LISTEN_BACKLOG = 256


class Stream(Protocol):
    call_id: str

    async def next(self) -> tuple[str | None, Any] | None: ...

    def close(self) -> None: ...


class Instance(Protocol):
    """What the feed uses of a process slot (``process.StdioInstance``)."""

    generation: int
    state: str
    init_result: dict[str, Any]
    #: (generation, uri) -> how many listen streams want it subscribed.
    subscribed: dict[tuple[int, str], int]

    def listen(self) -> Stream: ...

    def unlisten(self, stream: Stream) -> None: ...

    def register(
        self, message: dict[str, Any], *, hold: bool, reservation: Reservation
    ) -> Stream: ...

    async def write(self, message: dict[str, Any]) -> None: ...


class StdioFeed:
    def __init__(self, instances: list[Instance], budget: AnswerBudget | None = None) -> None:
        self.instances = instances
        #: The process's answer pool (a ``resources/subscribe`` answer is read within it).
        self.budget = budget
        self.streams: list[tuple[Instance, Stream]] = []
        self._subscribed: list[tuple[Instance, tuple[int, str]]] = []
        self._reads: dict[asyncio.Future[Any], Stream] = {}

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.instances[0].init_result.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def server_info(self) -> dict[str, Any] | None:
        info = self.instances[0].init_result.get("serverInfo")
        return info if isinstance(info, dict) else None

    async def open(self) -> bool:
        self.streams = [(instance, instance.listen()) for instance in self.instances]
        return True

    def hold_in(self, reservation: Reservation) -> None:
        return None  # (what a process's listener queues is small: see process._listen_note)

    async def subscribe(self, uri: str) -> bool:
        accepted = True
        for instance, _ in self.streams:
            key = (instance.generation, uri)
            count = instance.subscribed.get(key, 0)
            instance.subscribed[key] = count + 1
            if count == 0 and not await self._ask(instance, "resources/subscribe", uri):
                instance.subscribed[key] -= 1
                if not instance.subscribed[key]:
                    del instance.subscribed[key]
                accepted = False
                continue
            self._subscribed.append((instance, key))
        return accepted

    async def _ask(self, instance: Instance, method: str, uri: str) -> bool:
        request_id = wire.new_id()
        message = wire.request_message(request_id, method, {"uri": uri})
        own = Reservation(self.budget, kind="bridge")
        try:
            stream = instance.register(message, hold=False, reservation=own)
        except UpstreamBusy:
            return False
        try:
            async with asyncio.timeout(SUBSCRIBE_TIMEOUT):
                await instance.write(message)
                while (item := await stream.next()) is not None:
                    incoming = wire.classify(item[1])
                    if isinstance(incoming, wire.Response):
                        return incoming.error is None
        except (TimeoutError, UpstreamUnavailable, AnswerOverBudget):
            return False
        finally:
            stream.close()
            own.release()
        return False

    async def next(self) -> Any | None:
        if not self.streams:
            return None
        reading = set(self._reads.values())
        for _, stream in self.streams:
            if stream not in reading:
                self._reads[asyncio.ensure_future(stream.next())] = stream
        done, _ = await asyncio.wait(self._reads, return_when=asyncio.FIRST_COMPLETED)
        read = done.pop()
        del self._reads[read]
        try:
            item = read.result()
        except UpstreamUnavailable:
            return None  # its process exited, and with it what it was subscribed to
        return None if item is None else item[1]

    async def post(self, message: dict[str, Any]) -> None:
        return None  # a process's requests are answered where they arrive (``_dispatch``)

    async def close(self) -> None:
        for read in self._reads:
            read.cancel()
        self._reads.clear()
        for instance, stream in self.streams:
            instance.unlisten(stream)
        self.streams = []
        for instance, key in self._subscribed:
            left = instance.subscribed.get(key, 0) - 1
            if left > 0:
                instance.subscribed[key] = left
                continue
            instance.subscribed.pop(key, None)
            if key[0] == instance.generation and instance.state == "ready":
                # Nobody waits for the answer (no call has this id: it is dropped).
                message = wire.request_message(
                    wire.new_id(), "resources/unsubscribe", {"uri": key[1]}
                )
                with contextlib.suppress(UpstreamUnavailable):
                    await instance.write(message)
        self._subscribed = []
