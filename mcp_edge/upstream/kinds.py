"""The kinds of upstream, registered here and only here: which kind an upstream's settings name,
and how a member of each kind is built (mcp_edge.upstream.member has the contract).

| kind | configured as | its app |
|---|---|---|
| `http` | `upstream: URL` or `endpoints: [...]` | `EraRouter` (`HttpProxy`, or `LegacyBridge` for a 2025-era server); `HttpProxy` alone with `era: modern` |
| `stdio` | `upstream: {command: [...]}` | `StdioRoute`: `LegacyBridge` over the processes, and `LegacyFront` for 2025-era clients |
| `asgi` | an app given to `mcp_edge.Edge` | `InProcessApp` |

Adding a kind: a builder here, an entry in :data:`KINDS`, and what selects it in :func:`kind_of`.
Each builder imports its kind's modules: a gateway loads the kinds it has (an app wrapped
in-process loads neither the HTTP client nor the bridge).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from mcp_edge import extras
from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS
from mcp_edge.edge.asgi import ASGIApp
from mcp_edge.sections import ConfigError
from mcp_edge.upstream.member import Member, MemberEnv, MemberSpec

if TYPE_CHECKING:
    from mcp_edge.upstream.legacy.settings import BridgeSettings

Builder = Callable[[MemberEnv, MemberSpec], Member]


def kind_of(spec: MemberSpec) -> str:
    if spec.in_process_app is not None:
        return "asgi"
    if spec.settings.stdio is not None:
        return "stdio"
    return "http"


def build_member(env: MemberEnv, spec: MemberSpec) -> Member:
    return KINDS[kind_of(spec)](env, spec)


def bridge_settings(env: MemberEnv, spec: MemberSpec) -> BridgeSettings:
    from mcp_edge.upstream.legacy.settings import BridgeSettings

    b = spec.settings.bridge
    config = env.config
    return BridgeSettings(
        route=spec.key,
        strategies=b.strategy,
        tool_strategies=dict(b.tools),
        prompt_strategies=dict(b.prompts),
        park_seconds=min(b.park_seconds, config.state.ttl_seconds),
        json_response_timeout=b.json_response_timeout,
        question_window=b.question_window_ms / 1000,
        max_event_bytes=config.limits.max_inspect_bytes,
        max_state_chars=MAX_UPSTREAM_STATE_CHARS,
        advertise_url=env.advertise_url,
    )


def build_http(env: MemberEnv, spec: MemberSpec) -> Member:
    """An HTTP upstream: 2026-07-28 requests to the proxy or, for a legacy upstream, to the
    bridge; its endpoints from the config or, with ``dns``, from DNS. Its client (httptools)
    is the ``serve`` extra's."""
    if not extras.installed("serve"):
        where = spec.route.name if spec.key == spec.route.name else spec.key
        raise ConfigError(extras.message("serve", f"routes ({where}): an HTTP upstream"))
    from mcp_edge.upstream.http.dns import DnsEndpoints
    from mcp_edge.upstream.http.era import EraRouter
    from mcp_edge.upstream.http.proxy import HttpProxy
    from mcp_edge.upstream.legacy.bridge import LegacyBridge
    from mcp_edge.upstream.legacy.pool import SessionPool
    from mcp_edge.upstream.legacy.sessions import HttpSessions

    settings, credentials = spec.settings, spec.credentials
    proxy = HttpProxy(
        route=spec.key,
        endpoints=settings.upstream_urls(),
        client=env.clients.upstream,
        forwarding=spec.forwarding,
        metrics=env.metrics,
        affinity=settings.affinity,
        on_reachable=env.on_reachable,
        draining=env.draining,
    )
    proxy.tracing = env.tracing
    b = settings.bridge
    bridge = LegacyBridge(
        bridge_settings(env, spec),
        sessions=HttpSessions(
            route=spec.key,
            endpoints=proxy,
            client=env.clients.off_path,
            pool=SessionPool(idle_seconds=b.session_idle_seconds, max_idle=b.max_idle_sessions),
            max_event_bytes=env.config.limits.max_inspect_bytes,
            metrics=env.metrics,
            budget=env.answer_budget,
        ),
        header_hook=spec.forwarding.hook,
        parking=env.parking,
        forwarder=env.forwarder,
        metrics=env.metrics,
        draining=env.draining,
        answer_budget=env.answer_budget,
    )
    router = EraRouter(
        route=spec.key,
        setting=settings.era,
        proxy=proxy,
        bridge=bridge,
        endpoints=lambda: proxy.endpoints,
        host_for=proxy.host_for,
        client=env.clients.off_path,
        static_headers=credentials.extra_headers(None, None),
        metrics=env.metrics,
        probe_timeout=env.config.limits.connect_timeout,
    )
    proxy.on_era_doubt = router.suspect
    dns = None
    if settings.dns and isinstance(settings.upstream, str):
        host = urlsplit(settings.upstream).netloc
        dns = DnsEndpoints(
            spec.key,
            settings.upstream,
            on_change=lambda urls: proxy.set_endpoints(urls, host=host),
            refresh_seconds=settings.dns_refresh_seconds,
            resolver=env.resolver,
        )
    # An upstream fixed to the 2026-07-28 era gets everything from the proxy: no router hop.
    app: ASGIApp = proxy if settings.era == "modern" else router
    return Member(spec.name, spec.key, "http", app, proxy=proxy, bridge=bridge, era=router, dns=dns)


def build_stdio(env: MemberEnv, spec: MemberSpec) -> Member:
    """A local server the gateway runs: 2026-07-28 requests through the bridge, 2025-era clients
    (single-upstream routes that allow them) through the legacy front over the same processes."""
    from mcp_edge.upstream.legacy.bridge import LegacyBridge
    from mcp_edge.upstream.stdio.front import LegacyFront, StdioRoute
    from mcp_edge.upstream.stdio.processes import StdioSessions
    from mcp_edge.upstream.stdio.sandbox import SandboxError
    from mcp_edge.upstream.stdio.spec import build_spec

    stdio = spec.settings.stdio
    assert stdio is not None
    try:
        command = build_spec(stdio, authenticated=env.authenticated)
    except SandboxError as exc:
        where = spec.route.name if spec.key == spec.route.name else spec.key
        raise ConfigError(f"routes ({where}): {exc}") from None
    sessions = StdioSessions(spec.key, command, env.metrics, budget=env.answer_budget)
    bridge = LegacyBridge(
        bridge_settings(env, spec),
        sessions=sessions,
        parking=env.parking,
        forwarder=env.forwarder,
        metrics=env.metrics,
        draining=env.draining,
        answer_budget=env.answer_budget,
    )
    front = None
    app: ASGIApp = bridge
    if spec.legacy_front:
        front = LegacyFront(spec.key, sessions, owner=env.advertise_url, relay=env.relay)
        app = StdioRoute(bridge, front)
    return Member(spec.name, spec.key, "stdio", app, bridge=bridge, stdio=sessions, front=front)


def build_asgi(env: MemberEnv, spec: MemberSpec) -> Member:
    """An ASGI app in this process (``mcp_edge.Edge``): it gets each request as an upstream
    would."""
    from mcp_edge.upstream.inprocess import InProcessApp

    assert spec.in_process_app is not None
    app = InProcessApp(
        spec.in_process_app,
        route=spec.key,
        forwarding=spec.forwarding,
        metrics=env.metrics,
        tracing=env.tracing,
    )
    return Member(spec.name, spec.key, "asgi", app)


#: Every kind of upstream, by name.
KINDS: dict[str, Builder] = {"http": build_http, "stdio": build_stdio, "asgi": build_asgi}
