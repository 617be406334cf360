"""mcp-edge inside the process of the MCP server it protects: :class:`Edge`, an ASGI middleware.

``Edge(app, ...)`` wraps an ASGI MCP app (the SDK's ``streamable_http_app()``, or a Starlette or
FastAPI app that mounts one) with the routes ``serve`` would put in front of it over HTTP: the
same stack (mcp_edge.server.stack), with the app as each route's upstream
(mcp_edge.upstream.inprocess). Requests for a route's path go through the route; every other request
(other paths, WebSockets) goes to the app untouched. Paths are matched below the scope's
``root_path``, so an Edge mounted at ``/tools`` guards ``/tools/mcp`` for ``path="/mcp"``.

Configuration is the ``serve`` file's (same sections, same validation and messages), from a YAML
file, ``MCP_EDGE_*`` variables and keyword options (in that order of precedence, the last wins),
minus what only a server of its own has: such a setting is refused, naming it
(:data:`SERVE_ONLY`). Every refusal is an :class:`EdgeConfigError`, raised when the Edge is built.

The Edge starts and stops with the ASGI lifespan its server sends (the app's own lifespan runs
inside it), or with :meth:`Edge.lifespan` where no server sends it one (a mounted sub-app).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp_edge.auth.metadata import WELL_KNOWN
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.context import LOOP_STATE_KEY
from mcp_edge.observability.logs import event, logger
from mcp_edge.sections import ConfigError
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import (
    ENV_PREFIX,
    ENV_VARS,
    GatewayConfig,
    InvalidConfig,
    load_config,
    load_key_ring,
)
from mcp_edge.upstream.inprocess import AppLifespan, LifespanFailed

__all__ = ["SERVE_ONLY", "SERVE_ONLY_ENV", "Edge", "EdgeConfigError"]


class EdgeConfigError(ConfigError):
    """The Edge's configuration is invalid, or asks for what only ``mcp-edge serve`` has. The
    message is ``check-config``'s for the same mistake."""


_SERVER = "in-process, the host app's server (uvicorn, ...) listens, with its own settings"
_POOL = "it bounds the connections to an HTTP upstream; an in-process app has none"
_BRIDGE = "an in-process app is served as a 2026-07-28 server (2025-era clients' traffic passes to it as it is)"

#: Settings only ``mcp-edge serve`` has, refused in-process when set: key -> why. Route keys are
#: under ``routes.``; a section name alone stands for all its keys.
SERVE_ONLY: dict[str, str] = {
    **{
        f"listen.{key}": _SERVER
        for key in (
            "host",
            "port",
            "workers",
            "drain_seconds",
            "max_connections",
            "header_timeout",
            "max_header_bytes",
            "keepalive_seconds",
        )
    },
    "cluster": (
        "the replicas' endpoints serve the legacy bridge and local (stdio) servers, which an "
        "in-process route does not use"
    ),
    "admin.listen": "in-process, serve the admin endpoints with admin_path= or mount Edge.admin_app",
    "logging.format": (
        "the host app's logging formats records; mcp-edge logs to the 'mcp_edge' logger "
        "(logging.level and logging.access_log apply)"
    ),
    **{
        f"limits.{key}": _POOL
        for key in ("connect_timeout", "read_timeout", "max_connections", "keepalive_seconds")
    },
    "routes.upstream": "the app Edge wraps is the route's upstream (upstream is for mcp-edge serve)",
    "routes.endpoints": "the app Edge wraps is the route's upstream (endpoints are for mcp-edge serve)",
    "routes.dns": "it resolves an HTTP upstream's name; an in-process app has none",
    "routes.dns_refresh_seconds": "it resolves an HTTP upstream's name; an in-process app has none",
    "routes.affinity": "it picks one of several HTTP endpoints; an in-process app is one",
    "routes.bridge": _BRIDGE,
    "routes.era": _BRIDGE,
}

#: ``MCP_EDGE_*`` variables of settings only ``serve`` has: refused in-process when set.
SERVE_ONLY_ENV: dict[str, str] = {
    "HOST": "listen.host",
    "PORT": "listen.port",
    "DRAIN_SECONDS": "listen.drain_seconds",
    "WORKERS": "listen.workers",
    "CLUSTER_PORT": "cluster",
    "ADMIN_PORT": "admin.listen",
    "ADVERTISE_URL": "cluster",
    "UPSTREAM": "routes.upstream",
    "COMMAND": "routes.upstream",
    "LOG_FORMAT": "logging.format",
}

_NOT_STARTED = RpcError(
    INTERNAL_ERROR,
    "mcp-edge has not started: its ASGI server did not run the lifespan protocol",
    {"reason": "not_started"},
    status=503,
)
_COULD_NOT_START = RpcError(
    INTERNAL_ERROR,
    "mcp-edge could not start: its configuration is invalid (the server's log says why)",
    {"reason": "not_started"},
    status=503,
)

#: In-process words for the two settings a gateway cannot start without.
NO_KEY = (
    "no state key: pass state_keys= (a key from 'mcp-edge keys generate', the same in every "
    "process), or set MCP_EDGE_STATE_KEYS, or state.keys / state.key_files in the config file"
)
NO_AUTH_MODE = (
    "no authentication mode: pass anonymous=True to accept unauthenticated callers as one "
    "shared principal, or auth={'mode': 'jwt', ...} (or auth.mode in the config file)"
)
_PUBLIC_URL = (
    "gateway={'public_url': ...} (or gateway.public_url in the config file, MCP_EDGE_PUBLIC_URL): "
    "required in-process with auth mode jwt or published metadata (the route's URL, public_url + "
    "path, is the tokens' audience and the metadata's resource; serve derives one from its "
    "listen address)"
)


class Spelling:
    """How the Edge's caller gave each setting, so that an error names it in the words of the form
    it came from: a keyword option (``store["url"]``, ``routes[0]["policy"]``, ``path=``), an
    ``MCP_EDGE_*`` variable, or a key of the configuration file (``store.url``)."""

    def __init__(
        self,
        sections: Mapping[str, Any],
        env: Mapping[str, str],
        *,
        path: bool,
        state_keys: bool,
    ) -> None:
        self.sections = sections
        self.env = env
        self.path = path
        self.state_keys = state_keys

    def name(self, loc: Sequence[str | int]) -> str:
        dotted = ".".join(map(str, loc)) or "(top level)"
        if not loc:
            return dotted
        head, rest = str(loc[0]), list(loc[1:])
        if head == "routes":
            if "routes" in self.sections:
                return "routes" + _subscripts(rest)
            if self.path and rest[1:] == ["path"]:
                return "path="
        given = self.sections.get(head)
        if isinstance(given, Mapping) and (not rest or rest[0] in given):
            return head + _subscripts(rest) if rest else f"{head}="
        if head == "state" and rest[:1] == ["keys"] and self.state_keys:
            return "state_keys="
        for name, (path, _) in ENV_VARS.items():
            if self.env.get(ENV_PREFIX + name) and (
                dotted == path or dotted.startswith(path + ".")
            ):
                return f"{ENV_PREFIX}{name} ({dotted})"
        return dotted

    def keys_from(self) -> str:
        """How the key ring's ``state.keys`` were given."""
        if self.state_keys:
            return "state_keys="
        state = self.sections.get("state")
        if isinstance(state, Mapping) and "keys" in state:
            return 'state["keys"]'
        if self.env.get(ENV_PREFIX + "STATE_KEYS"):
            return ENV_PREFIX + "STATE_KEYS"
        return "state.keys"


def _subscripts(loc: Sequence[str | int]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f'["{part}"]' for part in loc)


def refusals(config: GatewayConfig, spelling: Spelling | None = None) -> list[str]:
    """What ``config`` sets of :data:`SERVE_ONLY`, one message each (empty: nothing)."""
    out: list[str] = []
    spell = spelling.name if spelling is not None else (lambda loc: ".".join(map(str, loc)))

    def check(key: str, section: Any) -> None:
        for field in sorted(section.model_fields_set):
            why = SERVE_ONLY.get(f"{key}.{field}")
            if why is not None:
                out.append(f"{spell((key, field))}: applies to mcp-edge serve only: {why}")

    check("listen", config.listen)
    check("limits", config.limits)
    check("logging", config.logging)
    if config.cluster.model_fields_set:
        out.append(
            f"{spell(('cluster',))}: applies to mcp-edge serve only: {SERVE_ONLY['cluster']}"
        )
    if "listen" in config.admin.model_fields_set:
        out.append(
            f"{spell(('admin', 'listen'))}: applies to mcp-edge serve only: {SERVE_ONLY['admin.listen']}"
        )
    given_routes = spelling is not None and "routes" in spelling.sections
    for index, route in enumerate(config.routes):
        for field in sorted(route.model_fields_set):
            why = SERVE_ONLY.get(f"routes.{field}")
            if why is None or (field == "era" and route.era == "modern"):
                continue
            where = (
                spell(("routes", index, field))
                if given_routes
                else f"routes ({route.name}): {field}"
            )
            out.append(f"{where}: applies to mcp-edge serve only: {why}")
    if config.gateway.public_url is None and (
        config.auth.mode == "jwt" or config.auth.publishes_metadata()
    ):
        out.append(_PUBLIC_URL)
    return out


def _keys(state_keys: str | Sequence[str] | None) -> list[str] | None:
    if state_keys is None:
        return None
    if isinstance(state_keys, str):
        return [k.strip() for k in state_keys.replace("\n", ",").split(",") if k.strip()]
    return list(state_keys)


def _relative_path(scope: Scope) -> str:
    """The request path below the scope's ``root_path`` (a Starlette ``Mount`` or
    ``--root-path`` keeps the whole path in ``path`` and the prefix in ``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :] or "/"
    return path


def _built_by_host_app() -> bool:
    """Whether this Edge is being built by a Starlette (or FastAPI) app's middleware stack
    (``Middleware(Edge, ...)``, ``app.add_middleware(Edge, ...)``), which it builds at its first
    call, the lifespan's: a configuration error raised there would not stop the server under
    uvicorn's default ``--lifespan auto`` (an exception in the lifespan is taken for "no
    lifespan support"), and every request of the host app would fail with it."""
    frame = sys._getframe(2)  # this function <- Edge.__init__ <- whoever builds the Edge
    if frame.f_code.co_name != "build_middleware_stack":
        return False
    owner = frame.f_locals.get("self")
    return any(
        cls.__module__ == "starlette.applications" and cls.__name__ == "Starlette"
        for cls in type(owner).__mro__
    )


class Edge:
    """mcp-edge around an ASGI MCP app, in the app's own process.

    ``app``: the ASGI app to protect (first, so that ``Middleware(Edge, ...)`` and
    ``app.add_middleware(Edge, ...)`` work). ``config``: a YAML file as ``serve`` reads
    (default ``$MCP_EDGE_CONFIG``). ``path``: the guarded path when no routes are configured
    (default ``/mcp``); ``routes``: route entries as in the file (no ``upstream``). ``state_keys``:
    the key ring (a list, or comma-separated; default ``$MCP_EDGE_STATE_KEYS``). ``anonymous``:
    ``auth.mode: anonymous``. ``admin_path``: serve ``/healthz``, ``/readyz`` and ``/metrics``
    under this path (or mount :attr:`admin_app`). The section options (``gateway``, ``listen``,
    ``limits``, ``state``, ``security``, ``auth``, ``logging``, ``store``, ``rate_limits``,
    ``cache``, ``observability``) each take a mapping of that section's keys, over the file's.
    ``env``: where ``MCP_EDGE_*`` are read (default ``os.environ``).

    Raises :class:`EdgeConfigError` for an invalid configuration or a setting only ``serve``
    has, naming each setting as it was given (an option, a variable, a key of the file). Built
    by a Starlette or FastAPI app's middleware stack, the Edge reports such an error with its
    start instead (``lifespan.startup.failed``, which stops the server; without a lifespan its
    MCP paths answer 503 ``not_started``), so that it never fails the host app's other pages.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        config: str | os.PathLike[str] | None = None,
        path: str | None = None,
        routes: Sequence[Mapping[str, Any]] | None = None,
        state_keys: str | Sequence[str] | None = None,
        anonymous: bool = False,
        admin_path: str | None = None,
        gateway: Mapping[str, Any] | None = None,
        listen: Mapping[str, Any] | None = None,
        limits: Mapping[str, Any] | None = None,
        state: Mapping[str, Any] | None = None,
        security: Mapping[str, Any] | None = None,
        auth: Mapping[str, Any] | None = None,
        logging: Mapping[str, Any] | None = None,
        store: Mapping[str, Any] | None = None,
        rate_limits: Mapping[str, Any] | None = None,
        cache: Mapping[str, Any] | None = None,
        observability: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self._started = False
        self._stopped = False
        self._warned = False
        self._app_lifespan: AppLifespan | None = None
        #: The configuration error of an Edge its host app built (reported by its start).
        self.error: EdgeConfigError | None = None
        self._routes: dict[str, ASGIApp] = {}
        self._admin_path: str | None = None
        self._metadata = False
        given = {
            "gateway": gateway,
            "listen": listen,
            "limits": limits,
            "state": state,
            "security": security,
            "auth": auth,
            "logging": logging,
            "store": store,
            "rate_limits": rate_limits,
            "cache": cache,
            "observability": observability,
        }
        sections: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if routes is not None:
            sections["routes"] = [dict(route) for route in routes]
        env = os.environ if env is None else env
        spelling = Spelling(
            sections, env, path=path is not None and routes is None, state_keys=bool(state_keys)
        )
        try:
            self._build(
                config, path, routes, state_keys, anonymous, admin_path, sections, env, spelling
            )
        except EdgeConfigError as exc:
            if not _built_by_host_app():
                raise
            self._could_not_start(exc)

    def _could_not_start(self, exc: EdgeConfigError) -> None:
        """Built by its host app with an invalid configuration: said once, now, and again by its
        start (``lifespan.startup.failed``) or, without one, by 503 on its paths."""
        self.error = exc
        event(
            logging.ERROR,
            f"mcp-edge could not start: {exc}",
            paths=self.paths or "every path (none could be read)",
        )

    def _build(
        self,
        config: str | os.PathLike[str] | None,
        path: str | None,
        routes: Sequence[Mapping[str, Any]] | None,
        state_keys: str | Sequence[str] | None,
        anonymous: bool,
        admin_path: str | None,
        sections: dict[str, Any],
        env: Mapping[str, str],
        spelling: Spelling,
    ) -> None:
        for name, key in SERVE_ONLY_ENV.items():
            raw = env.get(ENV_PREFIX + name)
            if raw and not (name.endswith("PORT") and "://" in raw):  # (Kubernetes service links)
                raise EdgeConfigError(
                    f"{ENV_PREFIX}{name}: applies to mcp-edge serve only: {SERVE_ONLY[key]}"
                )
        if path is not None and routes is not None:
            raise EdgeConfigError("give path= (one route) or routes=, not both")
        try:
            loaded = load_config(
                os.fspath(config) if config is not None else None,
                env=env,
                flags={"anonymous": anonymous, "state_keys": _keys(state_keys)},
                sections=sections,
                default_route={"name": "default", "path": path or "/mcp"},
                in_process=True,
            )
        except InvalidConfig as exc:
            raise EdgeConfigError(
                "; ".join(f"{spelling.name(loc)}: {msg}" for loc, msg in exc.problems)
            ) from None
        except ConfigError as exc:
            raise EdgeConfigError(str(exc)) from None
        self.config = loaded
        # Known from here on: the paths an Edge that cannot start still guards.
        self._paths = [route.path for route in loaded.routes]
        refused = refusals(loaded, spelling)
        if path is not None and [r.path for r in loaded.routes] != [path.rstrip("/") or "/"]:
            refused.append(
                "path=: the configured routes give the paths (set them there, or give path= only)"
            )
        if loaded.auth.mode == "none":
            refused.append(NO_AUTH_MODE)
        if refused:
            raise EdgeConfigError("; ".join(refused))
        try:
            ring = load_key_ring(loaded.state, keys_from=spelling.keys_from(), no_key=NO_KEY)
            self._gateway = GatewayApp(
                loaded, ring, in_process_apps={route.name: self.app for route in loaded.routes}
            )
        except ConfigError as exc:
            raise EdgeConfigError(str(exc)) from None
        if "level" in loaded.logging.model_fields_set:
            logger.setLevel(loaded.logging.level.upper())
        self._gateway.reachable = False  # /readyz: ready once started
        #: Each route's stack, by its path below the Edge's mount point.
        routes_by_path = dict(self._gateway.routes)
        admin = admin_path.rstrip("/") if admin_path else None
        if admin_path is not None and (not admin_path.startswith("/") or admin in routes_by_path):
            raise EdgeConfigError(
                "admin_path=: must start with '/' and differ from the routes' paths"
            )
        self._routes = routes_by_path
        self._metadata = loaded.auth.publishes_metadata()
        self._admin_path = admin

    # ------------------------------------------------------------------ what it serves

    @property
    def paths(self) -> list[str]:
        """The guarded paths (below the Edge's mount point)."""
        return list(self._routes) or list(getattr(self, "_paths", []))

    @property
    def admin_app(self) -> ASGIApp:
        """``/healthz``, ``/readyz`` (ready once started) and ``/metrics`` (this Edge's
        Prometheus metrics), as an ASGI app to mount on the host app (e.g. at ``/edge``)."""
        if self.error is not None:
            raise self.error
        return self._gateway.aux

    @property
    def started(self) -> bool:
        return self._started

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            path = _relative_path(scope)
            if self.error is not None:  # it could not start: its paths (or all) are refused
                known = self.paths
                if not known or path in known or path.rstrip("/") in known:
                    await self._not_started(send)
                    return
                await self.app(scope, receive, send)
                return
            route = self._routes.get(path) or self._routes.get(path.rstrip("/"))
            if route is not None:
                if self._started:
                    # The mounted path: how the route is named in the net's log line.
                    await self._gateway.serve_route(route, path, scope, receive, send)
                else:
                    await self._not_started(send)
                return
            admin = self._admin_path
            if admin is not None and (path == admin or path.startswith(admin + "/")):
                inner = dict(scope)
                inner["root_path"] = scope["path"][: len(scope["path"]) - len(path)] + admin
                await self._gateway.aux(inner, receive, send)
                return
            if self._metadata and path.startswith(WELL_KNOWN):
                await self._gateway.aux(scope, receive, send)
                return
        elif kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _not_started(self, send: Send) -> None:
        if self.error is not None:
            await send_rpc_error(send, _COULD_NOT_START)
            return
        if not self._warned:
            self._warned = True
            event(
                logging.ERROR,
                "mcp-edge has not started: its ASGI server did not run the lifespan protocol "
                "(uvicorn runs it by default; a mounted sub-app needs lifespan=edge.lifespan on "
                "the app that mounts it; in tests, enter the client, `with TestClient(app)`, or "
                "run `async with edge.lifespan()` around httpx's ASGITransport); MCP requests "
                "get 503 until it has",
                paths=self.paths,
            )
        await send_rpc_error(send, _NOT_STARTED)

    # ------------------------------------------------------------------ life

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        if self.error is not None:
            await send({"type": "lifespan.startup.failed", "message": f"mcp-edge: {self.error}"})
            return
        try:
            await self._start(scope)
        except LifespanFailed as exc:
            await send({"type": "lifespan.startup.failed", "message": f"mcp-edge: {exc}"})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        try:
            await self._stop()
        except LifespanFailed as exc:
            await send({"type": "lifespan.shutdown.failed", "message": f"mcp-edge: {exc}"})
            return
        await send({"type": "lifespan.shutdown.complete"})

    def lifespan(self, _app: Any = None) -> AbstractAsyncContextManager[None]:
        """The Edge's start-up and shutdown (the wrapped app's lifespan within) as an async
        context manager, for where no server sends this app the ASGI lifespan: a Starlette or
        FastAPI app mounting it, ``Starlette(routes=[Mount("/tools", edge)],
        lifespan=edge.lifespan)``, or a test driving it with httpx's ``ASGITransport``. Failures
        raise :class:`LifespanFailed`."""
        return self._running()

    @contextlib.asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        if self.error is not None:
            raise self.error
        scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        scope["state"] = {}
        await self._start(scope)
        try:
            yield
        finally:
            await self._stop()

    async def _start(self, scope: Scope) -> None:
        if self._started or self._stopped:
            raise LifespanFailed("this Edge has been started before (start each Edge once)")
        state = scope.get("state")
        if isinstance(state, dict):  # copied into every request's scope
            state[LOOP_STATE_KEY] = asyncio.get_running_loop()
        life = self._app_lifespan = AppLifespan(self.app, scope)
        try:
            await life.startup()
        except LifespanFailed as exc:
            self._stopped = True
            await self._close_gateway()
            raise LifespanFailed(f"the wrapped app did not start: {exc}") from None
        self._started = True
        self._gateway.reachable = True
        event(logging.INFO, "mcp-edge started in-process", paths=self.paths)

    async def _stop(self) -> None:
        if not self._started:
            return
        self._started, self._stopped = False, True
        self._gateway.reachable = False
        problems: list[str] = []
        if self._app_lifespan is not None:
            try:
                await self._app_lifespan.shutdown()
            except LifespanFailed as exc:
                problems.append(f"the wrapped app: {exc}")
        problem = await self._close_gateway()
        if problem:
            problems.append(problem)
        if problems:
            raise LifespanFailed("; ".join(problems))

    async def _close_gateway(self) -> str | None:
        try:
            await self._gateway.aclose()
        except Exception as exc:  # noqa: BLE001  (reported once, by the lifespan's answer)
            return f"closing the gateway failed: {type(exc).__name__}: {exc}"[:500]
        return None
