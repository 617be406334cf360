"""Wiring of the optional layers between a route's edge guard and its upstream adapter:

    EdgeGuard → PolicyListLayer → RateLimitLayer → EdgeCacheLayer → EraRouter (HttpProxy | LegacyBridge)

Rate limits come first, so a request answered from the cache still spends its caller's budget.
The policy's list filter comes before both, so a cached list is filtered for each caller; the
policy's call decisions are taken in the guard itself (``GuardSettings.policy``, see
:meth:`RouteLayers.policy_for`), where the verified sealed state is at hand.
A route gets a layer only when it configures one; the budget store and the cache are shared by
every route of the process and built on first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from gateway.auth.upstream import UpstreamCredentials
from gateway.cache.layer import CacheMetrics, EdgeCacheLayer, ExtraHeaders, log_backend_error
from gateway.cache.store import CacheBackend, MemoryCache, RedisCache
from gateway.server.config import GatewayConfig, RouteConfig
from gateway.edge.asgi import ASGIApp
from gateway.ratelimit.limiter import BudgetStore, RateLimitLayer, RateLimitMetrics, build_budget_store
from gateway.ratelimit.rules import RoutePolicy
from gateway.policy.hook import RoutePolicy as RoutePolicyHook
from gateway.policy.wiring import PolicyWiring


class RouteLayers:
    def __init__(
        self, config: GatewayConfig, registry: CollectorRegistry, clock: Callable[[], float] = time.time
    ) -> None:
        self.config = config
        self.registry = registry
        self.clock = clock
        self.budgets: BudgetStore | None = None
        self.cache: CacheBackend | None = None
        self._limit_metrics: RateLimitMetrics | None = None
        self._cache_metrics: CacheMetrics | None = None
        self.policy = PolicyWiring(gateway_id=config.gateway.id, store=config.store, registry=registry,
                                   max_list_bytes=config.limits.max_inspect_bytes)  # fmt: skip

    def wrap(self, route: RouteConfig, inner: ASGIApp, credentials: UpstreamCredentials | None = None) -> ASGIApp:
        """``credentials``: the headers the route's upstream adapter drops and adds (HTTP
        upstreams), which the edge cache's key must see as the upstream will."""
        if route.cache.enabled:
            section = self.config.cache
            identity = [route.upstream_auth.principal_header] if route.upstream_auth.principal_header else []
            if route.upstream_auth.forward_client_token:
                identity.append("authorization")
            inner = EdgeCacheLayer(
                inner,
                gateway_id=self.config.gateway.id,
                route=route.name,
                backend=self._cache_backend(),
                metrics=self._cache_metrics_once(),
                allow_private=route.cache.private,
                max_entry_bytes=section.max_entry_bytes,
                max_ttl_seconds=section.max_ttl_seconds,
                drop_headers=credentials.drop_headers if credentials is not None else (),
                extra_headers=_extra_headers(credentials) if credentials is not None else None,
                identity_headers=identity,
                trust_public=route.cache.trust_public,
                ignore_headers=route.cache.ignore_headers,
                clock=self.clock,
            )
        if route.rate_limits.enabled:
            if self.budgets is None:
                self.budgets = build_budget_store(self.config.rate_limits, self.config.store)
            if self._limit_metrics is None:
                self._limit_metrics = RateLimitMetrics(self.registry)
            inner = RateLimitLayer(
                inner,
                route=route.name,
                policy=RoutePolicy(self.config.gateway.id, route.name, route.rate_limits),
                budgets=self.budgets,
                metrics=self._limit_metrics,
                fail_open=self.config.rate_limits.fail_open,
                leeway_seconds=self.config.state.leeway_seconds,
                retries_spend_once=not route.single_use,  # the guard already accepts a state once
                retries_per_unit=route.rate_limits.retries_per_unit,
                clock=self.clock,
            )
        if route.policy.enabled:
            inner = self.policy.list_layer(route.name, route.policy, inner)
        return inner

    def policy_for(self, route: RouteConfig) -> RoutePolicyHook | None:
        """The guard's policy hook of a route (None without a policy)."""
        return self.policy.policy(route.name, route.policy) if route.policy.enabled else None

    def _cache_metrics_once(self) -> CacheMetrics:
        if self._cache_metrics is None:
            self._cache_metrics = CacheMetrics(self.registry)
        return self._cache_metrics

    def _cache_backend(self) -> CacheBackend:
        if self.cache is None:
            metrics = self._cache_metrics_once()
            section = self.config.cache
            local = MemoryCache(section.max_bytes, on_evict=lambda route, reason: metrics.evictions.labels(
                route, reason).inc())  # fmt: skip
            metrics.watch(local)
            if section.backend == "redis":
                assert self.config.store.url is not None  # the config validator requires it
                self.cache = RedisCache(self.config.store.url, local, timeout=section.timeout_seconds,
                                        key_prefix=section.key_prefix, on_error=log_backend_error(metrics))  # fmt: skip
            else:
                self.cache = local
        return self.cache

    async def aclose(self) -> None:
        if self.budgets is not None:
            await self.budgets.aclose()
        if self.cache is not None:
            await self.cache.aclose()
        await self.policy.aclose()


def _extra_headers(credentials: UpstreamCredentials) -> ExtraHeaders:
    def extra(ctx: Any) -> list[tuple[str, str]]:
        return credentials.extra_headers(ctx.principal, ctx.client_token)

    return extra
