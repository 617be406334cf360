"""The process's graceful shutdown, as the answers that never end by themselves see it.

On SIGTERM the server stops accepting and gives what is in flight up to
``listen.drain_seconds`` to finish. A ``subscriptions/listen`` stream never finishes by itself:
left alone it would hold the process for the whole drain, then be cut off. :class:`Draining` is
the one signal the app owns for it: begun when the server starts its graceful shutdown
(``mcp_edge.server.cli``), or when the app's lifespan ends (an ASGI server of another make,
``mcp_edge.Edge``). Every path that serves a listen stream waits for it beside its stream and,
once it is begun, ends the stream's body normally, without a response (the client listens
again, behind a load balancer on another replica); ordinary requests drain as before.
"""

from __future__ import annotations

import asyncio
import contextlib


class Draining:
    """Set once, when the process begins its graceful shutdown."""

    __slots__ = ("_future", "begun")

    def __init__(self) -> None:
        self.begun = False
        self._future: asyncio.Future[None] | None = None

    def begin(self) -> None:
        """Start draining (again: nothing more). From the loop's thread or any other, a signal
        handler's included: the waiters are woken through the loop."""
        if self.begun:
            return
        self.begun = True
        future = self._future
        if future is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits on it
                future.get_loop().call_soon_threadsafe(_finish, future)

    def future(self) -> asyncio.Future[None]:
        """Done once draining has begun: one future for every waiter on the running loop, to
        pass to ``asyncio.wait`` beside a stream (never to await or cancel)."""
        loop = asyncio.get_running_loop()
        future = self._future
        if future is None or future.get_loop() is not loop or future.cancelled():
            future = self._future = loop.create_future()
            if self.begun:
                future.set_result(None)
        return future


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
