"""Wiring: configuration in, one ASGI application out.

The MCP routes are dispatched by exact path straight to their stack (mcp_edge.server.stack; no
router on the hot path); the replicas' endpoints (``/.mcp-edge/*``) to mcp_edge.cluster.endpoints;
health, readiness, metrics and OAuth metadata are served by a small Starlette app. Which of them a
request may reach depends on the listener it arrived on (mcp_edge.cluster.listeners).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import anyio
import orjson

from mcp_edge.cluster.listeners import (
    ADMIN_PATHS,
    CLUSTER,
    CONSENT_PREFIX,
    GRANTS_PATH,
    PEER_PREFIX,
    Listener,
    Roles,
    admin_refusal,
)
from mcp_edge.core.seal import KeyRing
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_empty
from mcp_edge.edge.body import BodyBudget
from mcp_edge.edge.context import LOOP_STATE_KEY
from mcp_edge.edge.draining import Draining
from mcp_edge.edge.last_resort import Sent, route_failed
from mcp_edge.observability import multiprocess
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics, watch_held
from mcp_edge.observability.tracing import build_tracing
from mcp_edge.server.clients import Clients
from mcp_edge.server.config import GatewayConfig
from mcp_edge.server.stack import RouteStacks
from mcp_edge.store import StateStore
from mcp_edge.upstream.http.dns import DnsEndpoints, Resolver, resolve_all
from mcp_edge.upstream.member import Member
from mcp_edge.version import __version__

# The replicas' endpoints, the small endpoints' app and the kinds of upstream are imported where
# a gateway has them.
if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.routing import Route

    from mcp_edge.cluster.endpoints import PeerEndpoints
    from mcp_edge.upstream.http.client import UpstreamClient
    from mcp_edge.upstream.http.era import EraRouter
    from mcp_edge.upstream.http.proxy import HttpProxy
    from mcp_edge.upstream.legacy.bridge import LegacyBridge
    from mcp_edge.upstream.legacy.parking import ParkingLot
    from mcp_edge.upstream.stdio.front import LegacyFront
    from mcp_edge.upstream.stdio.processes import StdioSessions


async def _not_found(send: Send) -> None:
    from mcp_edge.cluster.endpoints import not_found

    await not_found(send)


def _closing_refusals(send: Send) -> Send:
    """``send`` for the small endpoints (which read no body): a refusal (4xx) closes the
    connection, so a body the request announced is never read."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
        await send(message)

    return closing


def advertise_url(config: GatewayConfig) -> str:
    """This replica's address as its peers reach it (sealed into the state of parked calls and
    into stdio session ids): the cluster listener's when there is one, else the public one's."""
    if config.cluster.advertise_url:
        return config.cluster.advertise_url
    listener = next(
        (item for item in config.listeners() if item.role == CLUSTER), config.listeners()[0]
    )
    host = listener.host
    if host in ("0.0.0.0", "::", ""):
        try:
            host = socket.gethostbyname(socket.gethostname())  # the pod IP in Kubernetes
        except OSError:
            host = "127.0.0.1"
    return Listener(listener.role, host, listener.port).url()


class GatewayApp:
    """The whole gateway as one ASGI app."""

    def __init__(
        self,
        config: GatewayConfig,
        ring: KeyRing,
        *,
        inner_apps: dict[str, ASGIApp] | None = None,
        in_process_apps: dict[str, ASGIApp] | None = None,
        clock: Callable[[], float] = time.time,
        metrics: Metrics | None = None,
        store: StateStore | None = None,
        resolver: Resolver = resolve_all,
        tracer_provider: Any = None,
        upstream_client: UpstreamClient | None = None,
    ) -> None:
        self.config = config
        self.ring = ring
        self.clock = clock
        self.metrics = metrics or Metrics()
        #: OpenTelemetry spans (observability.tracing; ``tracer_provider`` for tests), or None.
        self.tracing = build_tracing(
            config.observability.tracing, gateway_id=config.gateway.id, provider=tracer_provider
        )
        self.reachable = False  # an HTTP upstream answered at least once
        self.clients = Clients(config.limits, upstream=upstream_client)
        self._probe_scope: anyio.CancelScope | None = None
        self.advertise_url = advertise_url(config)
        # Request bodies held at once by all routes' requests in flight (one budget per process).
        self.body_budget = BodyBudget(config.limits.max_inflight_body_bytes)
        watch_held(self.metrics, self.body_budget)
        #: Begun when the process starts its graceful shutdown (:meth:`begin_draining`): every
        #: listen stream ends then, while other requests finish.
        self.draining = Draining()
        self.stacks = RouteStacks(
            config,
            ring,
            metrics=self.metrics,
            clients=self.clients,
            tracing=self.tracing,
            store=store,
            resolver=resolver,
            advertise_url=self.advertise_url,
            body_budget=self.body_budget,
            on_reachable=self._mark_ready,
            clock=clock,
            draining=self.draining,
        )
        inner_apps = inner_apps or {}
        in_process_apps = in_process_apps or {}  # routes whose upstream is an app in this process
        #: Each MCP route's stack, by path.
        self.routes: dict[str, ASGIApp] = {
            route.path: self.stacks.build(
                route, inner_apps.get(route.name), app=in_process_apps.get(route.name)
            )
            for route in config.routes
        }
        self.route_names = {route.path: route.name for route in config.routes}
        if not self.proxies:
            self.reachable = True
        # Which endpoints each listener serves.
        self.roles = Roles(config.listeners())
        #: The consent pages (mcp_edge.identity.consent_endpoints), when a member asks for
        #: users' own grants (``upstream_auth.oauth``).
        self.consent: ASGIApp | None = None
        identity = self.stacks.identity
        if identity is not None and identity.consent is not None:
            self.consent = identity.consent.endpoints(
                body_budget=self.body_budget, body_timeout=config.listen.body_timeout
            )

    @cached_property
    def aux(self) -> Starlette:
        """Health, readiness, metrics and the OAuth metadata: a small Starlette app, built with
        the first request for one of them."""
        from starlette.applications import Starlette

        return Starlette(routes=self._aux_routes())

    @cached_property
    def peers(self) -> PeerEndpoints:
        """The replicas' endpoints (``/.mcp-edge/*``), built with the first request for one."""
        from mcp_edge.cluster.endpoints import PeerEndpoints

        config = self.config
        return PeerEndpoints(
            self.ring,
            budget=self.body_budget,
            body_timeout=config.listen.body_timeout,
            max_body_bytes=config.limits.max_body_bytes,
            # Addressed by member key: the route, or route/member on a route with members.
            forwarded={m.key: m.forwarded for m in self.all_members() if m.forwarded is not None},
            fronts=self.stacks.fronts,
            answer_budget=self.stacks.answer_budget,
            clock=self.clock,
            on_refused=lambda name, reason: self.metrics.peer_refused.labels(name, reason).inc(),
            on_over_budget=lambda route: self.metrics.answer_refused.labels(
                route, "answer_budget"
            ).inc(),
        )

    # ------------------------------------------------------------------ what the stacks hold

    @property
    def proxies(self) -> dict[str, HttpProxy]:
        return self.stacks.proxies

    @property
    def bridges(self) -> dict[str, LegacyBridge]:
        return self.stacks.bridges

    @property
    def eras(self) -> dict[str, EraRouter]:
        return self.stacks.eras

    @property
    def stdio(self) -> dict[str, StdioSessions]:
        return self.stacks.stdio

    @property
    def fronts(self) -> dict[str, LegacyFront]:
        return self.stacks.fronts

    @property
    def dns(self) -> list[DnsEndpoints]:
        return self.stacks.dns

    def all_members(self) -> list[Member]:
        """Every route's members (a single-upstream route has one)."""
        return [m for members in self.stacks.members.values() for m in members]

    @property
    def parking(self) -> ParkingLot:
        return self.stacks.parking

    @property
    def store(self) -> StateStore | None:
        return self.stacks.store

    @property
    def ready(self) -> bool:
        """HTTP upstreams answered, every single-upstream stdio route has a process ready, and
        every route with members has at least one member able to serve."""
        if not self.reachable:
            return False
        for name, members in self.stacks.members.items():
            if name in self.stacks.federations:
                if not any(m.ready for m in members):
                    return False
            elif not all(m.ready for m in members if m.stdio is not None):
                return False
        return True

    def _mark_ready(self) -> None:
        if not self.reachable:
            self.reachable = True
            event(logging.INFO, "upstream reachable; ready")

    # ------------------------------------------------------------------ ASGI

    async def serve_route(
        self, route: ASGIApp, path: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Call a route's stack: whatever escapes it is still a JSON-RPC answer (one try around
        the call: no coroutine of its own on the way through)."""
        sent = Sent(send)
        try:
            await route(scope, receive, sent)
        except Exception as exc:  # noqa: BLE001
            name = self.route_names.get(path) or self.route_names.get(path.rstrip("/"))
            await route_failed(scope, sent, exc, route=name or "")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            if self.roles.split and not self.roles.allows(
                scope
            ):  # an endpoint served on another listener
                await _not_found(send)
                return
            path = scope["path"]
            route = self.routes.get(path) or self.routes.get(path.rstrip("/"))
            if route is not None:
                await self.serve_route(route, path, scope, receive, send)
                return
            if path.startswith(CONSENT_PREFIX):
                if self.consent is None:
                    await _not_found(send)
                else:
                    await self.consent(scope, receive, send)
                return
            if path.startswith(PEER_PREFIX):
                await self.peers(scope, receive, send)
                return
            if path == GRANTS_PATH:
                await self._grants(scope, send)
                return
            if path in ADMIN_PATHS and (status := admin_refusal(scope)) is not None:
                # Before any body is read; the connection is closed.
                extra = [(b"connection", b"close")] + (
                    [(b"allow", b"GET, HEAD")] if status == 405 else []
                )
                await send_empty(send, status, extra)
                return
            from starlette.routing import Match

            if not any(r.matches(scope)[0] is not Match.NONE for r in self.aux.routes):
                await _not_found(send)  # before any body is read; the connection is closed
                return
            await self.aux(scope, receive, _closing_refusals(send))
            return
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        await self.aux(scope, receive, send)

    async def _grants(self, scope: Scope, send: Send) -> None:
        """``GET /grants?issuer=&subject=`` (or ``principal=``) lists a principal's grants;
        ``DELETE`` with the same (and ``member=``: only that one) revokes them. Only on the admin
        listener's own port; no body is read."""
        identity = self.stacks.identity
        consent = identity.consent if identity is not None else None
        if consent is None or self.config.admin.listen is None:
            await _not_found(send)
            return
        from mcp_edge.identity.grant_admin import BadQuery, principal_of

        close = [(b"connection", b"close")]
        method = scope["method"]
        if method not in ("GET", "HEAD", "DELETE"):
            await send_empty(send, 405, [*close, (b"allow", b"GET, HEAD, DELETE")])
            return
        if admin_refusal({**scope, "method": "GET"}) is not None:  # a body
            await send_empty(send, 413, close)
            return
        if any(name in (b"origin", b"sec-fetch-site") for name, _ in scope["headers"]):
            # A browser's request (a page it shows, reaching this port by DNS rebinding or from
            # a local network): an operator's tools never send these. Nothing is listed or
            # revoked for a web page.
            await send_empty(send, 403, close)
            return
        try:
            from mcp_edge.identity.consent_endpoints import BadRequest, parse_query

            query = parse_query(scope.get("query_string", b""))
            principal = principal_of(
                issuer=query.get("issuer"),
                subject=query.get("subject"),
                principal=query.get("principal"),
            )
            status, doc = await consent.admin(method, principal, query.get("member"))
        except (BadQuery, BadRequest) as exc:
            status, doc = 400, {"error": str(exc)}
        body = b"" if method == "HEAD" else orjson.dumps(doc)
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(orjson.dumps(doc))),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _aux_routes(self) -> list[Route]:
        from prometheus_client import CONTENT_TYPE_LATEST
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route

        from mcp_edge.edge.metadata import metadata_routes

        async def healthz(_: Request) -> Response:
            return JSONResponse({"status": "ok", "version": __version__})

        async def readyz(_: Request) -> Response:
            routes: dict[str, Any] = {}
            for name, members in self.stacks.members.items():
                if name not in self.stacks.federations:
                    if members[0].kind != "asgi":
                        described = members[0].describe()
                        described.pop("kind")
                        routes[name] = described
                    continue
                routes[name] = {
                    "ready": any(m.ready for m in members),
                    "members": {
                        m.name: {**m.describe(), **m.health.describe(), "ready": m.ready}
                        for m in members
                    },
                }
            if self.ready:
                return JSONResponse({"status": "ready", "routes": routes})
            return JSONResponse(
                {"status": "waiting for upstream", "routes": routes}, status_code=503
            )

        async def metrics(_: Request) -> Response:
            return Response(
                multiprocess.render(self.metrics.registry), media_type=CONTENT_TYPE_LATEST
            )

        return [
            Route("/healthz", healthz, methods=["GET", "HEAD"]),
            Route("/readyz", readyz, methods=["GET", "HEAD"]),
            Route("/metrics", metrics, methods=["GET"]),
            *metadata_routes(self.config),
        ]

    # ------------------------------------------------------------------ life

    async def _probe_upstreams(self) -> None:
        """Readiness: the upstream answered at least once (any HTTP answer counts)."""
        import aiohttp

        with anyio.CancelScope() as scope:
            self._probe_scope = scope
            while not self.reachable:
                for proxy in self.proxies.values():
                    for endpoint in proxy.endpoints:
                        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                            probe = aiohttp.ClientTimeout(total=2.0)
                            async with self.clients.off_path().get(endpoint, timeout=probe):
                                self._mark_ready()
                if not self.reachable:
                    await anyio.sleep(1.0)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state = scope.get("state")
                    if isinstance(state, dict):  # copied into every request's scope
                        state[LOOP_STATE_KEY] = asyncio.get_running_loop()
                    for member in self.all_members():
                        await member.start(tg)  # DNS: first lookup done before serving
                    if self.proxies:
                        tg.start_soon(self._probe_upstreams)
                    if self.stacks.federations:
                        from mcp_edge.upstream.federation.health import watch_members

                        for federation in self.stacks.federations.values():
                            tg.start_soon(watch_members, federation)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    # (A server that drains first has begun draining already: mcp_edge.server.cli.)
                    self.begin_draining()
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

    def begin_draining(self) -> None:
        """The process begins its graceful shutdown: every listen stream ends (without a
        response: its client listens again, elsewhere), other requests go on. On the loop's
        thread."""
        if not self.draining.begun:
            event(logging.INFO, "draining: listen streams end")
        self.draining.begin()

    async def close_local_servers(self) -> None:
        """Stop every stdio process (and everything it started) now."""
        await asyncio.gather(*(m.stop_local() for m in self.all_members()), return_exceptions=True)

    async def aclose(self) -> None:
        await self.stacks.aclose()
        await self.clients.aclose()
        await self.config.auth.aclose()  # the JWKS client, if any
        if self.tracing is not None:
            tracing, self.tracing = self.tracing, None
            await asyncio.to_thread(tracing.shutdown)  # flushes the batch exporter
