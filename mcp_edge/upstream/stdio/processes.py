"""Local (stdio) MCP servers behind the bridge: child processes speaking the 2025-era protocol as
newline-delimited JSON-RPC on stdin/stdout (the SDKs' stdio framing).

Each process is one legacy session (one ``initialize``, for its whole life). Several requests
share it, told apart by their JSON-RPC ids (the bridge's ids are random and unique). A question
the server asks mid-call carries nothing that names the call, so at most one call that may ask
(``tools/call``, ``prompts/get``, ``resources/read``) runs on a process at a time: it holds the
process's *lease*, and the server's requests and log messages go to it (the bridge then tells
which of those requests are the call's own). A request sent while no call holds the lease
belongs to no call: it is answered here. Lists and other one-shot calls run beside it. Progress
tokens are rewritten per call, so callers never see each other's. List changes and resource
updates go to every ``subscriptions/listen`` stream listening to the process
(:mod:`mcp_edge.upstream.stdio.listen`).

A process's session state (the roots it was told, its log level, its subscriptions) is then
every such caller's: with ``isolation: principal`` (the default where callers authenticate) each
principal has processes of its own, started when it first needs one and stopped when idle
(:class:`StdioSessions`, bounded by :mod:`mcp_edge.upstream.stdio.pool`); with ``shared`` every
caller uses the same ones.

Processes are restarted with backoff when they die (their calls get a clear error), and are
stopped with SIGTERM to their whole process group, then SIGKILL after a grace period. No shell
is involved: the command is an argv list. The child runs in a sandbox
(``mcp_edge.upstream.stdio.sandbox``: its own user when the gateway is root, resource limits,
no_new_privs, a private directory) with a minimal environment (never the gateway's keys) plus what
the route configures; its stderr goes to the gateway's log, line by line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from mcp_edge.edge.context import RequestContext
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import subscriptions, wire
from mcp_edge.upstream.legacy.http_session import SessionGone, UpstreamBusy, UpstreamUnavailable
from mcp_edge.upstream.legacy.sessions import Caller, PoolKey
from mcp_edge.upstream.stdio import containment, sandbox
from mcp_edge.upstream.stdio.listen import LISTEN_BACKLOG, StdioFeed
from mcp_edge.upstream.stdio.pool import PrincipalPool

#: Environment variables a child inherits from the gateway (everything else must be configured):
#: what a program needs to run and to reach the network through the host's proxy and CAs.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
#: Capabilities declared to a process by default: all the bridge can relay. A request is
#: still only ever asked what it declared itself (see the module docstring).
ALL_CAPABILITIES: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {},
}
_EXITED = object()
#: How long a stop waits for a process's run to clean up after it (its private directory).
STOP_CLEANUP_SECONDS = 5.0
_STDERR_LINE_CHARS = 2000


@dataclass(frozen=True, slots=True)
class StdioSpec:
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    instances: int = 1
    inherit_env: tuple[str, ...] = ()
    capabilities: dict[str, Any] = field(default_factory=lambda: dict(ALL_CAPABILITIES))
    max_line_bytes: int = 4 * 1024 * 1024
    max_pending: int = 64
    stop_grace_seconds: float = 5.0
    restart_backoff_max: float = 30.0
    acquire_timeout: float = 30.0
    initialize_timeout: float = 60.0
    sandbox: sandbox.Sandbox = field(default_factory=sandbox.Sandbox)
    #: ``shared``: ``instances`` processes for every caller; ``principal``: up to ``instances``
    #: for each principal, ``max_processes`` in all, stopped after ``idle_seconds`` unused.
    isolation: Literal["principal", "shared"] = "shared"
    max_processes: int = 8
    idle_seconds: float = 300.0

    def child_env(self) -> dict[str, str]:
        names = (*INHERITED_ENV, *self.inherit_env)
        env = {k: os.environ[k] for k in names if k in os.environ and not k.startswith("MCP_EDGE_")}
        env.update(self.env)
        return env


class CallStream:
    """The messages of one request on a shared process: its response and, for the call holding
    the lease, the server's requests and log messages."""

    has_event_ids = False
    consumed_id: str | None = None
    last_event_id: str | None = None
    seen_any = False
    json = False
    sse = False

    def __init__(
        self, instance: StdioInstance, call_id: str, progress: tuple[Any, Any] | None
    ) -> None:
        self.instance = instance
        self.call_id = call_id
        self.progress = progress  # (upstream token, client's token)
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.finished = False

    async def next(self) -> tuple[str | None, Any] | None:
        if self.finished:
            return None
        item = await self.queue.get()
        if item is _EXITED:
            self.finished = True
            raise UpstreamUnavailable("exited")
        return None, item

    def close(self) -> None:
        self.finished = True
        self.instance.unregister(self)


class StdioInstance:
    """One process slot of a stdio route: the process running in it now, restarted when it dies."""

    def __init__(self, route: str, index: int, spec: StdioSpec, metrics: Metrics) -> None:
        self.route = route
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
        self.lease: StdioSession | None = None
        self.lease_freed = asyncio.Event()
        self.lease_freed.set()
        self._write_lock = asyncio.Lock()
        self._stopping = False
        self._supervisor: asyncio.Task[None] | None = None
        self._cgroup: str | None = None
        #: When a request last started or ended on it (what idle means to the pool).
        self.last_active = time.monotonic()

    @property
    def idle_since(self) -> float | None:
        """When it was last busy, or None while a request is in flight on it."""
        return None if self.calls or self.lease is not None else self.last_active

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._supervisor = asyncio.ensure_future(self._supervise())

    async def _supervise(self) -> None:
        delay = 0.5
        while not self._stopping:
            started = asyncio.get_running_loop().time()
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
            if not reader.done():  # what it wrote before it exited is read first
                await asyncio.wait([reader], timeout=1.0)
        finally:
            exited.cancel()
            reaper.cancel()
            self.ready.clear()
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
        stream = CallStream(self, init_id, None)
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
            if self.state not in ("restarting", "stopped"):
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

    def _fail_calls(self) -> None:
        """The process is gone: every request on it ends, and the lease is free for the next one."""
        for stream in [*self.calls.values(), *self.listeners.values()]:
            stream.queue.put_nowait(_EXITED)
        self.calls.clear()
        self.listeners.clear()
        self.by_progress.clear()
        self.holder = None
        self.lease = None
        self.lease_freed.set()

    # ------------------------------------------------------------------ I/O

    async def write(self, message: dict[str, Any]) -> None:
        process = self.process
        if process is None or process.stdin is None or process.returncode is not None:
            raise UpstreamUnavailable("exited")
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
            raise UpstreamUnavailable("exited") from None
        except TimeoutError:
            raise UpstreamUnavailable("exited") from None

    async def _read_stdout(self, process: asyncio.subprocess.Process) -> None:
        try:
            await self._read_messages(process)
        finally:
            self.ready.clear()
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
            await self._dispatch(message)

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

    async def _dispatch(self, message: Any) -> None:
        incoming = wire.classify(message)
        if isinstance(incoming, wire.Response):
            stream = self.calls.get(incoming.id) if isinstance(incoming.id, str) else None
            if stream is not None:
                stream.queue.put_nowait(message)
            return
        if isinstance(incoming, wire.ServerRequest):
            if incoming.method != "ping" and self.holder is not None:
                self.holder.queue.put_nowait(message)
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
                    stream.queue.put_nowait(
                        {"jsonrpc": "2.0", "method": incoming.method, "params": params}
                    )
            elif incoming.method in subscriptions.LISTEN_METHODS:
                for listener in self.listeners.values():
                    if listener.queue.qsize() < LISTEN_BACKLOG:
                        listener.queue.put_nowait(message)
            elif self.holder is not None:
                self.holder.queue.put_nowait(message)

    async def _answer(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(UpstreamUnavailable):
            await self.write(message)

    # ------------------------------------------------------------------ requests

    def register(self, message: dict[str, Any], *, hold: bool) -> CallStream:
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
        stream = CallStream(self, call_id, progress)
        self.calls[call_id] = stream
        self.last_active = time.monotonic()
        if progress is not None:
            self.by_progress[call_id] = stream
        if hold:
            self.holder = stream
        return stream

    def listen(self) -> CallStream:
        """A listener for what this process pushes on its own (list changes, resource updates)."""
        stream = CallStream(self, wire.new_id(), None)
        self.listeners[stream.call_id] = stream
        return stream

    def unlisten(self, stream: Any) -> None:
        self.listeners.pop(stream.call_id, None)

    def unregister(self, stream: CallStream) -> None:
        if self.calls.get(stream.call_id) is stream:
            del self.calls[stream.call_id]
            self.last_active = time.monotonic()
        self.by_progress.pop(stream.call_id, None)
        if self.holder is stream:
            self.holder = None


class StdioSession:
    """A lease on one process for one request (exclusive for a call that may ask the client)."""

    side = None
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

    @property
    def server_info(self) -> dict[str, Any] | None:
        info = self.init_result.get("serverInfo")
        return info if isinstance(info, dict) else None

    def _check(self) -> None:
        if self.instance.generation != self.generation or self.instance.state != "ready":
            raise SessionGone

    async def request(self, message: dict[str, Any]) -> CallStream:
        self._check()
        stream = self.instance.register(message, hold=self.exclusive)
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

    async def open_side(self, last_event_id: str | None = None) -> None:
        return None

    def side_reader(self) -> None:
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


class PoolFull(UpstreamBusy):
    """Every process of the route serves a principal with a request in flight (``isolation:
    principal``): none can be stopped to start one for another principal."""

    def __init__(self) -> None:
        super().__init__(
            "Every process of this local server is in use by other callers; try again shortly"
        )


class StdioSessions:
    """The processes of one stdio route, as the bridge's sessions.

    ``isolation: shared``: ``instances`` processes started with the gateway, every caller on
    them. ``isolation: principal``: each principal on processes of its own (at most
    ``instances``), started when it first needs one, stopped when idle, bounded in all by
    ``max_processes`` (see :mod:`mcp_edge.upstream.stdio.pool`); one more is kept started for the
    next new principal (the *spare*, which no caller has used), while a slot is free.
    """

    def __init__(self, route: str, spec: StdioSpec, metrics: Metrics | None = None) -> None:
        self.route = route
        self.spec = spec
        self.metrics = metrics or Metrics()
        self.metrics.stdio_restarts.labels(route)  # at 0 from the start: increase() sees the first
        self.isolation = spec.isolation
        self.pool: PrincipalPool[StdioInstance] | None = None
        self._fixed: list[StdioInstance] = []
        if spec.isolation == "principal":
            self.pool = PrincipalPool(
                max_processes=spec.max_processes,
                per_principal=spec.instances,
                idle_seconds=spec.idle_seconds,
            )
        else:
            self._fixed = [
                StdioInstance(route, i, spec, self.metrics) for i in range(spec.instances)
            ]
        self._cycle = itertools.cycle(range(len(self._fixed)))
        self._turn = itertools.count()
        self._was_ready = False
        self._closed = False
        self._slot_freed = asyncio.Event()
        self._reaper: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()

    @property
    def instances(self) -> list[StdioInstance]:
        """Every process of the route now (with principal isolation: those being stopped too)."""
        return self._fixed if self.pool is None else list(self.pool.live())

    def start(self) -> None:
        self._describe_sandbox()
        sandbox.sweep(self.spec.sandbox)
        if self.pool is None:
            for instance in self._fixed:
                instance.start()
            return
        self._refill()
        self._reaper = asyncio.ensure_future(self._reap_idle())

    def _refill(self) -> None:
        """Start a spare process, if there is none and a slot is free."""
        pool = self.pool
        if pool is None or self._closed or pool.spare is not None:
            return
        slot = pool.free_slot()
        if slot is not None:
            spare = StdioInstance(self.route, slot, self.spec, self.metrics)
            pool.add_spare(slot, spare)
            spare.start()
            self._count("started")

    def _describe_sandbox(self) -> None:
        who = self.spec.sandbox.identity
        if not who.switches:
            event(
                logging.INFO,
                "local servers run as the gateway's own user (it is not root): they can read "
                "every file it can, so keep keys in MCP_EDGE_STATE_KEYS, not in files; the gateway's "
                "memory and environment are closed to them (non-dumpable)",
                route=self.route,
                user=who.name,
            )
        elif who.uid == 0:
            event(
                logging.WARNING,
                "local servers run as root: nothing keeps the key ring from them",
                route=self.route,
            )
        else:
            event(
                logging.INFO,
                "local servers run as an unprivileged user",
                route=self.route,
                user=who.name,
                uid=who.uid,
                gid=who.gid,
            )

    @property
    def ready(self) -> bool:
        """A process is ready; with principal isolation, a process of the route has been ready
        once (the command works: processes come and go with their principals, and a moment
        without one ready, a process being replaced, says nothing about the route)."""
        if any(i.state == "ready" for i in self.instances):
            self._was_ready = True
            return True
        return self.pool is not None and self._was_ready

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "state": i.state,
                "restarts": i.restarts,
                "pid": i.process.pid
                if i.process is not None and i.process.returncode is None
                else None,
            }
            for i in self.instances
        ]

    def plan_text(self) -> str:
        """How many processes it runs, in words (``check-config``)."""
        if self.pool is None:
            return f"{self.spec.instances} process(es) shared by every caller"
        return (
            f"up to {self.spec.instances} process(es) per caller, at most "
            f"{self.spec.max_processes} in all, stopped after {self.spec.idle_seconds:g} s idle"
        )

    def summary(self) -> dict[str, Any]:
        """How the route's callers share its processes (counts only: never who they are)."""
        if self.pool is None:
            return {"isolation": "shared"}
        return {
            "isolation": "principal",
            "principals": self.pool.principals,
            "max_processes": self.spec.max_processes,
        }

    def _next_ready(self, *, free: bool) -> StdioInstance | None:
        for _ in range(len(self._fixed)):
            instance = self._fixed[next(self._cycle)]
            if instance.state == "ready" and (not free or instance.lease is None):
                return instance
        return None

    def _lease(
        self, instance: StdioInstance, ctx: RequestContext, *, for_call: bool
    ) -> StdioSession:
        session = StdioSession(instance, exclusive=for_call)
        if for_call:
            instance.lease = session
            instance.lease_freed.clear()
        ctx.answered_by = instance.endpoint
        self._was_ready = True
        return session

    async def acquire(
        self, caller: Caller, ctx: RequestContext, *, for_call: bool
    ) -> tuple[PoolKey | None, StdioSession, bool]:
        if self.pool is not None:
            own = await self._own(self.pool.key(caller.principal_id), free=for_call)
            return None, self._lease(own, ctx, for_call=for_call), False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.spec.acquire_timeout
        while True:
            instance = self._next_ready(free=for_call)
            if instance is not None:
                return None, self._lease(instance, ctx, for_call=for_call), False
            left = deadline - loop.time()
            if left <= 0:
                if any(i.state == "ready" for i in self._fixed):
                    raise UpstreamBusy
                raise UpstreamUnavailable("unreachable")
            # Wait for a lease to be given back or a process to become ready, a little at a time.
            await _first_of(
                [i.lease_freed if i.state == "ready" else i.ready for i in self._fixed],
                min(left, 0.5),
            )

    async def ready_for(self, principal_id: str) -> list[StdioInstance]:
        """The ready processes a 2025-era client of ``principal_id`` may have its session on
        (with principal isolation: its own, one started for it if need be)."""
        if self.pool is None:
            ready = [i for i in self._fixed if i.state == "ready"]
            if not ready:
                raise UpstreamUnavailable("unreachable")
            return ready
        key = self.pool.key(principal_id)
        chosen = await self._own(key, free=False)
        chosen.last_active = time.monotonic()  # a session opened on it: the most recently used
        return [i for i in self.pool.members(key) if i.state == "ready"]

    async def _own(self, key: str, *, free: bool) -> StdioInstance:
        """A ready process of principal ``key`` (``free``: with no call that may ask on it),
        starting one, or stopping another principal's idle ones to make room, when it has none
        free. Raises :class:`PoolFull`, :class:`UpstreamBusy` (its own are all taken for
        ``acquire_timeout``) or :class:`UpstreamUnavailable` (none became ready in that time)."""
        pool = self.pool
        assert pool is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.spec.acquire_timeout
        pool.wait(key)  # its processes are not idle while it waits for them
        try:
            while True:
                if self._closed:
                    raise UpstreamUnavailable("unreachable")
                members = pool.members(key)
                turn = next(self._turn)
                for i in range(len(members)):
                    instance = members[(turn + i) % len(members)]
                    if instance.state == "ready" and (not free or instance.lease is None):
                        return instance
                # One more process when it has none, or (for a call) all of its own are ready
                # and leased; a process still starting is waited for.
                if not members or (
                    free and all(m.state == "ready" and m.lease is not None for m in members)
                ):
                    self._grow(key)
                left = deadline - loop.time()
                if left <= 0:
                    if any(m.state == "ready" for m in pool.members(key)):
                        raise UpstreamBusy
                    raise UpstreamUnavailable("unreachable")
                events = [
                    m.lease_freed if m.state == "ready" else m.ready for m in pool.members(key)
                ]
                await _first_of([*events, self._slot_freed], min(left, 0.5))
        finally:
            pool.done_waiting(key)

    def _grow(self, key: str) -> None:
        """Give ``key`` one more process if the pool can now (else it waits, or is told busy)."""
        pool = self.pool
        assert pool is not None
        plan = pool.plan(key, _idle_since)
        if plan.action == "adopt":
            pool.adopt(key)
            self._count("adopted")
            self._refill()
        elif plan.action == "start":
            assert plan.slot is not None
            instance = StdioInstance(self.route, plan.slot, self.spec, self.metrics)
            pool.add(key, plan.slot, instance)
            instance.start()
            self._count("started")
        elif plan.action == "evict":
            assert plan.victim is not None
            self._retire(plan.victim, "evicted")  # its slots free once it has stopped
        elif plan.action == "busy":
            self._count("full")
            raise PoolFull

    def _retire(self, key: str, why: str) -> None:
        """Stop principal ``key``'s processes; their slots free once they have exited."""
        assert self.pool is not None
        for instance in self.pool.evict(key):
            self._count(why)
            event(
                logging.INFO,
                "stdio upstream stopped: "
                + ("idle" if why == "reaped" else "room for another caller"),
                route=self.route,
                instance=instance.index,
                principal=key[:12],
            )
            task = asyncio.ensure_future(self._stop(instance))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def _stop(self, instance: StdioInstance) -> None:
        try:
            await instance.stop()
        finally:
            if self.pool is not None:
                self.pool.free(instance)
                self._refill()
            self._slot_freed.set()
            self._slot_freed = asyncio.Event()

    async def _reap_idle(self) -> None:
        """Stop the processes of principals idle for ``idle_seconds``, checked a few times per
        period."""
        assert self.pool is not None
        every = max(0.5, min(self.spec.idle_seconds / 4, 30.0))
        while not self._closed:
            await asyncio.sleep(every)
            for key in self.pool.expired(time.monotonic(), _idle_since):
                self._retire(key, "reaped")

    def _count(self, what: str) -> None:
        self.metrics.stdio_pool.labels(self.route, what).inc()

    def suspend(self, session: StdioSession) -> None:
        session.suspend()

    async def reacquire(self, session: StdioSession) -> None:
        try:
            await session.reacquire(self.spec.acquire_timeout)
        except TimeoutError:
            raise UpstreamBusy from None

    def release(self, key: PoolKey | None, session: StdioSession) -> None:
        session.release_lease()

    def discard(self, session: StdioSession) -> None:
        session.release_lease()

    def reuse_key(self, caller: Caller, endpoint: str, digest: str | None) -> PoolKey | None:
        return None

    def reattach(
        self, endpoint: str, caller: Caller, session_id: str | None, version: str | None
    ) -> None:
        return None  # a process lives in one replica: its calls go on by park or replay

    async def listen(self, caller: Caller, ctx: RequestContext) -> StdioFeed:
        """A listen stream hears the processes its caller may reach, running now: with principal
        isolation only the caller's own (one started for it if need be), never another's."""
        if self.pool is None:
            ready = [i for i in self._fixed if i.state == "ready"]
        else:
            ready = await self.ready_for(caller.principal_id)
        if not ready:
            raise UpstreamUnavailable("unreachable")
        ctx.answered_by = ready[0].endpoint
        return StdioFeed(list(ready))

    async def aclose(self) -> None:
        self._closed = True
        if self._reaper is not None:
            self._reaper.cancel()
        await asyncio.gather(
            *(i.stop() for i in self.instances), *self._stopping, return_exceptions=True
        )


def _idle_since(instance: StdioInstance) -> float | None:
    return instance.idle_since


async def _first_of(events: list[asyncio.Event], timeout: float) -> None:
    """Wait until one of ``events`` is set, at most ``timeout`` seconds."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


def build_spec(config: Any, *, authenticated: bool = True) -> StdioSpec:
    """A :class:`StdioSpec` from the route's ``upstream: {command: ...}`` section (raises
    :class:`sandbox.SandboxError` when its user, group or directories do not work here).
    ``authenticated``: callers are told apart (auth mode jwt or trusted_header), so each gets
    processes of its own unless the route says ``isolation: shared``."""
    identity = sandbox.resolve_identity(
        config.user, config.group, euid=os.geteuid(), egid=os.getegid()
    )
    box = sandbox.Sandbox(identity=identity, limits=sandbox.Limits(**config.limits.model_dump()))
    sandbox.check_reachable(box.tmp_root, identity)
    return StdioSpec(
        command=tuple(config.command),
        env=dict(config.env),
        cwd=config.cwd,
        instances=config.instances,
        inherit_env=tuple(config.inherit_env),
        capabilities=dict(config.capabilities),
        max_line_bytes=config.max_line_bytes,
        max_pending=config.max_pending,
        stop_grace_seconds=config.stop_grace_seconds,
        restart_backoff_max=config.restart_backoff_max,
        acquire_timeout=config.acquire_timeout,
        sandbox=box,
        isolation=config.isolation or ("principal" if authenticated else "shared"),
        max_processes=config.max_processes,
        idle_seconds=config.idle_seconds,
    )
