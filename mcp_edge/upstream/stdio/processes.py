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

Modules: ``spec`` (what a route runs), ``process`` (a process's life and the messages it
writes), ``lease`` (a request's hold on a process), ``pool`` (which processes are whose, pure),
``listen`` (listen streams), this one (the route's processes, as the bridge's sessions), and
``front`` (2025-era clients).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Any

from mcp_edge.edge.body import AnswerBudget
from mcp_edge.edge.context import RequestContext
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy.http_session import UpstreamBusy, UpstreamUnavailable
from mcp_edge.upstream.legacy.sessions import Caller, PoolKey
from mcp_edge.upstream.stdio import sandbox
from mcp_edge.upstream.stdio.lease import StdioSession
from mcp_edge.upstream.stdio.listen import StdioFeed
from mcp_edge.upstream.stdio.pool import PrincipalPool
from mcp_edge.upstream.stdio.process import StdioInstance
from mcp_edge.upstream.stdio.spec import StdioSpec


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

    def __init__(
        self,
        route: str,
        spec: StdioSpec,
        metrics: Metrics | None = None,
        *,
        budget: AnswerBudget | None = None,
    ) -> None:
        self.route = route
        self.spec = spec
        self.metrics = metrics or Metrics()
        #: The process's answer pool: what the processes hold for callers draws from it.
        self.budget = budget
        self.metrics.stdio_restarts.labels(route)  # at 0 from the start: increase() sees the first
        self.isolation = spec.isolation
        self.pool: PrincipalPool[StdioInstance] | None = None
        self._fixed: list[StdioInstance] = []
        if spec.isolation == "principal":
            self.pool = PrincipalPool(
                max_processes=spec.max_processes,
                per_principal=spec.instances,
                idle_seconds=spec.idle_seconds,
                min_residency=spec.min_residency,
            )
        else:
            self._fixed = [
                StdioInstance(route, i, spec, self.metrics, budget=budget)
                for i in range(spec.instances)
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
            spare = StdioInstance(self.route, slot, self.spec, self.metrics, budget=self.budget)
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
        plan = pool.plan(key, _idle_since, time.monotonic())
        if plan.action == "adopt":
            pool.adopt(key)
            self._count("adopted")
            self._refill()
        elif plan.action == "start":
            assert plan.slot is not None
            instance = StdioInstance(
                self.route, plan.slot, self.spec, self.metrics, budget=self.budget
            )
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
        return StdioFeed(list(ready), self.budget)

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
