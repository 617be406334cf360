"""Rate limits as a small ASGI layer between a route's edge middlewares and its upstream adapter.

The edge has authenticated the caller, checked the envelope and verified any sealed state by the
time a request gets here, so the layer knows who is calling and whether the request is the retry
of an MRTR flow. Budgets are kept with the ``limits`` library: in memory (one process) or in the
shared Redis (every replica spends the same budget).
"""

from __future__ import annotations

import collections
import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from limits.aio.storage import (
    MemoryStorage,
    RedisClusterStorage,
    RedisSentinelStorage,
    RedisStorage,
    Storage,
)
from limits.aio.strategies import (
    MovingWindowRateLimiter,
    RateLimiter,
    SlidingWindowCounterRateLimiter,
)
from prometheus_client import CollectorRegistry, Counter

from mcp_edge.core import headers as h
from mcp_edge.core.urls import redact
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.observability.logs import event
from mcp_edge.observability.observer import Count
from mcp_edge.ratelimit.memory import FirstUses, MovingWindows
from mcp_edge.ratelimit.rules import (
    Check,
    RoutePolicy,
    budget_store_unavailable_error,
    legacy_demand,
    principal_key,
    rate_limited_error,
    retry_after_seconds,
)

if TYPE_CHECKING:
    from mcp_edge.ratelimit.config import RateLimitSection
    from mcp_edge.store.config import StoreSection
    from mcp_edge.store.redis import AnyRedis

_NO_TOOLS: dict[str, int] = {}


#: How often the in-memory budgets drop expired entries.
MEMORY_SWEEP_SECONDS = 5.0


class BudgetStoreUnavailable(Exception):
    """The budget store did not answer (in time)."""


class QuietMemoryStorage(MemoryStorage):
    """limits' asyncio memory storage, sweeping expired entries at most every few seconds.

    The library starts a sweep of every key after each hit (for moving windows with a thread hop
    per key): about 0.8 ms of CPU per request on the benchmark machine, more than the gateway's own
    work. Sweeping only frees memory (every read checks expiry itself), so it is rate-limited here
    by overriding the storage's (name-mangled) scheduler; a unit test checks that the hook is
    still there.
    """

    def __init__(self, sweep_seconds: float = MEMORY_SWEEP_SECONDS) -> None:
        super().__init__()
        self._sweep_seconds = sweep_seconds
        self._next_sweep = 0.0

    async def _MemoryStorage__schedule_expiry(self) -> None:  # noqa: N802 - the library's name
        now = time.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + self._sweep_seconds
            await MemoryStorage._MemoryStorage__schedule_expiry(self)  # type: ignore[attr-defined]


class RateLimitMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "mcp_edge_rate_limit_requests",
            "Requests met by a route's rate limits, by decision: allowed, limited (HTTP 429), "
            "retry (a verified MRTR retry: not counted again), store_unavailable_allowed / "
            "store_unavailable_refused (budget store down: fail open / fail closed)",
            ["route", "decision"],
            registry=registry,
        )
        self.limited = Counter(
            "mcp_edge_rate_limited",
            "Requests refused with HTTP 429, by the budget that ran out (principal, global, tool, tool_global)",
            ["route", "budget"],
            registry=registry,
        )


class Budgets(Protocol):
    """Where a route's budgets are spent: :class:`MemoryBudgetStore` (one process, the default)
    or :class:`BudgetStore` (the ``limits`` library, over Redis or with another strategy)."""

    async def spend(self, checks: list[Check]) -> Check | None:
        """Spend every check's cost; return the first check over its budget (nothing is spent
        then, except in a race with another request), or None when all had room."""

    async def retry_after(self, check: Check) -> int:
        """Seconds until ``check``'s budget has room again."""

    async def first_use(self, key: str, ttl_seconds: int) -> bool:
        """True the first time ``key`` is presented within ``ttl_seconds``."""

    async def aclose(self) -> None: ...


class BudgetStore:
    """Spends budgets with one ``limits`` strategy over one storage; maps every storage failure
    to :class:`BudgetStoreUnavailable`."""

    def __init__(
        self,
        storage: Storage,
        strategy: str,
        *,
        timeout: float | None = None,
        clock: Callable[[], float] = time.time,
        redis: AnyRedis | None = None,
    ) -> None:
        self.storage = storage
        #: The client whose connections the storage uses (closed with it).
        self.redis = redis
        self.limiter: RateLimiter = (
            MovingWindowRateLimiter(storage)
            if strategy == "moving-window"
            else SlidingWindowCounterRateLimiter(storage)
        )
        self.timeout = timeout
        self.clock = clock

    async def spend(self, checks: list[Check]) -> Check | None:
        """Spend every check's cost; return the first check over its budget (nothing is spent
        then, except in a race with another request), or None when all had room."""
        return await self._bounded(self._spend, checks)

    async def _spend(self, checks: list[Check]) -> Check | None:
        if len(checks) == 1:
            c = checks[0]
            return None if await self.limiter.hit(c.budget.item, *c.identifiers, cost=c.cost) else c
        # Several budgets: look first, so that a request refused by one budget does not spend the
        # others (a caller over its own limit must not drain the global one).
        for c in checks:
            if not await self.limiter.test(c.budget.item, *c.identifiers, cost=c.cost):
                return c
        for c in checks:
            if not await self.limiter.hit(c.budget.item, *c.identifiers, cost=c.cost):
                return c
        return None

    async def retry_after(self, check: Check) -> int:
        """Seconds until ``check``'s budget has room again."""
        try:
            stats = await self._bounded(
                self.limiter.get_window_stats, check.budget.item, *check.identifiers
            )
        except BudgetStoreUnavailable:
            return 1
        return retry_after_seconds(stats.reset_time, self.clock())

    async def first_use(self, key: str, ttl_seconds: int) -> bool:
        """True the first time ``key`` is presented within ``ttl_seconds``."""
        return int(await self._bounded(self.storage.incr, key, ttl_seconds)) == 1

    async def _bounded(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            if self.timeout is None:
                return await fn(*args, **kwargs)
            with anyio.fail_after(self.timeout):
                return await fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001  (whatever the storage raises: the store is out)
            raise BudgetStoreUnavailable(type(exc).__name__) from exc

    async def aclose(self) -> None:
        bridge = getattr(self.storage, "bridge", None)
        for name in ("storage", "storage_replica"):
            client = getattr(bridge, name, None)
            if client is not None and hasattr(client, "aclose"):
                await client.aclose()
        for client in getattr(getattr(bridge, "sentinel", None), "sentinels", ()):
            await client.aclose()
        if self.redis is not None:
            await self.redis.aclose()


class MemoryBudgetStore:
    """Moving-window budgets of one process, kept natively (:mod:`mcp_edge.ratelimit.memory`):
    the same decisions as ``limits`` on its memory storage, at a fraction of the cost (no lock,
    no key strings, no timeout: nothing can block)."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        sweep_seconds: float = MEMORY_SWEEP_SECONDS,
    ) -> None:
        self.clock = clock
        self.windows = MovingWindows(clock=clock, sweep_seconds=sweep_seconds)
        self.first_uses = FirstUses(clock=clock, sweep_seconds=sweep_seconds)

    async def spend(self, checks: list[Check]) -> Check | None:
        return self.windows.spend(checks)

    async def retry_after(self, check: Check) -> int:
        return retry_after_seconds(self.windows.reset_at(check), self.clock())

    async def first_use(self, key: str, ttl_seconds: int) -> bool:
        return self.first_uses.first(key, ttl_seconds)

    async def aclose(self) -> None:
        return None


def _limits_redis_uri(url: str) -> str:
    for scheme, replacement in (
        ("rediss://", "async+rediss://"),
        ("redis://", "async+redis://"),
        ("unix://", "async+redis+unix://"),
    ):
        if url.startswith(scheme):
            return replacement + url[len(scheme) :]
    raise ValueError(f"not a Redis URL: {redact(url)!r}")


def build_budget_store(section: RateLimitSection, store: StoreSection) -> Budgets:
    """Memory by default; the configured Redis when ``store.type`` is ``redis``: a single server
    through the gateway's own connection pool, Sentinel and Cluster through the storages
    ``limits`` has for them, their URI derived from ``store.url``."""
    if store.type == "redis":
        # (The Redis client is the ``redis`` extra, which the store section required.)
        from redis.asyncio import Redis

        from mcp_edge.store.redis import (
            client_options,
            fast_redis,
            limits_storage_args,
            parse_redis_url,
        )

        assert store.url is not None  # the store section requires it
        timeout = section.timeout_seconds
        kind = parse_redis_url(store.url).kind
        if kind != "single":
            uri, options = limits_storage_args(store.url, timeout)
            cls = RedisSentinelStorage if kind == "sentinel" else RedisClusterStorage
            ha: Storage = cls(
                uri,
                implementation="redispy",
                wrap_exceptions=True,
                key_prefix=section.key_prefix,
                **options,
            )
            return BudgetStore(ha, section.strategy, timeout=timeout)
        # The library's client runs on the connections of one opened the gateway's way.
        redis = fast_redis(store.url, timeout)
        assert isinstance(redis, Redis)  # a single server (the other kinds returned above)
        storage: Storage = RedisStorage(
            _limits_redis_uri(parse_redis_url(store.url).url),
            implementation="redispy",
            wrap_exceptions=True,
            key_prefix=section.key_prefix,
            connection_pool=redis.connection_pool,  # type: ignore[arg-type]
            **client_options(),
        )
        return BudgetStore(storage, section.strategy, timeout=timeout, redis=redis)
    if section.strategy == "moving-window":
        return MemoryBudgetStore()
    return BudgetStore(QuietMemoryStorage(), section.strategy)


class RateLimitLayer:
    """Spends the caller's budgets before the request goes on; over budget: the request's own
    JSON-RPC id, HTTP 429 and ``Retry-After``. The first ``retries_per_unit`` retries of an MRTR
    flow (their sealed state verified; rounds 1..N by the sealed round number) spend nothing the
    first time each state is presented: they ride on the unit the flow's first request spent.
    Later rounds, and a state presented again, count as new requests (on single-use routes the
    flow middleware refuses a state presented again anyway). Nothing of this is kept in the process: the
    round comes sealed, and "first time" is the budget store's, so replicas agree."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        route: str,
        policy: RoutePolicy,
        budgets: Budgets,
        metrics: RateLimitMetrics,
        fail_open: bool = True,
        leeway_seconds: int = 5,
        retries_spend_once: bool = True,
        retries_per_unit: int = 3,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.route = route
        self.policy = policy
        self.budgets = budgets
        self.metrics = metrics
        self.fail_open = fail_open
        self.leeway_seconds = leeway_seconds
        self.retries_spend_once = retries_spend_once
        self.retries_per_unit = retries_per_unit
        self.clock = clock
        self._decisions = {
            d: Count(metrics.requests.labels(route, d))
            for d in (
                "allowed",
                "limited",
                "retry",
                "store_unavailable_allowed",
                "store_unavailable_refused",
            )
        }
        self._last_outage_log = -math.inf
        self._outages_unlogged = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = get_context(scope)
        try:
            if (
                ctx.retry_state_id is not None
                and 0 < ctx.retry_round <= self.retries_per_unit
                and await self._free_retry(ctx.retry_state_id, ctx.retry_state_expires)
            ):
                self._decisions["retry"].inc()
                await self.app(scope, receive, send)
                return
            requests, tools = self._demand(scope, ctx)
            principal = principal_key(ctx.principal.id if ctx.principal else "")
            checks = self.policy.checks(principal, requests, tools)
            refused = await self.budgets.spend(checks) if checks else None
        except BudgetStoreUnavailable as exc:
            if not self._store_down(exc):
                await send_rpc_error(send, budget_store_unavailable_error(), ctx.request_id)
                return
            await self.app(scope, receive, send)
            return
        if refused is None:
            self._decisions["allowed"].inc()
            await self.app(scope, receive, send)
            return
        self._decisions["limited"].inc()
        self.metrics.limited.labels(self.route, refused.budget.kind).inc()
        retry_after = await self.budgets.retry_after(refused)
        await send_rpc_error(send, rate_limited_error(refused.budget, retry_after), ctx.request_id)

    async def _free_retry(self, state_id: str, expires: int) -> bool:
        if not self.retries_spend_once:
            return True
        ttl = max(1, math.ceil(expires + self.leeway_seconds - self.clock()))
        return await self.budgets.first_use(f"retry/{'/'.join(self.policy.scope)}/{state_id}", ttl)

    def _demand(
        self, scope: Scope, ctx: RequestContext
    ) -> tuple[int, dict[str, int] | collections.Counter[str]]:
        """How many requests this is, and its tools/call by tool name."""
        if ctx.modern:
            if ctx.request_id is None:  # a notification: no work asked for
                return 0, _NO_TOOLS
            if self.policy.has_tool_budgets and ctx.rpc_method == "tools/call":
                # The edge checked that Mcp-Name equals params.name.
                raw = ctx.headers.get(b"mcp-name")
                name = h.decode_header_value(raw) if raw is not None else None
                return 1, ({name: 1} if name else _NO_TOOLS)
            return 1, _NO_TOOLS
        if scope["method"] != "POST":
            return 1, _NO_TOOLS  # legacy GET stream / DELETE session
        return legacy_demand(ctx.message)  # the body the edge parsed

    def _store_down(self, exc: BudgetStoreUnavailable) -> bool:
        """Count and log (at most every 10 s) an outage; True when failing open."""
        action = "allowed" if self.fail_open else "refused"
        self._decisions[f"store_unavailable_{action}"].inc()
        now = time.monotonic()
        if now - self._last_outage_log >= 10.0:
            event(
                logging.WARNING,
                "rate-limit store unavailable",
                route=self.route,
                action="fail_open" if self.fail_open else "fail_closed",
                error=str(exc),
                since_last_log=self._outages_unlogged,
            )
            self._last_outage_log = now
            self._outages_unlogged = 0
        else:
            self._outages_unlogged += 1
        return self.fail_open
