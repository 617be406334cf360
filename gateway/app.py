"""Wiring: configuration in, one ASGI application out.

The MCP routes are dispatched by exact path straight to their edge guard (no router on the hot
path); health, readiness, metrics and OAuth metadata are served by a small Starlette app.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import __version__
from gateway.adapters.endpoints import DnsEndpoints, Resolver, resolve_all
from gateway.adapters.era import EraRouter
from gateway.adapters.http_proxy import HttpProxy, build_client, build_upstream_client
from gateway.adapters.upstream_client import UpstreamClient
from gateway.bridge.app import BridgeSettings, LegacyBridge
from gateway.bridge import forward
from gateway.bridge.forward import FORWARD_PATH, Forwarder
from gateway.bridge.parking import ParkingLot
from gateway.bridge.pool import SessionPool
from gateway.bridge.legacy_front import RELAY_METHODS, RELAY_PATH, LegacyFront, Relay, StdioRoute
from gateway.bridge.sessions import HttpSessions
from gateway.bridge.sandbox import SandboxError
from gateway.bridge.stdio import StdioSessions, build_spec
from gateway.auth.base import AnonymousAuthenticator, Authenticator, Principal
from gateway.auth.upstream import UpstreamCredentials
from gateway.config import ConfigError, GatewayConfig, RouteConfig
from gateway.core import headers as h
from gateway.core import peer
from gateway.core.seal import KeyRing
from gateway.edge.asgi import ASGIApp, Receive, Scope, Send, replay_body
from gateway.edge.context import get_context
from gateway.edge.guard import MAX_UPSTREAM_STATE_CHARS, EdgeGuard, GuardSettings
from gateway.edge.listeners import ADMIN_PATHS, CLUSTER, PEER_PREFIX, Listener, Roles, admin_refusal
from gateway.edge.peer import PeerEndpoint, PeerGate
from gateway.edge.request_body import BodyBudget
from gateway.layers import RouteLayers
from gateway.observability.logs import event
from gateway.observability import multiprocess
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import build_tracing
from gateway.store import StateStore, StoreMetrics, build_store, make_replay_guard

LOOPBACK_HOSTS = ["localhost", "127.0.0.1", "[::1]"]


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def default_allowed_hosts(config: GatewayConfig) -> list[str] | None:
    if config.security.allowed_hosts is not None:
        return None if "*" in config.security.allowed_hosts else config.security.allowed_hosts
    if not _is_loopback(config.listen.host):
        return None  # behind a load balancer, Host varies; restrict it with security.allowed_hosts
    hosts = list(LOOPBACK_HOSTS)
    if config.gateway.public_url:
        hosts.append(urlsplit(config.gateway.public_url).netloc)
    return hosts


def default_allowed_origins(config: GatewayConfig) -> list[str]:
    if config.security.allowed_origins is not None:
        return config.security.allowed_origins
    origins: list[str] = []
    if _is_loopback(config.listen.host):
        origins += [f"{scheme}://{host}{port}" for scheme in ("http", "https")
                    for host in LOOPBACK_HOSTS for port in ("", ":*")]  # fmt: skip
    if config.gateway.public_url:
        parts = urlsplit(config.gateway.public_url)
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return origins


def advertise_url(config: GatewayConfig) -> str:
    """This replica's address as its peers reach it (sealed into the state of parked calls and
    into stdio session ids): the cluster listener's when there is one, else the public one's."""
    if config.cluster.advertise_url:
        return config.cluster.advertise_url
    listener = next((item for item in config.listeners() if item.role == CLUSTER), config.listeners()[0])
    host = listener.host
    if host in ("0.0.0.0", "::", ""):
        try:
            host = socket.gethostbyname(socket.gethostname())  # the pod IP in Kubernetes
        except OSError:
            host = "127.0.0.1"
    return Listener(listener.role, host, listener.port).url()


def build_authenticator(config: GatewayConfig, route: RouteConfig) -> Authenticator:
    mode = config.auth.mode
    if mode == "anonymous":
        return AnonymousAuthenticator()
    if mode == "none":
        raise ConfigError(
            "auth: no authentication configured; pass --anonymous (or set auth.mode: anonymous) "
            "to accept unauthenticated callers as one shared principal"
        )
    try:
        from gateway.auth.factory import build_route_authenticator
    except ImportError:
        raise ConfigError(f"auth.mode: {mode!r} is not available in this build") from None
    return build_route_authenticator(config, route)


def build_upstream_credentials(
    config: GatewayConfig, route: RouteConfig, authenticator: Authenticator
) -> UpstreamCredentials:
    """What the route sends upstream instead of the client's credentials (read once, now)."""
    from gateway.auth.factory import build_route_upstream_credentials

    return build_route_upstream_credentials(config, route, authenticator)


def _spends_approvals(route: RouteConfig) -> bool:
    """Approvals spent in the store: asked on this route, single-use, and not spent anyway."""
    p = route.policy
    return p.asks_approval and p.approval.single_use and not route.single_use


def _dns_for(route: RouteConfig, proxy: HttpProxy, resolver: Resolver) -> DnsEndpoints:
    """Resolved addresses replace the route's endpoints; the Host header keeps the name."""
    assert route.upstream is not None
    host = urlsplit(route.upstream).netloc
    return DnsEndpoints(
        route.name,
        route.upstream,
        on_change=lambda urls: proxy.set_endpoints(urls, host=host),
        refresh_seconds=route.dns_refresh_seconds,
        resolver=resolver,
    )


class GatewayApp:
    """The whole gateway as one ASGI app."""

    def __init__(
        self,
        config: GatewayConfig,
        ring: KeyRing,
        *,
        inner_apps: dict[str, ASGIApp] | None = None,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        store: StateStore | None = None,
        resolver: Resolver = resolve_all,
        tracer_provider: Any = None,
    ) -> None:
        self.config = config
        self.ring = ring
        self.clock = clock
        self.metrics = metrics or Metrics()
        #: OpenTelemetry spans (observability.tracing; ``tracer_provider`` for tests), or None.
        self.tracing = build_tracing(config.observability.tracing, gateway_id=config.gateway.id,
                                     provider=tracer_provider)  # fmt: skip
        self.reachable = False  # an HTTP upstream answered at least once
        self._client: aiohttp.ClientSession | None = None
        self._upstream_client: UpstreamClient | None = None
        self._probe_scope: anyio.CancelScope | None = None
        self.routes: dict[str, EdgeGuard] = {}
        self.proxies: dict[str, HttpProxy] = {}
        self.bridges: dict[str, LegacyBridge] = {}
        self.eras: dict[str, EraRouter] = {}
        self.stdio: dict[str, StdioSessions] = {}
        self.fronts: dict[str, LegacyFront] = {}
        self.relay = Relay(ring, self._get_client, clock=clock)
        self.advertise_url = advertise_url(config)
        self.parking = ParkingLot(config.cluster.max_parked)
        self.parking.on_expired = lambda route: self.metrics.parked.labels(route).set(len(self.parking))
        self.metrics.parked_capacity.set(config.cluster.max_parked)
        self.forwarder = Forwarder(ring, self._get_client, timeout=config.limits.read_timeout, clock=clock,
                                   max_answer_chars=forward.answer_limit(config.limits.max_inspect_bytes))  # fmt: skip
        self.dns: list[DnsEndpoints] = []
        self.store: StateStore | None = None
        store_metrics: StoreMetrics | None = None
        if any(r.single_use or _spends_approvals(r) for r in config.routes):
            self.store = store or build_store(config.store, clock)
            store_metrics = StoreMetrics(self.metrics.registry)
        # Rate limits and the edge cache, between each route's guard and its upstream adapter.
        self.layers = RouteLayers(config, self.metrics.registry, clock)
        # Request bodies held at once by all routes' requests in flight (one budget per process).
        self.body_budget = BodyBudget(config.limits.max_inflight_body_bytes)
        # Which endpoints each listener serves, and the replicas' endpoints (gateway.edge.peer).
        self.roles = Roles(config.listeners())
        self.peer_gate = PeerGate(ring, budget=self.body_budget, body_timeout=config.listen.body_timeout, clock=clock,
                                  on_refused=lambda name, reason: self.metrics.peer_refused.labels(name, reason).inc())  # fmt: skip
        self._forward_endpoint = PeerEndpoint("forward", peer.FORWARD, frozenset({"POST"}),
                                              forward.body_limit(config.limits.max_body_bytes))  # fmt: skip
        self._relay_endpoint = PeerEndpoint("relay", peer.RELAY, RELAY_METHODS, config.limits.max_body_bytes,
                                            matches=_same_session)  # fmt: skip
        inner_apps = inner_apps or {}
        allowed_hosts = default_allowed_hosts(config)
        allowed_origins = default_allowed_origins(config)
        for route in config.routes:
            authenticator = build_authenticator(config, route)
            inner = inner_apps.get(route.name)
            credentials = None
            if inner is None and route.stdio is not None:
                inner = self._stdio_route(route)
            elif inner is None:
                credentials = build_upstream_credentials(config, route, authenticator)
                proxy = HttpProxy(
                    route=route.name,
                    endpoints=route.upstream_urls(),
                    client=self._get_upstream_client,
                    header_hook=self._header_hook(credentials),
                    drop_headers=sorted(credentials.drop_headers),
                    metrics=self.metrics,
                    affinity=route.affinity,
                    on_reachable=self._mark_ready,
                )
                proxy.tracing = self.tracing
                self.proxies[route.name] = proxy
                inner = self._era_router(route, proxy, credentials)
                if route.dns and route.upstream:
                    self.dns.append(_dns_for(route, proxy, resolver))
            inner = self.layers.wrap(route, inner, credentials)
            settings = GuardSettings(
                route=route.name,
                audience=f"{config.gateway.id}/{route.name}",
                ring=ring,
                authenticator=authenticator,
                forward_client_token=route.upstream_auth.forward_client_token,
                ttl_seconds=config.state.ttl_seconds,
                leeway_seconds=config.state.leeway_seconds,
                max_rounds=config.state.max_rounds,
                strict=route.strict,
                legacy_clients=route.legacy_clients == "allow",
                seal_sessions=route.seal_sessions,
                max_body_bytes=config.limits.max_body_bytes,
                max_inspect_bytes=config.limits.max_inspect_bytes,
                final_response_timeout=config.limits.final_response_timeout,
                max_tool_names=config.observability.max_tool_names,
                allowed_hosts=allowed_hosts,
                allowed_origins=allowed_origins,
                clock=clock,
                access_log=config.logging.access_log,
                body_timeout=config.listen.body_timeout,
                body_budget=self.body_budget,
                max_json_depth=config.limits.max_json_depth,
                missing_capability_status=route.compat.missing_capability_status,
            )
            if route.single_use and self.store is not None and store_metrics is not None:
                settings.replay_guard = make_replay_guard(
                    self.store,
                    route=route.name,
                    leeway_seconds=config.state.leeway_seconds,
                    fail_open=config.store.fail_open,
                    metrics=store_metrics,
                )
            # Policy: the guard decides each call (the list filter is one of the route's layers).
            policy = self.layers.policy_for(route)
            if policy is not None:
                settings.policy = policy
                if _spends_approvals(route) and self.store is not None and store_metrics is not None:
                    # On single-use routes the guard has spent every state already.
                    policy.spend_approval = make_replay_guard(
                        self.store, route=route.name, leeway_seconds=config.state.leeway_seconds,
                        fail_open=config.store.fail_open, metrics=store_metrics)  # fmt: skip
            self.routes[route.path] = EdgeGuard(inner, settings, self.metrics, self.tracing)
        if not self.proxies:
            self.reachable = True
        self.aux = Starlette(routes=self._aux_routes())

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
            spec = build_spec(route.stdio)
        except SandboxError as exc:
            raise ConfigError(f"routes ({route.name}): {exc}") from None
        sessions = StdioSessions(route.name, spec, self.metrics)
        bridge = LegacyBridge(self._bridge_settings(route), sessions=sessions, parking=self.parking,
                              forwarder=self.forwarder, metrics=self.metrics)  # fmt: skip
        self.stdio[route.name] = sessions
        self.bridges[route.name] = bridge
        front = LegacyFront(route.name, sessions, owner=self.advertise_url, relay=self.relay)
        self.fronts[route.name] = front
        return StdioRoute(bridge, front)

    def _era_router(self, route: RouteConfig, proxy: HttpProxy, credentials: UpstreamCredentials) -> EraRouter:
        """The route's inner app: 2026-07-28 requests to the proxy or, for a legacy upstream, to
        the bridge."""
        b = route.bridge
        bridge = LegacyBridge(
            self._bridge_settings(route),
            sessions=HttpSessions(
                route=route.name,
                endpoints=proxy,
                client=self._get_client,
                pool=SessionPool(idle_seconds=b.session_idle_seconds, max_idle=b.max_idle_sessions),
                max_event_bytes=self.config.limits.max_inspect_bytes,
                metrics=self.metrics,
            ),
            header_hook=self._header_hook(credentials),
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
            client=self._get_client,
            static_headers=credentials.extra_headers(None, None),
            metrics=self.metrics,
            probe_timeout=self.config.limits.connect_timeout,
        )
        proxy.on_era_doubt = router.suspect
        self.bridges[route.name] = bridge
        self.eras[route.name] = router
        return router

    # ------------------------------------------------------------------ plumbing

    def _get_upstream_client(self) -> UpstreamClient:
        """The proxy's pooled client (its hot path); created in the running loop on first use."""
        if self._upstream_client is None:
            lim = self.config.limits
            self._upstream_client = build_upstream_client(
                connect_timeout=lim.connect_timeout,
                read_timeout=lim.read_timeout,
                max_connections=lim.max_connections,
                keepalive_seconds=lim.keepalive_seconds,
            )
        return self._upstream_client

    def _get_client(self) -> aiohttp.ClientSession:
        if self._client is None:
            lim = self.config.limits
            self._client = build_client(
                connect_timeout=lim.connect_timeout,
                read_timeout=lim.read_timeout,
                max_connections=lim.max_connections,
                keepalive_seconds=lim.keepalive_seconds,
            )
        return self._client

    @property
    def ready(self) -> bool:
        """HTTP upstreams answered, and every stdio route has a process ready."""
        return self.reachable and all(s.ready for s in self.stdio.values())

    def _mark_ready(self) -> None:
        if not self.reachable:
            self.reachable = True
            event(logging.INFO, "upstream reachable; ready")

    def _header_hook(
        self, credentials: UpstreamCredentials
    ) -> Callable[[Any], list[tuple[str, str]]]:
        """Per-request upstream headers: the route's credential, the caller's identity header
        and, only where the route forwards it, the caller's token (see gateway.auth.upstream)."""

        def hook(ctx: Any) -> list[tuple[str, str]]:
            return credentials.extra_headers(ctx.principal, ctx.client_token)

        return hook

    def _aux_routes(self) -> list[Route]:
        async def healthz(_: Request) -> Response:
            return JSONResponse({"status": "ok", "version": __version__})

        async def readyz(_: Request) -> Response:
            routes: dict[str, Any] = {name: {"era": router.setting, "detected": router.era}
                                      for name, router in self.eras.items()}  # fmt: skip
            for name, sessions in self.stdio.items():
                routes[name] = {"era": "legacy", "detected": "legacy", "processes": sessions.describe()}
            if self.ready:
                return JSONResponse({"status": "ready", "routes": routes})
            return JSONResponse({"status": "waiting for upstream", "routes": routes}, status_code=503)

        async def metrics(_: Request) -> Response:
            return Response(multiprocess.render(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

        routes = [
            Route("/healthz", healthz, methods=["GET", "HEAD"]),
            Route("/readyz", readyz, methods=["GET", "HEAD"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
        try:
            from gateway.auth.metadata import metadata_routes
        except ImportError:
            return routes
        return routes + metadata_routes(self.config)

    async def _probe_upstreams(self) -> None:
        """Readiness: the upstream answered at least once (any HTTP answer counts)."""
        with anyio.CancelScope() as scope:
            self._probe_scope = scope
            while not self.reachable:
                for proxy in self.proxies.values():
                    for endpoint in proxy.endpoints:
                        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                            probe = aiohttp.ClientTimeout(total=2.0)
                            async with self._get_client().get(endpoint, timeout=probe):
                                self._mark_ready()
                if not self.reachable:
                    await anyio.sleep(1.0)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    for sessions in self.stdio.values():
                        sessions.start()
                    for dns in self.dns:
                        await tg.start(dns.run)  # first lookup done before serving
                    if self.proxies:
                        tg.start_soon(self._probe_upstreams)
                    for router in self.eras.values():
                        tg.start_soon(router.run)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    # Local servers first, while nothing is cancelled: each process group gets
                    # SIGTERM, then SIGKILL after its grace period. Then the background tasks
                    # stop, and only then is the rest closed (outside the cancelled scope, where
                    # its awaits would be cancelled before they ran).
                    await self.close_local_servers()
                    tg.cancel_scope.cancel()
                    break
        try:
            await self.aclose()
        finally:
            await send({"type": "lifespan.shutdown.complete"})

    async def close_local_servers(self) -> None:
        """Stop every stdio process (and everything it started) now."""
        await asyncio.gather(*(s.aclose() for s in self.stdio.values()), return_exceptions=True)

    async def aclose(self) -> None:
        await self.parking.aclose()
        for bridge in self.bridges.values():
            await bridge.aclose()
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self._upstream_client is not None:
            await self._upstream_client.close()
            self._upstream_client = None
        if self.store is not None:
            await self.store.aclose()
        await self.layers.aclose()
        await self.config.auth.aclose()  # the JWKS client, if any
        if self.tracing is not None:
            tracing, self.tracing = self.tracing, None
            await asyncio.to_thread(tracing.shutdown)  # flushes the batch exporter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.roles.split and not self.roles.allows(scope):  # an endpoint served on another listener
                await _not_found(send)
                return
            path = scope["path"]
            guard = self.routes.get(path) or self.routes.get(path.rstrip("/"))
            if guard is not None:
                await guard(scope, receive, send)
                return
            if path.startswith(PEER_PREFIX):
                if path == FORWARD_PATH:
                    await self.peer_gate.serve(self._forward_endpoint, scope, receive, send, self._forwarded(send))
                elif path == RELAY_PATH:
                    await self.peer_gate.serve(self._relay_endpoint, scope, receive, send, self._relayed(scope, send))
                else:
                    await _not_found(send)
                return
            if path in ADMIN_PATHS and (status := admin_refusal(scope)) is not None:
                await _refuse_admin(send, status)  # before any body is read
                return
        elif kind == "lifespan":
            await self._lifespan(receive, send)
            return
        await self.aux(scope, receive, send)

    def _relayed(self, scope: Scope, send: Send) -> Any:
        """A 2025-era request for a virtual session held here, relayed by another replica (which
        authenticated the caller and opened the session token; see bridge.legacy_front)."""

        async def serve(claims: dict[str, Any], body: bytes, receive: Receive) -> None:
            front = self.fronts.get(str(claims.get("r")))
            if front is None:
                await _not_found(send)
                return
            get_context(scope).principal = Principal(id=str(claims.get("p")))
            await front(scope, replay_body(body, receive), send)

        return serve

    def _forwarded(self, send: Send) -> Any:
        """A retry forwarded by another replica for a call parked here (see bridge.forward)."""

        async def serve(claims: dict[str, Any], body: bytes, receive: Receive) -> None:
            payload = forward.open_payload(self.ring, forward.BODY_PURPOSE, body.decode("ascii", "replace"),
                                           now=self.clock(), max_chars=len(body))  # fmt: skip
            if payload is None or payload.get("route") != claims.get("r"):
                await send({"type": "http.response.start", "status": 403, "headers": [
                    (b"content-length", b"0"), (b"connection", b"close")]})  # fmt: skip
                await send({"type": "http.response.body", "body": b""})
                return
            bridge = self.bridges.get(str(payload.get("route")))
            reply = await bridge.serve_forwarded(payload) if bridge is not None else {"lost": True}
            sealed = forward.seal_answer(self.ring, reply, claims, now=self.clock())
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/plain"), (b"content-length", str(len(sealed)).encode())]})  # fmt: skip
            await send({"type": "http.response.body", "body": sealed})

        return serve


def _same_session(claims: dict[str, Any], scope: Scope) -> bool:
    """A relayed request's sealed header names the session id it carries."""
    return claims.get("s") == h.first(scope["headers"], "mcp-session-id")


_NOT_FOUND = b"Not Found"


async def _refuse_admin(send: Send, status: int) -> None:
    """An admin endpoint's refusal; the connection is closed, its body (if any) never read."""
    headers = [(b"content-length", b"0"), (b"connection", b"close")]
    if status == 405:
        headers.append((b"allow", b"GET, HEAD"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


async def _not_found(send: Send) -> None:
    await send({"type": "http.response.start", "status": 404, "headers": [
        (b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(_NOT_FOUND)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": _NOT_FOUND})
