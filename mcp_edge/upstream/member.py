"""The upstream contract: what every kind of upstream (a *member* of a route) answers.

A route is a list of members: one for a single-upstream route (the member *is* the route's
upstream, named after the route), several for a federated route (mcp_edge.upstream.federation).
Whatever its kind, a member gives:

- ``app``: an ASGI app answering ONE request (the parsed request rides in the scope's
  RequestContext; the answer is JSON or SSE, as from an upstream). List parts, discover parts and
  listen streams are asked of it generically (mcp_edge.upstream.federation.reader), so a kind
  has nothing more to implement for them;
- ``health``: up or down, why and since when (``/readyz``, ``mcp_edge_member_up``);
- ``start`` / ``stop_local`` / ``aclose``: its background work (processes, DNS refresh, era
  probes) and its shutdown;
- ``forwarded`` / ``front``: what the replicas' endpoints need of it (a retry forwarded to the
  replica holding a parked call; a 2025-era session relayed to the replica holding it), addressed
  by :attr:`key`.

The kinds (``http``: a 2026-07-28 or 2025-era HTTP server; ``stdio``: a local server the gateway
runs; ``asgi``: an app in this process) are registered in one place, mcp_edge.upstream.kinds.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_edge.edge.asgi import ASGIApp
from mcp_edge.edge.body import Reservation

if TYPE_CHECKING:
    import anyio.abc

    from mcp_edge.upstream.http.dns import DnsEndpoints
    from mcp_edge.upstream.http.era import EraRouter
    from mcp_edge.upstream.http.proxy import HttpProxy
    from mcp_edge.upstream.legacy.bridge import LegacyBridge
    from mcp_edge.upstream.stdio.front import LegacyFront
    from mcp_edge.upstream.stdio.processes import StdioSessions

#: Serves a retry forwarded by another replica for a call parked here (what it collects of the
#: answer counted in the reservation it is given).
ServeForwarded = Callable[[dict[str, Any], Reservation], Awaitable[dict[str, Any]]]


def member_key(route: str, member: str | None) -> str:
    """How a member is addressed across replicas (parked calls, relayed sessions, cache keys,
    its adapter's metric labels): the route's name for a single-upstream route (as it always
    was), ``<route>/<member>`` for a member of a federated route."""
    return route if member is None else f"{route}/{member}"


@dataclass(slots=True)
class Health:
    """A member's health as the gateway last saw it: None until something was seen."""

    up: bool | None = None
    reason: str | None = None
    since: float = field(default_factory=time.time)
    #: Called with the new state when it changes (the ``mcp_edge_member_up`` gauge).
    on_change: Callable[[bool], None] | None = None

    def mark(self, up: bool, reason: str | None = None) -> None:
        if up is self.up and (up or reason == self.reason):
            return
        changed = up is not self.up
        self.up, self.reason, self.since = up, (None if up else reason), time.time()
        if changed and self.on_change is not None:
            self.on_change(up)

    def describe(self) -> dict[str, Any]:
        state = "unknown" if self.up is None else ("up" if self.up else "down")
        out: dict[str, Any] = {"state": state, "since": round(self.since, 3)}
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(slots=True)
class Member:
    """One upstream of a route, of any kind."""

    #: Its configured name (a single-upstream route's member is named after the route).
    name: str
    #: :func:`member_key`.
    key: str
    #: ``http``, ``stdio`` or ``asgi`` (mcp_edge.upstream.kinds).
    kind: str
    #: Answers one request (with the route's edge cache inside, when the route has one).
    app: ASGIApp
    health: Health = field(default_factory=Health)
    #: Its adapter without the edge cache in front (health probes must reach the server).
    adapter: ASGIApp | None = None
    # ---- the parts of each kind (what the compatibility views of the app list)
    proxy: HttpProxy | None = None
    bridge: LegacyBridge | None = None
    era: EraRouter | None = None
    stdio: StdioSessions | None = None
    front: LegacyFront | None = None
    dns: DnsEndpoints | None = None

    @property
    def forwarded(self) -> ServeForwarded | None:
        """Serves a retry forwarded for a call parked here (members with a bridge)."""
        return self.bridge.serve_forwarded if self.bridge is not None else None

    @property
    def ready(self) -> bool:
        """Able to serve now: a stdio member once a process is ready; others unless seen down."""
        if self.stdio is not None:
            return self.stdio.ready
        return self.health.up is not False

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Its background work, started with the gateway (DNS first: the first lookup is done
        before anything is served)."""
        if self.stdio is not None:
            self.stdio.start()
        if self.dns is not None:
            await tg.start(self.dns.run)
        if self.era is not None:
            tg.start_soon(self.era.run)

    async def stop_local(self) -> None:
        """Stop what runs on this machine (local server processes) now."""
        if self.stdio is not None:
            await self.stdio.aclose()

    async def aclose(self) -> None:
        if self.bridge is not None:
            await self.bridge.aclose()

    def describe(self) -> dict[str, Any]:
        """Its part of ``/readyz``."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.era is not None:
            out.update(era=self.era.setting, detected=self.era.era)
        if self.stdio is not None:
            out.update(
                era="legacy",
                detected="legacy",
                processes=self.stdio.describe(),
                **self.stdio.summary(),
            )
        return out


@dataclass(slots=True)
class MemberEnv:
    """What every member of the gateway shares, handed to the kinds' builders by the wiring."""

    config: Any  # the GatewayConfig
    metrics: Any  # mcp_edge.observability.metrics.Metrics
    clients: Any  # mcp_edge.server.clients.Clients: ``upstream`` and ``off_path``
    parking: Any  # mcp_edge.upstream.legacy.parking.ParkingLot
    forwarder: Any  # mcp_edge.cluster.forward.Forwarder
    relay: Any  # mcp_edge.cluster.relay.Relay
    resolver: Any  # mcp_edge.upstream.http.dns.Resolver
    advertise_url: str
    on_reachable: Callable[[], None]
    tracing: Any = None
    authenticated: bool = False
    draining: Any = None  # mcp_edge.edge.draining.Draining: ends listen streams
    #: mcp_edge.edge.body.AnswerBudget: the process's answer pool, which every kind draws from
    #: for what it holds of an answer (``Reservation(env.answer_budget, kind="bridge")``).
    answer_budget: Any = None


@dataclass(slots=True)
class MemberSpec:
    """One member to build: its route, name, settings, and what the route decided for it."""

    route: Any  # the RouteConfig
    name: str
    key: str
    settings: Any  # mcp_edge.upstream.config.UpstreamSettings
    forwarding: Any  # mcp_edge.edge.forwarding.Forwarding
    credentials: Any  # mcp_edge.auth.upstream.UpstreamCredentials, or None (stdio)
    #: Serve 2025-era clients of this member (a single-upstream route that allows them).
    legacy_front: bool = True
    #: An ASGI app in this process as the upstream (``mcp_edge.Edge``).
    in_process_app: ASGIApp | None = None
