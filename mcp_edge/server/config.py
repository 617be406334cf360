"""The root configuration: one YAML file, overridden by ``MCP_EDGE_*`` environment variables,
overridden by command-line flags; validated at start, errors name the offending field.

Every section belongs to the package it configures (``mcp_edge.edge.config``: gateway, listen,
limits, state, security; ``mcp_edge.auth.config``; ``mcp_edge.store.config``; ``mcp_edge.cluster.config``;
``mcp_edge.ratelimit.config``; ``mcp_edge.cache.config``; ``mcp_edge.policy.config``;
``mcp_edge.observability.config``: observability, logging; ``mcp_edge.upstream.legacy.config``: a
route's bridge; ``mcp_edge.upstream.stdio.config``: a local server). This module composes them (a
route, the whole file) with the checks that span several of them, and loads the whole.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from mcp_edge.auth.config import AuthConfig, RouteAuthConfig
from mcp_edge.cache.config import CacheSection, RouteCache
from mcp_edge.cluster.config import AdminSection, ClusterSection
from mcp_edge.cluster.listeners import ADMIN, CLUSTER, PUBLIC, Listener
from mcp_edge.core.federation.names import DEFAULT_SEPARATOR, check_namespace
from mcp_edge.core.headers import LOOPBACK_HOSTS
from mcp_edge.edge.compat import RouteCompat
from mcp_edge.edge.config import (
    GatewaySection,
    LimitsSection,
    ListenSection,
    SecuritySection,
    StateSection,
    load_key_ring,
)
from mcp_edge.identity.consent_config import ConsentSection
from mcp_edge.observability.config import LoggingSection, ObservabilitySection
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.ratelimit.config import RateLimitSection, RouteRateLimits
from mcp_edge.sections import ConfigError, Section
from mcp_edge.store.config import StoreSection
from mcp_edge.upstream.config import IN_PROCESS, UPSTREAM_KEYS, MemberConfig, UpstreamSettings

if TYPE_CHECKING:
    import yaml

__all__ = [
    "ENV_PREFIX",
    "ENV_VARS",
    "IN_PROCESS",
    "ConfigError",
    "MemberConfig",
    "GatewayConfig",
    "RouteConfig",
    "load_config",
    "load_key_ring",
]

ENV_PREFIX = "MCP_EDGE_"


class RouteConfig(UpstreamSettings):
    """A route: its path and its own settings, and either one upstream (the keys of
    :class:`~mcp_edge.upstream.config.UpstreamSettings`, as always) or ``members:``, several named
    upstreams behind the one endpoint (a federation: mcp_edge.upstream.federation)."""

    name: str = "default"
    path: str = "/mcp"
    #: Several named upstreams behind this route (give no single-upstream key beside them).
    members: list[MemberConfig] | None = None
    #: Between a member's prefix and a tool or prompt name (routes with ``members:``).
    separator: str = DEFAULT_SEPARATOR
    #: Each sealed state is accepted once (needs the shared ``store`` with several replicas).
    single_use: bool = False
    #: Reject ``inputResponses`` that come without a ``requestState``.
    strict: bool = False
    #: Legacy-era clients (no ``MCP-Protocol-Version`` header, or a 2025 version): ``allow`` passes
    #: their traffic through (never with MRTR fields, which are refused at the edge), ``deny``
    #: answers them with an error naming 2026-07-28. Always ``deny`` on a route with ``members:``.
    legacy_clients: Literal["allow", "deny"] = "allow"
    auth: RouteAuthConfig = Field(default_factory=RouteAuthConfig)
    #: Budgets per caller / in total / per tool (see ``mcp_edge.ratelimit``).
    rate_limits: RouteRateLimits = Field(default_factory=RouteRateLimits)
    #: The edge cache for results the upstream marks cacheable (see ``mcp_edge.cache``).
    cache: RouteCache = Field(default_factory=RouteCache)
    #: Authorization rules, the gateway's approval question, tool pinning (see ``mcp_edge.policy``).
    policy: RoutePolicyConfig = Field(default_factory=RoutePolicyConfig)
    #: Switches for clients that need the spec bent (see ``mcp_edge.edge.compat``).
    compat: RouteCompat = Field(default_factory=RouteCompat)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if (
            not v.startswith("/")
            or v.startswith(("/.well-known", "/.mcp-edge"))
            or v in ("/healthz", "/readyz", "/metrics")
        ):
            raise ValueError("must start with '/' and not clash with the gateway's own endpoints")
        return v.rstrip("/") or "/"

    @model_validator(mode="after")
    def _targets(self, info: ValidationInfo) -> RouteConfig:
        if self.members is not None:
            return self._federated()
        if info.context and info.context.get(IN_PROCESS):
            return self  # the app wrapped in-process is the upstream
        self.check_target()
        return self

    def _federated(self) -> RouteConfig:
        given = [key for key in UPSTREAM_KEYS if key in self.model_fields_set]
        if given:
            raise ValueError(
                f"members: a route with members gives {', '.join(given)} per member, not beside them"
            )
        if "legacy_clients" in self.model_fields_set and self.legacy_clients == "allow":
            raise ValueError(
                "legacy_clients: a route with members serves 2026-07-28 clients only (2025-era "
                "traffic cannot be routed by name); leave it out or set deny"
            )
        self.legacy_clients = "deny"
        problems = check_namespace([m.names() for m in self.members or []], self.separator)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def federated(self) -> bool:
        """The route has ``members:`` (a namespace, even with one member)."""
        return self.members is not None

    def upstreams(self) -> list[tuple[str, UpstreamSettings]]:
        """Each upstream of the route with its name: its members, or the route itself (a
        single-upstream route is a federation of one member named after the route)."""
        if self.members is not None:
            return [(m.name, m) for m in self.members]
        return [(self.name, self)]

    def forwards_client_token(self) -> bool:
        """The edge keeps the caller's validated bearer token for the upstream side (forwarded,
        or exchanged: mcp_edge.identity)."""
        return any(u.upstream_auth.needs_client_token() for _, u in self.upstreams())

    def describe_upstream(self) -> str:
        if self.members is not None:
            return ", ".join(f"{m.name}: {m.describe_upstream()}" for m in self.members)
        return super().describe_upstream()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "-_" for c in v):
            raise ValueError("must be letters, digits, '-' or '_'")
        return v


class GatewayConfig(Section):
    gateway: GatewaySection = Field(default_factory=GatewaySection)
    listen: ListenSection = Field(default_factory=ListenSection)
    limits: LimitsSection = Field(default_factory=LimitsSection)
    state: StateSection = Field(default_factory=StateSection)
    security: SecuritySection = Field(default_factory=SecuritySection)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    logging: LoggingSection = Field(default_factory=LoggingSection)
    store: StoreSection = Field(default_factory=StoreSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    admin: AdminSection = Field(default_factory=AdminSection)
    rate_limits: RateLimitSection = Field(default_factory=RateLimitSection)
    cache: CacheSection = Field(default_factory=CacheSection)
    observability: ObservabilitySection = Field(default_factory=ObservabilitySection)
    consent: ConsentSection = Field(default_factory=ConsentSection)
    routes: list[RouteConfig] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _empty_sections(cls, data: Any) -> Any:
        """A section left empty in YAML (every key commented out) means its defaults."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not (v is None and k != "routes")}
        return data

    @model_validator(mode="after")
    def _routes(self) -> GatewayConfig:
        if not self.routes:
            raise ValueError(
                "no route configured: give --upstream URL or a 'routes' list in the config file"
            )
        for attr in ("name", "path"):
            seen = [getattr(r, attr) for r in self.routes]
            if len(set(seen)) != len(seen):
                raise ValueError(f"route {attr}s must be unique")
        single_use = any(r.single_use for r in self.routes)
        if single_use and self.store.type == "memory" and self.listen.workers > 1:
            raise ValueError(
                "store: the memory store is per process; single-use routes with listen.workers > 1 "
                "need store.type: redis"
            )
        return self

    @model_validator(mode="after")
    def _limits_and_cache(self) -> GatewayConfig:
        if self.cache.backend == "redis" and self.store.type != "redis":
            raise ValueError(
                "cache.backend: redis uses the store's Redis; set store.type: redis and store.url"
            )
        for route in self.routes:
            if route.cache.private and self.auth.mode == "anonymous":
                raise ValueError(
                    f"routes ({route.name}): cache.private needs authenticated callers (auth.mode jwt or "
                    "trusted_header); anonymous callers are all one principal"
                )
            identities = [u.upstream_auth.principal_header for _, u in route.upstreams()]
            identity = next(
                (
                    i
                    for i in identities
                    if i is not None and i.lower() in route.cache.ignore_headers
                ),
                None,
            )
            if identity is not None:
                raise ValueError(
                    f"routes ({route.name}): cache.ignore_headers cannot leave out the caller's identity "
                    f"({identity}); cache.trust_public: true shares public results across callers"
                )
        return self

    @model_validator(mode="after")
    def _policy(self) -> GatewayConfig:
        for route in self.routes:
            if route.policy.enabled and route.legacy_clients != "deny":
                raise ValueError(
                    f"routes ({route.name}): a policy needs legacy_clients: deny (2025-era traffic passes "
                    "the gateway unparsed, so the policy could not be enforced on it)"
                )
            if (
                route.policy.asks_approval
                and route.policy.approval.single_use
                and self.store.type == "memory"
                and self.listen.workers > 1
            ):
                raise ValueError(
                    f"routes ({route.name}): single-use approvals with listen.workers > 1 need store.type: redis"
                )
        return self

    @model_validator(mode="after")
    def _consent(self) -> GatewayConfig:
        """Per-user consent (``upstream_auth.oauth``) needs a person the gateway can identify in
        a browser and a public address its authorization servers send that browser back to."""
        users = [
            f"{route.name}/{name}" if route.members is not None else route.name
            for route in self.routes
            for name, settings in route.upstreams()
            if settings.upstream_auth.oauth is not None
        ]
        if not users:
            return self
        where = f"routes ({', '.join(users)}): upstream_auth.oauth"
        if self.auth.mode != "jwt" or self.auth.jwt is None:
            raise ValueError(
                f"{where} needs auth.mode jwt (the grant is the caller's own: the gateway signs the "
                "person who opens the consent link in at the callers' identity provider)"
            )
        sign_in = self.consent.sign_in
        if sign_in is None:
            raise ValueError(
                f"{where} needs consent.sign_in (the gateway's own client at {self.auth.jwt.issuer}, "
                "which proves the person who opens a consent link is the caller)"
            )
        if sign_in.issuer != self.auth.jwt.issuer:
            raise ValueError(
                "consent.sign_in.issuer must be auth.jwt.issuer (the person who signs in is "
                "compared with the caller by issuer and subject)"
            )
        if not self.gateway.public_url:
            raise ValueError(
                f"{where} needs gateway.public_url (the consent pages' address, where the "
                "authorization servers send the browser back: <public_url>/.mcp-edge/consent/callback)"
            )
        public = urlsplit(self.gateway.public_url)
        if public.scheme != "https" and public.hostname not in LOOPBACK_HOSTS:
            raise ValueError(
                f"{where} needs an https gateway.public_url (plain http only for a loopback host): "
                "the consent links, the authorization codes and the browser's cookies would "
                "otherwise cross the network in the clear, and its cookies could not be Secure"
            )
        if self.store.type == "memory" and self.listen.workers > 1:
            raise ValueError(
                f"{where} with listen.workers > 1 needs store.type: redis (grants, single-use "
                "links and callbacks are per process in memory)"
            )
        return self

    @model_validator(mode="after")
    def _listeners(self) -> GatewayConfig:
        ports = {"listen.port": self.listen.port}
        for name, own in (("cluster", self.cluster.listen), ("admin", self.admin.listen)):
            if own is None:
                continue
            taken = next((key for key, port in ports.items() if port == own.port), None)
            if taken is not None:
                raise ValueError(
                    f"{name}.listen.port: must differ from {taken} (each listener has a port of its own)"
                )
            ports[f"{name}.listen.port"] = own.port
        return self

    def listeners(self) -> list[Listener]:
        """The public listener, then those of roles that have one of their own."""
        out = [Listener(PUBLIC, self.listen.host, self.listen.port)]
        for role, own in ((CLUSTER, self.cluster.listen), (ADMIN, self.admin.listen)):
            if own is not None:
                out.append(Listener(role, own.host or self.listen.host, own.port))
        return out

    def public_base(self) -> str:
        if self.gateway.public_url:
            return self.gateway.public_url
        host = self.listen.host
        if host in ("0.0.0.0", "::", ""):
            host = "localhost"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.listen.port}"


# ---------------------------------------------------------------- loading


def _set_path(doc: dict[str, Any], dotted: str, value: Any) -> None:
    node = doc
    *parents, leaf = dotted.split(".")
    for name in parents:
        node = node.setdefault(name, {})
    node[leaf] = value


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


#: Environment variable → (config path, converter).
ENV_VARS: dict[str, tuple[str, Any]] = {
    "HOST": ("listen.host", str),
    "PORT": ("listen.port", int),
    "DRAIN_SECONDS": ("listen.drain_seconds", float),
    "WORKERS": ("listen.workers", int),
    "PUBLIC_URL": ("gateway.public_url", str),
    "GATEWAY_ID": ("gateway.id", str),
    "STATE_KEYS": ("state.keys", lambda v: _csv(v.replace("\n", ","))),  # a key file's lines too
    "STATE_TTL": ("state.ttl_seconds", int),
    "MAX_BODY_BYTES": ("limits.max_body_bytes", int),
    "ALLOWED_ORIGINS": ("security.allowed_origins", _csv),
    "ALLOWED_HOSTS": ("security.allowed_hosts", _csv),
    "LOG_LEVEL": ("logging.level", str.lower),
    "LOG_FORMAT": ("logging.format", str.lower),
    "STORE_TYPE": ("store.type", str.lower),
    "STORE_URL": ("store.url", str),
    "ADVERTISE_URL": ("cluster.advertise_url", str),
    "CLUSTER_PORT": ("cluster.listen.port", int),
    "ADMIN_PORT": ("admin.listen.port", int),
}


def _command_upstream(command: str) -> dict[str, Any]:
    """``--command "npx -y some-server"``: split like a shell would, but never run by one."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ConfigError(f"--command / MCP_EDGE_COMMAND: {exc}") from None
    if not argv:
        raise ConfigError("--command / MCP_EDGE_COMMAND: empty command")
    return {"command": argv}


def _apply_simple_route(doc: dict[str, Any], upstream: str | dict[str, Any]) -> None:
    routes = doc.setdefault("routes", [])
    if routes:
        routes[0]["upstream"] = upstream
        routes[0].pop("endpoints", None)
    else:
        routes.append({"name": "default", "path": "/mcp", "upstream": upstream})


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the parser found and where, on one line."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def load_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    sections: Mapping[str, Any] | None = None,
    default_route: Mapping[str, Any] | None = None,
    in_process: bool = False,
) -> GatewayConfig:
    """Build the configuration: file < environment < flags < ``sections`` (a program's own
    settings, ``mcp_edge.Edge``'s: each section's keys over the file's, ``routes`` whole).
    ``default_route``: the route when nothing else gives one. ``in_process``: for an app wrapped
    in-process (routes name no upstream)."""
    env = os.environ if env is None else env
    flags = dict(flags or {})
    path = path or env.get(ENV_PREFIX + "CONFIG")
    doc: dict[str, Any] = {}
    if path:
        import yaml  # (a configuration without a file loads no YAML parser)

        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"config file {path} is not valid YAML: {_yaml_problem(exc)}"
            ) from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping at the top level")
        doc = loaded or {}

    for name, (dotted, convert) in ENV_VARS.items():
        raw = env.get(ENV_PREFIX + name)
        if raw is None or raw == "":
            continue
        if name in ("HOST", "PORT", "CLUSTER_PORT", "ADMIN_PORT") and "://" in raw:
            # Kubernetes service links (a Service named mcp-edge sets MCP_EDGE_PORT=tcp://...).
            continue
        try:
            _set_path(doc, dotted, convert(raw))
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name}: invalid value") from None
    if env.get(ENV_PREFIX + "UPSTREAM"):
        _apply_simple_route(doc, env[ENV_PREFIX + "UPSTREAM"])
    if env.get(ENV_PREFIX + "COMMAND"):
        _apply_simple_route(doc, _command_upstream(env[ENV_PREFIX + "COMMAND"]))
    if _truthy(env.get(ENV_PREFIX + "ANONYMOUS", "")):
        _set_path(doc, "auth.mode", "anonymous")

    if flags.get("upstream") and flags.get("command"):
        raise ConfigError("give --upstream URL or --command CMD, not both")
    if flags.get("upstream"):
        _apply_simple_route(doc, flags["upstream"])
    if flags.get("command"):
        _apply_simple_route(doc, _command_upstream(flags["command"]))
    if flags.get("host") is not None:
        _set_path(doc, "listen.host", flags["host"])
    if flags.get("port") is not None:
        _set_path(doc, "listen.port", flags["port"])
    if flags.get("workers") is not None:
        _set_path(doc, "listen.workers", flags["workers"])
    if flags.get("anonymous"):
        _set_path(doc, "auth.mode", "anonymous")
    if flags.get("state_keys"):
        _set_path(doc, "state.keys", flags["state_keys"])
    if default_route is not None and not doc.get("routes"):
        doc["routes"] = [dict(default_route)]
    for name, value in (sections or {}).items():
        own = doc.get(name)
        if isinstance(value, Mapping):
            doc[name] = {**own, **value} if isinstance(own, dict) else dict(value)
        else:
            doc[name] = value

    try:
        return GatewayConfig.model_validate(doc, context={IN_PROCESS: in_process})
    except ValidationError as exc:
        raise InvalidConfig(problems(exc)) from None


class InvalidConfig(ConfigError):
    """Settings that do not validate: each problem's place (the keys down to the setting) and
    what is wrong, for a caller that names settings its own way (``mcp_edge.Edge``)."""

    def __init__(self, found: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.problems = found
        super().__init__(
            "; ".join(f"{'.'.join(map(str, loc)) or '(top level)'}: {msg}" for loc, msg in found)
        )


def problems(exc: ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    return [(tuple(err["loc"]), err["msg"].removeprefix("Value error, ")) for err in exc.errors()]


def format_validation_error(exc: ValidationError) -> str:
    return str(InvalidConfig(problems(exc)))
