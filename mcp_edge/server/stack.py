"""Every route's ASGI application, composed here and only here.

A request to a route passes, in this order:

1. ``ObserveMiddleware``        its context, metrics, span, access log (mcp_edge.edge.observe)
2. ``CompatMiddleware``         the route's compat switches, only on routes that set one
3. ``TransportMiddleware``      Host/Origin, method, body, parsed once, envelope, authentication
4. ``LegacySessionsMiddleware`` sealed 2025-era session ids: only on routes that serve them, and
                                only for 2025-era requests (Transport hands those to it, the others
                                straight to Flow)
5. ``FlowMiddleware``           the MRTR flow: retries verified, the policy's decision, answers sealed
6. ``LastResort``               an unexpected failure inside becomes a JSON-RPC error
7. the route's features, each only when configured:
   ``PolicyListLayer``          lists filtered to what the caller may use (mcp_edge.policy)
   ``RateLimitLayer``           the caller's budgets (mcp_edge.ratelimit)
   ``EdgeCacheLayer``           public (and private) results kept and answered (mcp_edge.cache)
8. ``UpstreamIdentityLayer``     the caller's own credential at each member that configures
                                ``upstream_auth.token_exchange`` / ``oauth`` (mcp_edge.identity),
                                in front of the member's cache and adapter
9. the route's members (mcp_edge.upstream.member; their kinds in mcp_edge.upstream.kinds): a
   single-upstream route's one member's app itself (``EraRouter``, ``StdioRoute``,
   ``InProcessApp``...), or for a route with ``members:`` the ``FederatedRoute``
   (mcp_edge.upstream.federation) over them. The edge cache, when the route has one, sits inside
   each member (keyed by route and member), so a merged list is never cached whole.

Rate limits come before the cache, so a request answered from the cache still spends its caller's
budget; the list filter before both, so a cached list is filtered for each caller. The budget
store, the cache, the pin store and the single-use store are shared by every route of the process
and built on first use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Authenticator
from mcp_edge.auth.factory import (
    build_route_authenticator,
    build_route_upstream_credentials,
    check_route_auth,
)
from mcp_edge.auth.upstream import UpstreamCredentials
from mcp_edge.core.federation.names import Namespace
from mcp_edge.core.flow import FlowRules
from mcp_edge.core.seal import KeyRing
from mcp_edge.edge import config as edge_config
from mcp_edge.edge.asgi import ASGIApp
from mcp_edge.edge.body import AnswerBudget, BodyBudget
from mcp_edge.edge.compat import CompatMiddleware
from mcp_edge.edge.context import RequestContext
from mcp_edge.edge.draining import Draining
from mcp_edge.edge.flow import FlowMiddleware
from mcp_edge.edge.forwarding import Forwarding, HeaderHook
from mcp_edge.edge.last_resort import LastResort
from mcp_edge.edge.legacy_sessions import LegacySessionsMiddleware
from mcp_edge.edge.observe import ObserveMiddleware
from mcp_edge.edge.transport import TransportMiddleware
from mcp_edge.observability.metrics import Metrics, watch_answer_budget
from mcp_edge.sections import ConfigError
from mcp_edge.server.clients import Clients
from mcp_edge.server.config import GatewayConfig, RouteConfig
from mcp_edge.store import StateStore, StoreMetrics, build_store, make_replay_guard
from mcp_edge.upstream.config import UpstreamSettings
from mcp_edge.upstream.kinds import build_member
from mcp_edge.upstream.member import Member, MemberEnv, MemberSpec, member_key

# What a route uses is imported when a route uses it (the features, the kinds of upstream, what
# replicas share): a configuration loads only what it needs.
if TYPE_CHECKING:
    from mcp_edge.cache.layer import CacheMetrics
    from mcp_edge.cache.store import CacheBackend
    from mcp_edge.policy.hook import RoutePolicy
    from mcp_edge.policy.wiring import PolicyWiring
    from mcp_edge.ratelimit.limiter import Budgets, RateLimitMetrics
    from mcp_edge.upstream.federation.report import Reporter
    from mcp_edge.upstream.federation.route import FederatedRoute
    from mcp_edge.upstream.http.dns import DnsEndpoints, Resolver
    from mcp_edge.upstream.http.era import EraRouter
    from mcp_edge.upstream.http.proxy import HttpProxy
    from mcp_edge.upstream.legacy.bridge import LegacyBridge
    from mcp_edge.upstream.legacy.parking import ParkingLot
    from mcp_edge.upstream.stdio.front import LegacyFront
    from mcp_edge.upstream.stdio.processes import StdioSessions


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
        draining: Draining | None = None,
    ) -> None:
        self.config = config
        self.ring = ring
        self.metrics = metrics
        self.clients = clients
        self.tracing = tracing
        self.resolver = resolver
        self.advertise_url = advertise_url
        self.body_budget = body_budget
        #: Answers held for inspection by every route of the process (mcp_edge.edge.responses).
        self.answer_budget = AnswerBudget(config.limits.max_inflight_answer_bytes)
        watch_answer_budget(metrics, self.answer_budget)
        self.on_reachable = on_reachable
        self.clock = clock
        #: The process's graceful shutdown, which ends every listen stream.
        self.draining = draining
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
        self._policies: PolicyWiring | None = None
        self._parking: ParkingLot | None = None
        metrics.parked_capacity.set(config.cluster.max_parked)
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
        #: Each route's members (one for a single-upstream route), and its federation if it
        #: has ``members:``.
        self.members: dict[str, list[Member]] = {}
        self.federations: dict[str, FederatedRoute] = {}
        #: (``parking``, ``forwarder`` and ``relay``: with the first member that is no app in this
        #: process, see :meth:`_replicas_parts`.)
        #: Upstream identity (mcp_edge.identity.wiring.IdentityWiring), built when a member
        #: first configures it.
        self.identity: Any = None
        self.member_env = MemberEnv(
            config=config,
            metrics=metrics,
            clients=clients,
            parking=None,
            forwarder=None,
            relay=None,
            resolver=resolver,
            advertise_url=advertise_url,
            on_reachable=on_reachable,
            tracing=tracing,
            authenticated=config_authenticates(config),
            draining=draining,
            answer_budget=self.answer_budget,
        )

    # ------------------------------------------------------------------ built on first use

    @property
    def policies(self) -> PolicyWiring:
        """Each route's policy, and the pin store routes share (with the first route that has
        a policy)."""
        if self._policies is None:
            from mcp_edge.policy.wiring import PolicyWiring

            self._policies = PolicyWiring(
                gateway_id=self.config.gateway.id,
                store=self.config.store,
                registry=self.registry,
                max_list_bytes=self.config.limits.max_inspect_bytes,
                budget=self.answer_budget,
            )
        return self._policies

    @property
    def parking(self) -> ParkingLot:
        """Calls the legacy bridge parked in this process."""
        if self._parking is None:
            from mcp_edge.upstream.legacy.parking import ParkingLot

            parking = self._parking = ParkingLot(self.config.cluster.max_parked)
            parking.on_expired = lambda route: self.metrics.parked.labels(route).set(len(parking))
        return self._parking

    def _replicas_parts(self) -> None:
        """What members other than an app in this process share across replicas: the parked
        calls, the forwarding of retries to the replica holding one, the relay of 2025-era
        sessions (mcp_edge.cluster)."""
        env = self.member_env
        if env.parking is not None:
            return
        from mcp_edge.cluster import forward
        from mcp_edge.cluster.relay import Relay

        config, clock = self.config, self.clock
        env.parking = self.parking
        env.forwarder = forward.Forwarder(
            self.ring,
            self.clients.off_path,
            timeout=config.limits.read_timeout,
            clock=clock,
            max_answer_chars=forward.answer_limit(config.limits.max_inspect_bytes),
        )
        env.relay = Relay(self.ring, self.clients.off_path, clock=clock)

    # ------------------------------------------------------------------ a route

    def build(
        self, route: RouteConfig, inner: ASGIApp | None = None, *, app: ASGIApp | None = None
    ) -> ASGIApp:
        """The route's whole stack. ``inner``: an ASGI app in place of the upstream adapter (it
        gets the request as the edge left it); ``app``: an MCP app in this process as the route's
        upstream (mcp_edge.upstream.inprocess: it gets the request as an upstream would)."""
        authenticator = build_route_authenticator(self.config, route)
        if inner is not None:
            if route.cache.enabled:
                inner = self._cache_layer(route, route.name, route, inner, Forwarding())
            features = self._features(route, inner)
            return self._edge(route, features, authenticator, None)
        members = [
            self._member(route, name, settings, authenticator, app)
            for name, settings in route.upstreams()
        ]
        self.members[route.name] = members
        namespace = None
        if route.federated:
            namespace, upstream = self._federation(route, members)
        else:
            upstream = members[0].app  # a federation of one: the member's app itself
        return self._edge(route, self._features(route, upstream), authenticator, namespace)

    def _member(
        self,
        route: RouteConfig,
        name: str,
        settings: UpstreamSettings,
        authenticator: Authenticator,
        in_process_app: ASGIApp | None,
    ) -> Member:
        """One upstream of the route, of whatever kind its settings name (mcp_edge.upstream.kinds),
        with the route's edge cache inside it."""
        key = member_key(route.name, name if route.federated else None)
        credentials: UpstreamCredentials | None = None
        forwarding = Forwarding()
        if settings.stdio is None:
            if route.federated:
                try:
                    check_route_auth(self.config.auth, route.auth, settings.upstream_auth)
                except ValueError as exc:
                    raise ConfigError(f"routes[{key}]: {exc}") from None
            credentials = build_route_upstream_credentials(
                self.config, _Named(key, settings), authenticator
            )
            # What the upstream gets of each request: the adapter sends it, the cache keys on it.
            forwarding = Forwarding(
                drop_headers=credentials.drop_headers,
                header_hook=_extra_headers(credentials),
                client_host=in_process_app is not None,  # no hop: the app gets the client's Host
            )
        if in_process_app is None:
            self._replicas_parts()
        member = build_member(
            self.member_env,
            MemberSpec(
                route=route,
                name=name,
                key=key,
                settings=settings,
                forwarding=forwarding,
                credentials=credentials,
                legacy_front=not route.federated,
                in_process_app=in_process_app,
            ),
        )
        self._register(member)
        member.adapter = member.app
        if route.cache.enabled:
            member.app = self._cache_layer(route, key, settings, member.app, forwarding)
        if settings.upstream_auth.identity is not None:
            # In front of the cache too: a cached answer goes only to a caller the authorization
            # server still gives a token for this upstream.
            identity = self._identity_once()
            try:
                # Where its protected-resource metadata is (upstream_auth.oauth without issuer).
                first = next(iter(settings.upstream_urls()), None)
                member.app = identity.wrap(
                    key, name, settings.upstream_auth, member.app, upstream=first
                )
                member.adapter = identity.wrap(
                    key, name, settings.upstream_auth, member.adapter, upstream=first
                )
            except ValueError as exc:
                raise ConfigError(f"routes[{key}]: {exc}") from None
        return member

    def _identity_once(self) -> Any:
        if self.identity is None:
            from mcp_edge.identity.wiring import IdentityWiring

            self.identity = IdentityWiring(self.config, self.ring, self.registry, clock=self.clock)
        return self.identity

    def _register(self, member: Member) -> None:
        """The compatibility views (``app.proxies``, ``app.stdio``...), by member key."""
        key = member.key
        if member.proxy is not None:
            self.proxies[key] = member.proxy
        if member.bridge is not None:
            self.bridges[key] = member.bridge
        if member.era is not None:
            self.eras[key] = member.era
        if member.stdio is not None:
            self.stdio[key] = member.stdio
        if member.front is not None:
            self.fronts[key] = member.front
        if member.dns is not None:
            self.dns.append(member.dns)

    def _federation(self, route: RouteConfig, members: list[Member]) -> tuple[Namespace, ASGIApp]:
        """A route with ``members:``: its namespace and the app that fans out and routes."""
        from mcp_edge.upstream.federation.report import FederationMetrics, Reporter
        from mcp_edge.upstream.federation.route import FederatedRoute, Seat

        assert route.members is not None
        namespace = Namespace([m.names() for m in route.members], route.separator)
        reporter = Reporter(route.name, FederationMetrics.of(self.registry))
        limit = self.config.limits.read_timeout
        seats = []
        for member, settings in zip(members, route.members, strict=True):
            member.health.on_change = _health_reporter(reporter, member)
            seats.append(Seat(member, min(settings.list_timeout_ms / 1000, limit)))
        app = FederatedRoute(
            route=route.name,
            audience=f"{self.config.gateway.id}/{route.name}",
            seats=seats,
            namespace=namespace,
            ring=self.ring,
            reporter=reporter,
            max_bytes=self.config.limits.max_inspect_bytes,
            clock=self.clock,
            on_list_changed=self._forget_cached,
            draining=self.draining,
            budget=self.answer_budget,
            on_over_budget=self.metrics.answer_refused.labels(route.name, "answer_budget").inc,
        )
        self.federations[route.name] = app
        return namespace, app

    async def _forget_cached(self, member: Member) -> None:
        """A member's list changed: its cached parts go (from this process's memory and, with the
        Redis cache, from Redis, where every replica looks for them), before the client is told."""
        if self.cache is not None:
            await self.cache.invalidate(member.key)

    def _edge(
        self,
        route: RouteConfig,
        app: ASGIApp,
        authenticator: Authenticator,
        namespace: Namespace | None,
    ) -> ASGIApp:
        """The edge middlewares around the route's features (innermost first). ``namespace``:
        a route with members binds each sealed state to its member."""
        config = self.config
        audience = f"{config.gateway.id}/{route.name}"
        app = LastResort(app, route=route.name)
        rules = self._flow_rules(route, audience)
        app = FlowMiddleware(
            app,
            route=route.name,
            rules=rules,
            rules_for=_member_rules(namespace, rules, self._flow_rules, route)
            if namespace is not None
            else None,
            metrics=self.metrics,
            max_inspect_bytes=config.limits.max_inspect_bytes,
            final_response_timeout=config.limits.final_response_timeout,
            replay_guard=self._replay_guard(route) if route.single_use else None,
            policy=self._policy(route, namespace),
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
            forward_client_token=route.forwards_client_token(),
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

    def _flow_rules(self, route: RouteConfig, audience: str) -> FlowRules:
        state = self.config.state
        return FlowRules(
            ring=self.ring,
            audience=audience,
            ttl_seconds=state.ttl_seconds,
            leeway_seconds=state.leeway_seconds,
            max_rounds=state.max_rounds,
            strict=route.strict,
        )

    def _cache_layer(
        self,
        route: RouteConfig,
        key: str,
        settings: UpstreamSettings,
        app: ASGIApp,
        forwarding: Forwarding,
    ) -> ASGIApp:
        """The edge cache in front of one member (keyed by ``key``: route, or route/member).
        ``forwarding``: what the member's adapter sends of each request, which the key must see
        as the upstream will."""
        from mcp_edge.cache.layer import EdgeCacheLayer
        from mcp_edge.cache.store import RedisCache

        section = self.config.cache
        backend = self._cache_backend()
        if route.federated and isinstance(backend, RedisCache):
            backend.forgettable(key)  # a list change drops it on every replica
        upstream_auth = settings.upstream_auth
        identity = [upstream_auth.principal_header] if upstream_auth.principal_header else []
        if upstream_auth.forward_client_token or upstream_auth.identity is not None:
            identity.append("authorization")
        return EdgeCacheLayer(
            app,
            gateway_id=self.config.gateway.id,
            route=key,
            backend=backend,
            metrics=self._cache_metrics_once(),
            allow_private=route.cache.private,
            max_entry_bytes=section.max_entry_bytes,
            max_ttl_seconds=section.max_ttl_seconds,
            forwarding=forwarding,
            identity_headers=identity,
            trust_public=route.cache.trust_public,
            ignore_headers=route.cache.ignore_headers,
            clock=self.clock,
            budget=self.answer_budget,
        )

    def _features(self, route: RouteConfig, inner: ASGIApp) -> ASGIApp:
        """The route's features around its upstream (innermost first), each only when
        configured (the edge cache is inside each member: see :meth:`_member`)."""
        config = self.config
        app = inner
        if route.rate_limits.enabled:
            from mcp_edge.ratelimit.limiter import (
                RateLimitLayer,
                RateLimitMetrics,
                build_budget_store,
            )
            from mcp_edge.ratelimit.rules import RoutePolicy as RouteBudgets

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
            app = self.policies.list_layer(
                route.name,
                route.policy,
                app,
                on_over_budget=self.metrics.answer_refused.labels(route.name, "answer_budget").inc,
            )
        return app

    def _policy(self, route: RouteConfig, namespace: Namespace | None) -> RoutePolicy | None:
        """The route's call decisions, taken in the flow where the verified state is at hand."""
        if not route.policy.enabled:
            return None
        policy = self.policies.policy(route.name, route.policy)
        policy.rules.resolve = _resolver(route.name, namespace)
        if namespace is not None:
            policy.canonical_uri = namespace.canonical_form
        consent = self.identity.consent if self.identity is not None else None
        if consent is not None:  # rules that read ``grant`` see the caller's (mcp_edge.identity)
            policy.grant_lookup = consent.grant_lookup(route.name, federated=route.federated)
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

    # ------------------------------------------------------------------ shared stores

    def _cache_metrics_once(self) -> CacheMetrics:
        if self._cache_metrics is None:
            from mcp_edge.cache.layer import CacheMetrics

            self._cache_metrics = CacheMetrics(self.registry)
        return self._cache_metrics

    def _cache_backend(self) -> CacheBackend:
        if self.cache is None:
            from mcp_edge.cache.layer import log_backend_error
            from mcp_edge.cache.store import MemoryCache, RedisCache

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
                    max_ttl_seconds=section.max_ttl_seconds,
                    on_error=log_backend_error(metrics),
                )
            else:
                self.cache = local
        return self.cache

    async def aclose(self) -> None:
        if self._parking is not None:
            await self._parking.aclose()
        for members in self.members.values():
            for member in members:
                await member.aclose()
        if self.store is not None:
            await self.store.aclose()
        if self.budgets is not None:
            await self.budgets.aclose()
        if self.cache is not None:
            await self.cache.aclose()
        if self._policies is not None:
            await self._policies.aclose()
        if self.identity is not None:
            await self.identity.aclose()


def _extra_headers(credentials: UpstreamCredentials) -> HeaderHook:
    """Per-request upstream headers: the route's credential, the caller's identity header and,
    only where the route forwards it, the caller's token (see mcp_edge.auth.upstream)."""

    def extra(ctx: RequestContext) -> list[tuple[str, str]]:
        return credentials.extra_headers(ctx.principal, ctx.client_token, ctx.upstream_bearer)

    return extra


class _Named:
    """A member's settings under the name its errors give (``routes[<route>/<member>]``)."""

    def __init__(self, name: str, settings: UpstreamSettings) -> None:
        self.name = name
        self.upstream_auth = settings.upstream_auth


def _health_reporter(reporter: Reporter, member: Member) -> Callable[[bool], None]:
    def changed(up: bool) -> None:
        reporter.health(member.name, up, member.health.reason)

    return changed


def _member_of(namespace: Namespace, method: str, target: object) -> str | None:
    """The member a call's target names (the pure routing of mcp_edge.core.federation.names)."""
    if method == "tools/call":
        found = namespace.route_tool(target)
    elif method == "prompts/get":
        found = namespace.route_prompt(target)
    else:
        found = namespace.route_uri(target)
    return found.member if found is not None else None


def _member_rules(
    namespace: Namespace,
    rules: FlowRules,
    make: Callable[[RouteConfig, str], FlowRules],
    route: RouteConfig,
) -> Callable[[str, dict[str, Any]], FlowRules]:
    """A route with members: each state is bound to ``<gateway id>/<route>/<member>``, the member
    resolved from the request's target before the flow opens the state (so a state one member
    issued, replayed with another member's name, is refused and reaches nobody)."""
    by_member = {m.name: make(route, f"{rules.audience}/{m.name}") for m in namespace.members}

    def rules_for(method: str, params: dict[str, Any]) -> FlowRules:
        member = _member_of(
            namespace, method, params.get("uri" if method == "resources/read" else "name")
        )
        return by_member[member] if member is not None else rules

    return rules_for


def _resolver(
    route: str, namespace: Namespace | None
) -> Callable[[str, str], tuple[str, str] | None]:
    """``member`` and ``original`` for the policy's rules: a single-upstream route's one member is
    named after the route and keeps every name."""
    if namespace is None:
        return lambda method, target: (route, target)

    def resolve(method: str, target: str) -> tuple[str, str] | None:
        if method == "tools/call":
            found = namespace.route_tool(target)
        elif method == "prompts/get":
            found = namespace.route_prompt(target)
        else:
            found = namespace.route_uri(target)
        return (found.member, found.original) if found is not None else None

    return resolve
