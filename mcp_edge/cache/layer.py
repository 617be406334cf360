"""The edge cache as a small ASGI layer between a route's edge middlewares and its upstream adapter.

Installed only on routes that enable it. Requests of other methods pass straight through (one set
lookup); only the six cacheable methods have their key computed (from the upstream request as the
route's :class:`~mcp_edge.edge.forwarding.Forwarding` describes it, the message the edge parsed
included) and, on a miss, their JSON answer read (:class:`mcp_edge.core.response_reader.
ResponseReader`, up to ``max_entry_bytes``) while it streams to the client, then judged.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from mcp_edge.auth.base import ANONYMOUS
from mcp_edge.cache.rules import (
    CACHEABLE_METHODS,
    PRIVATE,
    PUBLIC,
    cache_key,
    judge_result,
    private_partition,
    render_hit,
    request_fingerprint,
)
from mcp_edge.cache.store import CacheBackend, Entry, MemoryCache
from mcp_edge.core.response_reader import Final, Framing, Lines, Problem, ResponseReader
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, json_headers, start_response
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import get_context
from mcp_edge.edge.forwarding import Forwarding
from mcp_edge.observability import multiprocess
from mcp_edge.observability.logs import event
from mcp_edge.observability.observer import Count

CACHE_HEADER = b"x-mcp-edge-cache"


class CacheMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.lookups = Counter(
            "mcp_edge_cache_lookups",
            "Requests of cacheable methods on routes with the cache, by result: hit, miss, "
            "bypass (MRTR retries and notifications, never cached)",
            ["route", "result"],
            registry=registry,
        )
        self.stores = Counter(
            "mcp_edge_cache_stores",
            "Upstream results kept, by cacheScope",
            ["route", "scope"],
            registry=registry,
        )
        self.not_stored = Counter(
            "mcp_edge_cache_not_stored",
            "Upstream answers on a miss that were not kept, by reason (no_hint, ttl_zero, private, "
            "not_complete, error, status, too_large, ...)",
            ["route", "reason"],
            registry=registry,
        )
        self.evictions = Counter(
            "mcp_edge_cache_evictions",
            "Entries dropped from the memory cache: size (room needed) or expired",
            ["route", "reason"],
            registry=registry,
        )
        self.backend_errors = Counter(
            "mcp_edge_cache_backend_errors",
            "Redis cache operations that failed or timed out",
            ["op"],
            registry=registry,
        )
        self.bytes = Gauge(
            "mcp_edge_cache_bytes",
            "Bytes held by the memory cache",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.entries = Gauge(
            "mcp_edge_cache_entries",
            "Entries in the memory cache",
            registry=registry,
            multiprocess_mode="livesum",
        )

    def watch(self, cache: MemoryCache) -> None:
        if not multiprocess.enabled():
            self.bytes.set_function(lambda: cache.bytes)
            self.entries.set_function(lambda: len(cache))
            return

        # Several workers: a scrape reads the values files, so they are written as they change.
        def changed() -> None:
            self.bytes.set(cache.bytes)
            self.entries.set(len(cache))

        cache.on_change = changed


class _Recorder:
    """Passes the upstream's answer on while reading a JSON 200 body for its response. What it
    holds to read it is counted in ``reservation`` (kind ``cache_fill``); when the budget has no
    room, the answer passes on unread and is not kept (reason ``budget``)."""

    __slots__ = ("reader", "reason", "reservation", "response", "send")

    def __init__(
        self, send: Send, request_id: Any, max_bytes: int, reservation: Reservation
    ) -> None:
        self.send = send
        self.reservation = reservation
        self.reader = ResponseReader(request_id, max_bytes=max_bytes)
        #: The response for the request's id, once the whole body was read.
        self.response: dict[str, Any] | None = None
        self.reason: str | None = None  # why the answer cannot be kept

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers = message.get("headers", [])
            for name, _ in headers:
                if name.lower() == b"set-cookie":
                    self.reason = "set_cookie"
            if message["status"] != 200:
                self.reason = "status"
            else:
                head = self.reader.head(200, headers)
                if not isinstance(head, Framing) or head.body != "json":
                    self.reason = "not_json"  # e.g. an SSE stream
            message["headers"] = [*headers, (CACHE_HEADER, b"miss")]
        elif kind == "http.response.body" and self.reason is None:
            body = message.get("body", b"")
            if body and not self.reservation.resize(self.reader.pending + len(body)):
                self.reason = "budget"
                self.reservation.release()
                await self.send(message)
                return
            for ev in self.reader.feed(body, message.get("more_body", False)):
                if isinstance(ev, Final):
                    self.response = ev.doc
                elif isinstance(ev, Lines):
                    self.reason = "not_json"  # newline-delimited messages
                    break
                elif isinstance(ev, Problem):
                    self.reason = (
                        "too_large"
                        if ev.reason == "upstream_response_too_large"
                        else "not_json"
                        if ev.reason == "upstream_garbage"
                        else "not_ours"
                    )
        await self.send(message)


class EdgeCacheLayer:
    def __init__(
        self,
        app: ASGIApp,
        *,
        gateway_id: str,
        route: str,
        backend: CacheBackend,
        metrics: CacheMetrics,
        allow_private: bool = False,
        max_entry_bytes: int = 1024 * 1024,
        max_ttl_seconds: float = 3600.0,
        forwarding: Forwarding | None = None,
        identity_headers: Collection[str] = (),
        trust_public: bool = False,
        ignore_headers: Collection[str] = (),
        clock: Callable[[], float] = time.time,
        budget: AnswerBudget | None = None,
    ) -> None:
        """``forwarding``: the route's upstream request rule, the one its HTTP proxy sends by,
        so the key holds what the upstream gets. ``identity_headers``: the headers it adds that
        say who calls (left out of the key of public entries with ``trust_public``)."""
        self.app = app
        self.gateway_id = gateway_id
        self.route = route
        self.backend = backend
        self.metrics = metrics
        self.allow_private = allow_private
        self.max_entry_bytes = max_entry_bytes
        self.max_ttl_ms = int(max_ttl_seconds * 1000)
        self.clock = clock
        #: The process's answer pool: what a fill holds is counted there (kind ``cache_fill``).
        self.budget = budget
        self.forwarding = forwarding or Forwarding()
        ignored = frozenset(n.lower().encode("latin-1") for n in ignore_headers)
        self.leave_out = ignored
        identity = frozenset(n.lower().encode("latin-1") for n in identity_headers)
        #: Left out of the key of public entries: nothing, unless the route trusts ``public``.
        self.public_leave_out = ignored | identity if trust_public and identity else None
        self._hit = Count(metrics.lookups.labels(route, "hit"))
        self._miss = Count(metrics.lookups.labels(route, "miss"))
        self._bypass = Count(metrics.lookups.labels(route, "bypass"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        if scope["type"] != "http" or not ctx.modern or ctx.rpc_method not in CACHEABLE_METHODS:
            await self.app(scope, receive, send)
            return
        if ctx.retry_fields or ctx.retry_state_id is not None or ctx.request_id is None:
            self._bypass.inc()
            await self.app(scope, receive, send)
            return
        forwarded = self.forwarding.describe(scope, ctx)
        fingerprint = request_fingerprint(forwarded, self.leave_out)
        public_fingerprint = fingerprint
        if fingerprint is not None and self.public_leave_out is not None:
            public_fingerprint = request_fingerprint(forwarded, self.public_leave_out)
        if fingerprint is None or public_fingerprint is None:
            self._bypass.inc()
            await self.app(scope, receive, send)
            return

        public_key = cache_key(self.gateway_id, self.route, PUBLIC, "", public_fingerprint)
        private_key = None
        principal = ctx.principal
        if self.allow_private and principal is not None and principal.id != ANONYMOUS.id:
            partition = private_partition(principal.id, ctx.headers.get(b"authorization"))
            private_key = cache_key(self.gateway_id, self.route, PRIVATE, partition, fingerprint)

        now = int(self.clock() * 1000)
        entry = await self.backend.get(public_key, now)
        if entry is None and private_key is not None:
            entry = await self.backend.get(private_key, now)
        if entry is not None:
            self._hit.inc()
            answer = render_hit(ctx.request_id, entry.expires_ms - now, entry.tail)
            del entry  # (read from Redis, a copy of its own: only the answer is held from here)
            await start_response(send, 200, json_headers(len(answer), [(CACHE_HEADER, b"hit")]))
            await send({"type": "http.response.body", "body": answer})
            return

        self._miss.inc()
        recorder = _Recorder(
            send, ctx.request_id, self.max_entry_bytes, Reservation(self.budget, kind="cache_fill")
        )
        try:
            await self.app(scope, receive, recorder)
            await self._keep(ctx, recorder, public_key, private_key)
        finally:
            recorder.reservation.release()  # (the answer read is held until it is stored)

    async def _keep(
        self, ctx: Any, recorder: _Recorder, public_key: str, private_key: str | None
    ) -> None:
        """Store the answer the recorder read, when it may be kept."""
        if recorder.reason is not None or recorder.response is None:
            self.metrics.not_stored.labels(self.route, recorder.reason or "incomplete").inc()
            return
        cacheable, reason = judge_result(
            recorder.response,
            ctx.request_id,
            allow_private=private_key is not None,
            max_ttl_ms=self.max_ttl_ms,
        )
        recorder.response = None  # (what is stored is the entry's own bytes)
        if cacheable is None:
            self.metrics.not_stored.labels(self.route, reason).inc()
            return
        key = public_key if cacheable.scope == PUBLIC else private_key
        assert key is not None
        # While it is stored: the entry, and its encoding for Redis.
        if not recorder.reservation.resize(2 * len(cacheable.tail)):
            self.metrics.not_stored.labels(self.route, "budget").inc()
            return
        now = int(self.clock() * 1000)
        await self.backend.put(
            key, Entry(now + cacheable.ttl_ms, cacheable.scope, self.route, cacheable.tail), now
        )
        self.metrics.stores.labels(self.route, cacheable.scope).inc()


def log_backend_error(metrics: CacheMetrics) -> Callable[[str], None]:
    """Counts every Redis cache failure; logs at most one line every 10 s."""
    last = [-math.inf]

    def on_error(op: str) -> None:
        metrics.backend_errors.labels(op).inc()
        now = time.monotonic()
        if now - last[0] >= 10.0:
            last[0] = now
            event(
                logging.WARNING,
                "edge cache: Redis unavailable, serving from memory and upstream",
                op=op,
            )

    return on_error
