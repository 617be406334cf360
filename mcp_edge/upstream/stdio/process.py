"""One process slot of a stdio route: the process running in it now (started in its sandbox,
initialized, restarted with backoff when it dies, stopped with its whole tree), and the
messages it writes, dispatched to the requests in flight on it (:class:`CallStream`).

A question the server asks mid-call carries nothing that names the call, so the server's
requests and log messages go to the call holding the process's lease (the bridge then tells
which of those requests are the call's own); one sent while no call holds it is answered here.
Progress tokens are rewritten per call. List changes and resource updates go to every
``subscriptions/listen`` stream listening to the process (:mod:`mcp_edge.upstream.stdio.listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from typing import Any

import orjson

from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import subscriptions, wire
from mcp_edge.upstream.legacy.http_session import (
    AnswerOverBudget,
    NotSent,
    UpstreamBusy,
    UpstreamUnavailable,
)
from mcp_edge.upstream.stdio import containment, sandbox
from mcp_edge.upstream.stdio.listen import LISTEN_BACKLOG
from mcp_edge.upstream.stdio.spec import StdioSpec

_EXITED = object()
#: In a call's queue instead of a message: holding it would have gone over the answer budget.
_OVER_BUDGET = object()
#: What a listen stream's notification keeps of what the process wrote (its method, and its
#: URI if that is one a subscription may name): the rest is never relayed.
_LISTEN_URI_CHARS = subscriptions.MAX_URI_CHARS
#: How long a stop waits for a process's run to clean up after it (its private directory).
STOP_CLEANUP_SECONDS = 5.0
_STDERR_LINE_CHARS = 2000


class CallStream:
    """The messages of one request on a shared process: its response and, for the call holding
    the lease, the server's requests and log messages.

    What waits in its queue (and the message read last, until the next read: its reader's) is
    counted in ``reservation``, the request's share of the answer budget (past the first
    ``UNCOUNTED_BYTES``): a message the budget has no room for is not queued, and the request
    reads :class:`AnswerOverBudget` instead (nothing more is queued for it)."""

    has_event_ids = False
    consumed_id: str | None = None
    last_event_id: str | None = None
    seen_any = False
    json = False
    sse = False

    def __init__(
        self,
        instance: StdioInstance,
        call_id: str,
        progress: tuple[Any, Any] | None,
        reservation: Reservation,
    ) -> None:
        self.instance = instance
        self.call_id = call_id
        self.progress = progress  # (upstream token, client's token)
        self.queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.finished = False
        #: The request's share of the answer budget (a parked call's next request's, once it
        #: is read for that one).
        self.reservation = reservation
        self._queued = 0
        self._last = 0
        self._refused = False

    def offer(self, message: Any, size: int) -> None:
        """Queue ``message`` (``size`` bytes as the process wrote it), counted."""
        if self._refused:
            return
        held = self._queued + self._last + size
        if not self.reservation.resize(held if held > UNCOUNTED_BYTES else 0):
            self._refused = True
            self.queue.put_nowait((0, _OVER_BUDGET))
            return
        self._queued += size
        self.queue.put_nowait((size, message))

    def end(self) -> None:
        """The process exited: the request reads that after what was queued before."""
        self.queue.put_nowait((0, _EXITED))

    async def next(self) -> tuple[str | None, Any] | None:
        if self.finished:
            return None
        if self._last:
            self._last = 0
            self._count()
        size, item = await self.queue.get()
        if item is _EXITED:
            self.finished = True
            raise UpstreamUnavailable("exited")
        if item is _OVER_BUDGET:
            self.finished = True
            raise AnswerOverBudget
        self._queued -= size
        self._last = size
        self._count()
        return None, item

    def _count(self) -> None:
        held = self._queued + self._last
        self.reservation.resize(held if held > UNCOUNTED_BYTES else 0)  # (never more)

    def close(self) -> None:
        self.finished = True
        self.instance.unregister(self)


class StdioInstance:
    """One process slot of a stdio route: the process running in it now, restarted when it dies."""

    def __init__(
        self,
        route: str,
        index: int,
        spec: StdioSpec,
        metrics: Metrics,
        *,
        budget: AnswerBudget | None = None,
    ) -> None:
        self.route = route
        #: The process's answer pool (what is read for a request draws from its share of it).
        self.budget = budget
        self.index = index
        self.spec = spec
        self.metrics = metrics
        self.endpoint = f"stdio://{route}/{index}"
        self.generation = 0
        self.state = "starting"
        self.restarts = 0
        self.process: asyncio.subprocess.Process | None = None
        self.init_result: dict[str, Any] = {}
        self.version: str | None = None
        self.ready = asyncio.Event()
        self.calls: dict[str, CallStream] = {}
        self.by_progress: dict[Any, CallStream] = {}
        self.holder: CallStream | None = None
        #: subscriptions/listen streams listening to this process, and the resource URIs they
        #: have it subscribed to (per process generation).
        self.listeners: dict[str, CallStream] = {}
        self.subscribed: dict[tuple[int, str], int] = {}
        #: The lease of the call that may ask on it now (a ``lease.StdioSession``), if any.
        self.lease: object | None = None
        self.lease_freed = asyncio.Event()
        self.lease_freed.set()
        self._write_lock = asyncio.Lock()
        self._stopping = False
        #: A run of the process is under way (starting, serving, or cleaning up after it).
        self._in_run = False
        self._supervisor: asyncio.Task[None] | None = None
        self._cgroup: str | None = None
        #: When a request last started or ended on it (what idle means to the pool).
        self.last_active = time.monotonic()

    @property
    def idle_since(self) -> float | None:
        """When it was last busy, or None while a request is in flight on it (a call, a call
        parked on its question, or an open ``subscriptions/listen`` stream)."""
        if self.calls or self.listeners or self.lease is not None:
            return None
        return self.last_active

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._supervisor = asyncio.ensure_future(self._supervise())

    async def _supervise(self) -> None:
        delay = 0.5
        while not self._stopping:
            started = asyncio.get_running_loop().time()
            self._in_run = True
            try:
                await self._run_once()
            except Exception as exc:  # a failed start or handshake: try again later
                event(
                    logging.WARNING,
                    "stdio upstream failed",
                    route=self.route,
                    instance=self.index,
                    error=f"{type(exc).__name__}: {exc}"[:300],
                )
            finally:
                self._in_run = False
            self._set_state("stopped" if self._stopping else "restarting")
            if self._stopping:
                return
            if asyncio.get_running_loop().time() - started > 60:
                delay = 0.5  # it ran for a while: a fresh failure, not a crash loop
            self.restarts += 1
            self.metrics.stdio_restarts.labels(self.route).inc()
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.spec.restart_backoff_max)

    async def _run_once(self) -> None:
        self.generation += 1
        self._set_state("starting")
        box = self.spec.sandbox
        containment.prepare()
        home = box.make_dir()
        cgroup = self._cgroup = containment.new_cgroup()
        try:
            with containment.starting():
                self.process = await asyncio.create_subprocess_exec(
                    *box.command(self.spec.command, self.spec.cwd or home.path, cgroup),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=box.environment(self.spec.child_env(), home.path, self.spec.env),
                    limit=self.spec.max_line_bytes,
                    start_new_session=True,
                )
                sandbox.track(self.process.pid, home, cgroup)
        except BaseException:
            containment.remove_cgroup(cgroup)
            sandbox.remove_dir(home)
            raise
        event(
            logging.INFO,
            "stdio upstream started",
            route=self.route,
            instance=self.index,
            pid=self.process.pid,
        )
        stderr = asyncio.ensure_future(self._read_stderr(self.process))
        reader = asyncio.ensure_future(self._read_stdout(self.process))
        exited = asyncio.ensure_future(self.process.wait())
        reaper = asyncio.ensure_future(self._reap_strays())
        try:
            await self._initialize()
            self._set_state("ready")
            self.ready.set()
            # Until its output ends, or it exits: what it started may hold its stdout open.
            await asyncio.wait([reader, exited], return_when=asyncio.FIRST_COMPLETED)
            self._leave_ready()  # nothing new is sent to it from here on
            if not reader.done():  # what it wrote before it exited is read first
                await asyncio.wait([reader], timeout=1.0)
        finally:
            exited.cancel()
            reaper.cancel()
            self._leave_ready()
            reader.cancel()
            code = await self._reap()
            stderr.cancel()
            containment.remove_cgroup(cgroup)
            removed = await asyncio.to_thread(sandbox.remove_dir, home)
            # Forgotten only now: cut off before this, the exit handler still removes it.
            sandbox.untrack(self.process.pid, home)
            if not removed:
                event(
                    logging.WARNING,
                    "stdio upstream: its private directory was replaced or could not be "
                    "emptied; what has its name is left as it is",
                    route=self.route,
                    instance=self.index,
                    path=home.path,
                )
            self._fail_calls()
            if not self._stopping:
                event(
                    logging.WARNING,
                    "stdio upstream exited",
                    route=self.route,
                    instance=self.index,
                    code=code,
                )

    @staticmethod
    async def _reap_strays() -> None:
        """While it runs: what it started and left to the gateway, once exited, is reaped."""
        while True:
            await asyncio.sleep(10.0)
            containment.reap_strays()

    async def _initialize(self) -> None:
        init_id = wire.new_id()
        own = Reservation(self.budget, kind="bridge")  # (its initialize: the process's own)
        stream = CallStream(self, init_id, None, own)
        self.calls[init_id] = stream
        try:
            await self.write(
                wire.initialize_message(
                    init_id, self.spec.capabilities, {"name": "mcp-edge", "version": "1"}
                )
            )
            async with asyncio.timeout(self.spec.initialize_timeout):
                while True:
                    item = await stream.next()
                    incoming = wire.classify(item[1] if item else None)
                    if isinstance(incoming, wire.Response):
                        break
        finally:
            self.calls.pop(init_id, None)
            own.release()
        if incoming.result is None:
            raise RuntimeError(f"initialize failed: {(incoming.error or {}).get('message')}")
        version = wire.negotiated_version(incoming.result)
        if version is None:
            raise RuntimeError(
                f"unsupported protocol version {incoming.result.get('protocolVersion')!r}"
            )
        self.init_result, self.version = incoming.result, version
        await self.write(wire.INITIALIZED)

    async def _reap(self) -> int | None:
        """Stop the process and everything it started, wherever that went (SIGTERM to all of it,
        SIGKILL after the grace period; ``containment``)."""
        process = self.process
        if process is None:
            return None
        if process.returncode is None:
            containment.terminate(process.pid, self._cgroup)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), self.spec.stop_grace_seconds)
        await containment.kill(process.pid, self._cgroup)  # whatever is left of it, now
        if process.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 5.0)
        return process.returncode

    async def stop(self) -> None:
        self._stopping = True
        if self.process is not None and self.process.returncode is None:
            await self._reap()
        if self._supervisor is not None:
            if self._in_run:
                # Its run ends by itself once the process is gone, removing the private
                # directory last: let that finish (bounded) instead of cutting it off.
                with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                    await asyncio.wait_for(asyncio.shield(self._supervisor), STOP_CLEANUP_SECONDS)
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
        self._set_state("stopped")

    def _set_state(self, state: str) -> None:
        self.state = state
        for name in ("starting", "ready", "restarting", "stopped"):
            self.metrics.stdio_processes.labels(self.route, str(self.index), name).set(
                1 if name == state else 0
            )

    def _leave_ready(self) -> None:
        """Its output ended or it exited: no request is given it any more (those waiting for a
        process wait for the restarted one), while the run cleans up after it."""
        self.ready.clear()
        if self.state == "ready":
            self._set_state("restarting")

    def _fail_calls(self) -> None:
        """The process is gone: every request on it ends, and the lease is free for the next one."""
        for stream in [*self.calls.values(), *self.listeners.values()]:
            stream.end()
        self.calls.clear()
        self.listeners.clear()
        self.by_progress.clear()
        self.holder = None
        self.lease = None
        self.lease_freed.set()

    # ------------------------------------------------------------------ I/O

    async def write(self, message: dict[str, Any]) -> None:
        """Send ``message``; :class:`NotSent` when it cannot have reached the process (gone, or
        its stdin closed), ``UpstreamUnavailable("exited")`` when it may have."""
        process = self.process
        if process is None or process.stdin is None or process.returncode is not None:
            raise NotSent
        try:
            async with self._write_lock:
                process.stdin.write(orjson.dumps(message) + b"\n")
                await asyncio.wait_for(process.stdin.drain(), 30.0)
        except (OSError, RuntimeError):
            # Its stdin is gone: a broken pipe, a reset, or (uvloop) a closed transport's
            # RuntimeError. Nothing can be sent to it again: it is stopped (the supervisor starts
            # another), and the call fails like any call on a process that exited.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            raise NotSent from None
        except TimeoutError:
            raise UpstreamUnavailable("exited") from None

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> None:
        try:
            await self._read_messages(process)
        finally:
            self._leave_ready()
            self._fail_calls()  # nothing more will come: every request on it ends now

    async def _read_messages(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while True:
            try:
                line = await process.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):
                event(
                    logging.WARNING,
                    "stdio upstream wrote a line over the limit; restarting it",
                    route=self.route,
                    instance=self.index,
                    limit=self.spec.max_line_bytes,
                )
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError:
                event(
                    logging.WARNING,
                    "stdio upstream wrote something that is not JSON-RPC",
                    route=self.route,
                    instance=self.index,
                )
                continue
            await self._dispatch(message, len(line))

    async def _read_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        with contextlib.suppress(ValueError, asyncio.LimitOverrunError):
            while line := await process.stderr.readline():
                text = line.decode("utf-8", "replace").rstrip()
                if text:
                    event(
                        logging.INFO,
                        "stdio upstream stderr",
                        route=self.route,
                        instance=self.index,
                        line=text[:_STDERR_LINE_CHARS],
                    )

    async def _dispatch(self, message: Any, size: int = 0) -> None:
        incoming = wire.classify(message)
        if isinstance(incoming, wire.Response):
            stream = self.calls.get(incoming.id) if isinstance(incoming.id, str) else None
            if stream is not None:
                # Held for the request until the bridge hands it on, counted in its budget
                # (dropped at once when it does not fit).
                stream.offer(message, size)
            return
        if isinstance(incoming, wire.ServerRequest):
            if incoming.method != "ping" and self.holder is not None:
                self.holder.offer(message, size)
            else:
                # Sent on the server's own (after initialize, say) while no call may ask: it is
                # no call's question; answered as the bridge answers any such request.
                await self._answer(wire.unsolicited_answer(incoming, self.spec.capabilities, None))
            return
        if isinstance(incoming, wire.Notification):
            if incoming.method == "notifications/progress":
                stream = self.by_progress.get(incoming.params.get("progressToken"))
                if stream is not None and stream.progress is not None:
                    params = {**incoming.params, "progressToken": stream.progress[1]}
                    stream.offer(
                        {"jsonrpc": "2.0", "method": incoming.method, "params": params}, size
                    )
            elif incoming.method in subscriptions.LISTEN_METHODS:
                note = _listen_note(incoming)
                for listener in self.listeners.values():
                    if listener.queue.qsize() < LISTEN_BACKLOG:
                        listener.offer(note, 0)  # (small: what a listen stream relays of it)
            elif self.holder is not None:
                self.holder.offer(message, size)

    async def _answer(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(UpstreamUnavailable):
            await self.write(message)

    # ------------------------------------------------------------------ requests

    def register(
        self, message: dict[str, Any], *, hold: bool, reservation: Reservation
    ) -> CallStream:
        if len(self.calls) >= self.spec.max_pending:
            raise UpstreamBusy
        call_id = message["id"]
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        progress = None
        if isinstance(meta, dict) and "progressToken" in meta:
            # Tokens are the clients' own choice: the process sees one unique per call.
            progress = (call_id, meta["progressToken"])
            meta["progressToken"] = call_id
        stream = CallStream(self, call_id, progress, reservation)
        self.calls[call_id] = stream
        self.last_active = time.monotonic()
        if progress is not None:
            self.by_progress[call_id] = stream
        if hold:
            self.holder = stream
        return stream

    def listen(self) -> CallStream:
        """A listener for what this process pushes on its own (list changes, resource updates)."""
        # (What it queues is small, bounded in number: LISTEN_BACKLOG.)
        stream = CallStream(self, wire.new_id(), None, Reservation(self.budget, kind="bridge"))
        self.listeners[stream.call_id] = stream
        return stream

    def unlisten(self, stream: Any) -> None:
        if self.listeners.pop(stream.call_id, None) is not None:
            self.last_active = time.monotonic()  # idle from the stream's end on

    def unregister(self, stream: CallStream) -> None:
        if self.calls.get(stream.call_id) is stream:
            del self.calls[stream.call_id]
            self.last_active = time.monotonic()
        self.by_progress.pop(stream.call_id, None)
        if self.holder is stream:
            self.holder = None


def _listen_note(note: wire.Notification) -> dict[str, Any]:
    """What a listen stream may relay of a notification the process wrote: its method and, for
    a resource update, the URI when it is one a subscription may name
    (mcp_edge.upstream.legacy.subscriptions.event reads no more)."""
    params: dict[str, Any] = {}
    uri = note.params.get("uri")
    if isinstance(uri, str) and len(uri) <= _LISTEN_URI_CHARS:
        params["uri"] = uri
    return {"jsonrpc": "2.0", "method": note.method, "params": params}
