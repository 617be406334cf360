"""Every route's ASGI application, composed here and only here.

A request to a route passes, in this order:

1. ``ObserveMiddleware``        its context, metrics, span, access log (gateway.edge.observe)
2. ``CompatMiddleware``         the route's compat switches, only on routes that set one
3. ``TransportMiddleware``      Host/Origin, method, body, parsed once, envelope, authentication
4. ``LegacySessionsMiddleware`` sealed 2025-era session ids: only on routes that serve them, and
                                only for 2025-era requests (Transport hands those to it, the others
                                straight to Flow)
5. ``FlowMiddleware``           the MRTR flow: retries verified, the policy's decision, answers sealed
6. ``LastResort``               an unexpected failure inside becomes a JSON-RPC error
7. the route's features, each only when configured:
   ``PolicyListLayer``          lists filtered to what the caller may use (gateway.policy)
   ``RateLimitLayer``           the caller's budgets (gateway.ratelimit)
   ``EdgeCacheLayer``           public (and private) results kept and answered (gateway.cache)
8. the upstream adapter: ``EraRouter`` (``HttpProxy``, or ``LegacyBridge`` for a 2025-era server),
   ``StdioRoute`` (a local server: ``LegacyBridge`` and the 2025-era ``LegacyFront``), or
   ``InProcessApp`` (an ASGI app in this process, wrapped by ``mcp_edge.Edge``: gateway.server.inprocess).

Rate limits come before the cache, so a request answered from the cache still spends its caller's
budget; the list filter before both, so a cached list is filtered for each caller. The budget
store, the cache, the pin store and the single-use store are shared by every route of the process
and built on first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry

from gateway.auth.base import Authenticator
from gateway.auth.factory import build_route_authenticator, build_route_upstream_credentials
from gateway.auth.upstream import UpstreamCredentials
from gateway.cache.layer import CacheMetrics, EdgeCacheLayer, log_backend_error
from gateway.cache.store import CacheBackend, MemoryCache, RedisCache
from gateway.cluster import forward
from gateway.cluster.forward import Forwarder
from gateway.cluster.relay import Relay
from gateway.core.flow import MAX_UPSTREAM_STATE_CHARS, FlowRules
from gateway.core.seal import KeyRing
from gateway.edge import config as edge_config
from gateway.edge.asgi import ASGIApp
from gateway.edge.body import AnswerBudget, BodyBudget
from gateway.edge.compat import CompatMiddleware
from gateway.edge.context import RequestContext
from gateway.edge.flow import FlowMiddleware
from gateway.edge.forwarding import Forwarding, HeaderHook
from gateway.edge.last_resort import LastResort
from gateway.edge.legacy_sessions import LegacySessionsMiddleware
from gateway.edge.observe import ObserveMiddleware
from gateway.edge.transport import TransportMiddleware
from gateway.observability.metrics import Metrics, watch_answer_budget
from gateway.policy.hook import RoutePolicy
from gateway.policy.wiring import PolicyWiring
from gateway.ratelimit.limiter import (
    Budgets,
    RateLimitLayer,
    RateLimitMetrics,
    build_budget_store,
)
from gateway.ratelimit.rules import RoutePolicy as RouteBudgets
from gateway.sections import ConfigError
from gateway.server.clients import Clients
from gateway.server.config import GatewayConfig, RouteConfig
from gateway.server.inprocess import InProcessApp
from gateway.store import StateStore, StoreMetrics, build_store, make_replay_guard
from gateway.upstream.http.dns import DnsEndpoints, Resolver
from gateway.upstream.http.era import EraRouter
from gateway.upstream.http.proxy import HttpProxy
from gateway.upstream.legacy.bridge import BridgeSettings, LegacyBridge
from gateway.upstream.legacy.parking import ParkingLot
from gateway.upstream.legacy.pool import SessionPool
from gateway.upstream.legacy.sessions import HttpSessions
from gateway.upstream.stdio.front import LegacyFront, StdioRoute
from gateway.upstream.stdio.processes import StdioSessions, build_spec
from gateway.upstream.stdio.sandbox import SandboxError


def config_authenticates(config: GatewayConfig) -> bool:
    """Callers are told apart (so a stdio route keeps them apart unless it says otherwise)."""
    return config.auth.mode in ("jwt", "trusted_header")


def spends_approvals(route: RouteConfig) -> bool:
    """Approvals spent in the store: asked on this route, single-use, and not spent anyway."""
    p = route.policy
    return p.asks_approval and p.approval.single_use and not route.single_use


class RouteStacks:
    """Builds each route's stack (:meth:`build`) and keeps what the app serves and closes: the
    upstream adapters by route, and the stores shared by routes."""

    def __init__(
        self,
        config: GatewayConfig,
        ring: KeyRing,
        *,
        metrics: Metrics,
        clients: Clients,
        tracing: Any = None,
        store: StateStore | None = None,
        resolver: Resolver,
        advertise_url: str,
        body_budget: BodyBudget,
        on_reachable: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.ring = ring
        self.metrics = metrics
        self.clients = clients
        self.tracing = tracing
        self.resolver = resolver
        self.advertise_url = advertise_url
        self.body_budget = body_budget
        #: Answers held for inspection by every route of the process (gateway.edge.responses).
        self.answer_budget = AnswerBudget(config.limits.max_inflight_answer_bytes)
        watch_answer_budget(metrics, self.answer_budget)
        self.on_reachable = on_reachable
        self.clock = clock
        registry: CollectorRegistry = metrics.registry
        self.registry = registry
        # Shared by the routes.
        self.store: StateStore | None = None
        self.store_metrics: StoreMetrics | None = None
        if any(r.single_use or spends_approvals(r) for r in config.routes):
            self.store = store or build_store(config.store, clock)
            self.store_metrics = StoreMetrics(registry)
        self.budgets: Budgets | None = None
        self.cache: CacheBackend | None = None
        self._limit_metrics: RateLimitMetrics | None = None
        self._cache_metrics: CacheMetrics | None = None
        self.policies = PolicyWiring(
            gateway_id=config.gateway.id,
            store=config.store,
            registry=registry,
            max_list_bytes=config.limits.max_inspect_bytes,
        )
        self.parking = ParkingLot(config.cluster.max_parked)
        self.parking.on_expired = lambda route: metrics.parked.labels(route).set(len(self.parking))
        metrics.parked_capacity.set(config.cluster.max_parked)
        self.forwarder = Forwarder(
            ring,
            clients.off_path,
            timeout=config.limits.read_timeout,
            clock=clock,
            max_answer_chars=forward.answer_limit(config.limits.max_inspect_bytes),
        )
        self.relay = Relay(ring, clients.off_path, clock=clock)
        self.allowed_hosts = edge_config.allowed_hosts(
            config.security, config.listen, config.gateway
        )
        self.allowed_origins = edge_config.allowed_origins(
            config.security, config.listen, config.gateway
        )
        # The upstream adapters, by route name.
        self.proxies: dict[str, HttpProxy] = {}
        self.bridges: dict[str, LegacyBridge] = {}
        self.eras: dict[str, EraRouter] = {}
        self.stdio: dict[str, StdioSessions] = {}
        self.fronts: dict[str, LegacyFront] = {}
        self.dns: list[DnsEndpoints] = []

    # ------------------------------------------------------------------ a route

    def build(
        self, route: RouteConfig, inner: ASGIApp | None = None, *, app: ASGIApp | None = None
    ) -> ASGIApp:
        """The route's whole stack. ``inner``: an ASGI app in place of the upstream adapter (it
        gets the request as the edge left it); ``app``: an MCP app in this process as the route's
        upstream (gateway.server.inprocess: it gets the request as an upstream would)."""
        config = self.config
        authenticator = build_route_authenticator(config, route)
        credentials: UpstreamCredentials | None = None
        forwarding = Forwarding()
        if inner is None and route.stdio is not None:
            inner = self._stdio_route(route)
        elif inner is None:
            credentials = build_route_upstream_credentials(config, route, authenticator)
            # What the upstream gets of each request: the adapter sends it, the cache keys on it.
            forwarding = Forwarding(
                drop_headers=credentials.drop_headers, header_hook=_extra_headers(credentials)
            )
            inner = (
                self._http_route(route, credentials, forwarding)
                if app is None
                else InProcessApp(
                    app,
                    route=route.name,
                    forwarding=forwarding,
                    metrics=self.metrics,
                    tracing=self.tracing,
                )
            )
        app = self._features(route, inner, forwarding)
        return self._edge(route, app, authenticator)

    def _edge(self, route: RouteConfig, app: ASGIApp, authenticator: Authenticator) -> ASGIApp:
        """The edge middlewares around the route's features (innermost first)."""
        config = self.config
        audience = f"{config.gateway.id}/{route.name}"
        app = LastResort(app, route=route.name)
        app = FlowMiddleware(
            app,
            route=route.name,
            rules=FlowRules(
                ring=self.ring,
                audience=audience,
                ttl_seconds=config.state.ttl_seconds,
                leeway_seconds=config.state.leeway_seconds,
                max_rounds=config.state.max_rounds,
                strict=route.strict,
            ),
            metrics=self.metrics,
            max_inspect_bytes=config.limits.max_inspect_bytes,
            final_response_timeout=config.limits.final_response_timeout,
            replay_guard=self._replay_guard(route) if route.single_use else None,
            policy=self._policy(route),
            answer_budget=self.answer_budget,
            clock=self.clock,
        )
        legacy_app = None
        if route.legacy_clients == "allow" and route.seal_sessions:
            legacy_app = LegacySessionsMiddleware(
                app, route=route.name, ring=self.ring, audience=audience
            )
        app = TransportMiddleware(
            app,
            legacy_app=legacy_app,
            route=route.name,
            authenticator=authenticator,
            allowed_hosts=self.allowed_hosts,
            allowed_origins=self.allowed_origins,
            max_body_bytes=config.limits.max_body_bytes,
            body_timeout=config.listen.body_timeout,
            body_budget=self.body_budget,
            metrics=self.metrics,
            max_json_depth=config.limits.max_json_depth,
            legacy_clients=route.legacy_clients == "allow",
            forward_client_token=route.upstream_auth.forward_client_token,
        )
        if route.compat.missing_capability_status != 400:
            app = CompatMiddleware(
                app, missing_capability_status=route.compat.missing_capability_status
            )
        return ObserveMiddleware(
            app,
            route=route.name,
            metrics=self.metrics,
            tracing=self.tracing,
            access_log=config.logging.access_log,
            max_tool_names=config.observability.max_tool_names,
        )

    def _features(self, route: RouteConfig, inner: ASGIApp, forwarding: Forwarding) -> ASGIApp:
        """The route's features around its upstream adapter (innermost first), each only when
        configured. ``forwarding``: what the HTTP adapter sends of each request, which the edge
        cache's key must see as the upstream will."""
        config = self.config
        app = inner
        if route.cache.enabled:
            section = config.cache
            identity = (
                [route.upstream_auth.principal_header]
                if route.upstream_auth.principal_header
                else []
            )
            if route.upstream_auth.forward_client_token:
                identity.append("authorization")
            app = EdgeCacheLayer(
                app,
                gateway_id=config.gateway.id,
                route=route.name,
                backend=self._cache_backend(),
                metrics=self._cache_metrics_once(),
                allow_private=route.cache.private,
                max_entry_bytes=section.max_entry_bytes,
                max_ttl_seconds=section.max_ttl_seconds,
                forwarding=forwarding,
                identity_headers=identity,
                trust_public=route.cache.trust_public,
                ignore_headers=route.cache.ignore_headers,
                clock=self.clock,
            )
        if route.rate_limits.enabled:
            if self.budgets is None:
                self.budgets = build_budget_store(config.rate_limits, config.store)
            if self._limit_metrics is None:
                self._limit_metrics = RateLimitMetrics(self.registry)
            app = RateLimitLayer(
                app,
                route=route.name,
                policy=RouteBudgets(config.gateway.id, route.name, route.rate_limits),
                budgets=self.budgets,
                metrics=self._limit_metrics,
                fail_open=config.rate_limits.fail_open,
                leeway_seconds=config.state.leeway_seconds,
                retries_spend_once=not route.single_use,  # the flow already accepts a state once
                retries_per_unit=route.rate_limits.retries_per_unit,
                clock=self.clock,
            )
        if route.policy.enabled:
            app = self.policies.list_layer(route.name, route.policy, app)
        return app

    def _policy(self, route: RouteConfig) -> RoutePolicy | None:
        """The route's call decisions, taken in the flow where the verified state is at hand."""
        if not route.policy.enabled:
            return None
        policy = self.policies.policy(route.name, route.policy)
        if spends_approvals(route):
            # On single-use routes the flow has spent every state already.
            policy.spend_approval = self._replay_guard(route)
        return policy

    def _replay_guard(self, route: RouteConfig) -> Any:
        assert self.store is not None and self.store_metrics is not None
        return make_replay_guard(
            self.store,
            route=route.name,
            leeway_seconds=self.config.state.leeway_seconds,
            fail_open=self.config.store.fail_open,
            metrics=self.store_metrics,
        )

    # ------------------------------------------------------------------ upstream adapters

    def _bridge_settings(self, route: RouteConfig) -> BridgeSettings:
        b = route.bridge
        return BridgeSettings(
            route=route.name,
            strategies=b.strategy,
            tool_strategies=dict(b.tools),
            prompt_strategies=dict(b.prompts),
            park_seconds=min(b.park_seconds, self.config.state.ttl_seconds),
            json_response_timeout=b.json_response_timeout,
            question_window=b.question_window_ms / 1000,
            max_event_bytes=self.config.limits.max_inspect_bytes,
            max_state_chars=MAX_UPSTREAM_STATE_CHARS,
            advertise_url=self.advertise_url,
        )

    def _stdio_route(self, route: RouteConfig) -> ASGIApp:
        """A local server the gateway runs: 2026-07-28 requests through the bridge, 2025-era
        clients through the legacy front over the same processes."""
        assert route.stdio is not None
        try:
            spec = build_spec(route.stdio, authenticated=config_authenticates(self.config))
        except SandboxError as exc:
            raise ConfigError(f"routes ({route.name}): {exc}") from None
        sessions = StdioSessions(route.name, spec, self.metrics)
        bridge = LegacyBridge(
            self._bridge_settings(route),
            sessions=sessions,
            parking=self.parking,
            forwarder=self.forwarder,
            metrics=self.metrics,
        )
        self.stdio[route.name] = sessions
        self.bridges[route.name] = bridge
        front = LegacyFront(route.name, sessions, owner=self.advertise_url, relay=self.relay)
        self.fronts[route.name] = front
        return StdioRoute(bridge, front)

    def _http_route(
        self, route: RouteConfig, credentials: UpstreamCredentials, forwarding: Forwarding
    ) -> ASGIApp:
        """An HTTP upstream: 2026-07-28 requests to the proxy or, for a legacy upstream, to the
        bridge; the route's endpoints from its config or, with ``dns``, from DNS."""
        proxy = HttpProxy(
            route=route.name,
            endpoints=route.upstream_urls(),
            client=self.clients.upstream,
            forwarding=forwarding,
            metrics=self.metrics,
            affinity=route.affinity,
            on_reachable=self.on_reachable,
        )
        proxy.tracing = self.tracing
        self.proxies[route.name] = proxy
        b = route.bridge
        bridge = LegacyBridge(
            self._bridge_settings(route),
            sessions=HttpSessions(
                route=route.name,
                endpoints=proxy,
                client=self.clients.off_path,
                pool=SessionPool(idle_seconds=b.session_idle_seconds, max_idle=b.max_idle_sessions),
                max_event_bytes=self.config.limits.max_inspect_bytes,
                metrics=self.metrics,
            ),
            header_hook=_extra_headers(credentials),
            parking=self.parking,
            forwarder=self.forwarder,
            metrics=self.metrics,
        )
        router = EraRouter(
            route=route.name,
            setting=route.era,
            proxy=proxy,
            bridge=bridge,
            endpoints=lambda: proxy.endpoints,
            host_for=proxy.host_for,
            client=self.clients.off_path,
            static_headers=credentials.extra_headers(None, None),
            metrics=self.metrics,
            probe_timeout=self.config.limits.connect_timeout,
        )
        proxy.on_era_doubt = router.suspect
        self.bridges[route.name] = bridge
        self.eras[route.name] = router
        if route.dns and isinstance(route.upstream, str):
            host = urlsplit(route.upstream).netloc
            self.dns.append(
                DnsEndpoints(
                    route.name,
                    route.upstream,
                    on_change=lambda urls: proxy.set_endpoints(urls, host=host),
                    refresh_seconds=route.dns_refresh_seconds,
                    resolver=self.resolver,
                )
            )
        # A route fixed to the 2026-07-28 era sends everything to the proxy: no router hop.
        return proxy if route.era == "modern" else router

    # ------------------------------------------------------------------ shared stores

    def _cache_metrics_once(self) -> CacheMetrics:
        if self._cache_metrics is None:
            self._cache_metrics = CacheMetrics(self.registry)
        return self._cache_metrics

    def _cache_backend(self) -> CacheBackend:
        if self.cache is None:
            metrics = self._cache_metrics_once()
            section = self.config.cache
            local = MemoryCache(
                section.max_bytes,
                on_evict=lambda route, reason: metrics.evictions.labels(route, reason).inc(),
            )
            metrics.watch(local)
            if section.backend == "redis":
                assert self.config.store.url is not None  # the config validator requires it
                self.cache = RedisCache(
                    self.config.store.url,
                    local,
                    timeout=section.timeout_seconds,
                    key_prefix=section.key_prefix,
                    on_error=log_backend_error(metrics),
                )
            else:
                self.cache = local
        return self.cache

    async def aclose(self) -> None:
        await self.parking.aclose()
        for bridge in self.bridges.values():
            await bridge.aclose()
        if self.store is not None:
            await self.store.aclose()
        if self.budgets is not None:
            await self.budgets.aclose()
        if self.cache is not None:
            await self.cache.aclose()
        await self.policies.aclose()


def _extra_headers(credentials: UpstreamCredentials) -> HeaderHook:
    """Per-request upstream headers: the route's credential, the caller's identity header and,
    only where the route forwards it, the caller's token (see gateway.auth.upstream)."""

    def extra(ctx: RequestContext) -> list[tuple[str, str]]:
        return credentials.extra_headers(ctx.principal, ctx.client_token)

    return extra
