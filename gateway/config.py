"""Configuration: one YAML file, overridden by ``MCP_EDGE_*`` environment variables, overridden by
command-line flags. Validated at start; errors name the offending field."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.auth.config import AuthConfig, RouteAuthConfig, UpstreamCredentialConfig
from gateway.cache.config import CacheSection, RouteCache
from gateway.policy.config import RoutePolicyConfig
from gateway.observability.config import ObservabilitySection
from gateway.ratelimit.config import RateLimitSection, RouteRateLimits
from gateway.core.seal import KeyRing, StateKey, parse_key_spec
from gateway.core.strict_json import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT
from gateway.edge.compat import RouteCompat
from gateway.edge.listeners import ADMIN, CLUSTER, PUBLIC, Listener

ENV_PREFIX = "MCP_EDGE_"


class ConfigError(Exception):
    """A configuration problem, phrased for the operator."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GatewaySection(_Section):
    #: This gateway's public identity; sealed state is bound to it (with the route name).
    id: str = "mcp-edge"
    #: Canonical public base URL (scheme://host[:port]), used for OAuth metadata and audiences.
    public_url: str | None = None

    @field_validator("public_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an absolute http(s) URL")
        return v.rstrip("/")


class ListenSection(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    #: Seconds to let in-flight requests and streams finish after SIGTERM.
    drain_seconds: float = Field(20.0, ge=0)
    #: Worker processes (each a full, independent gateway; they share nothing but the key ring).
    workers: int = Field(1, ge=1, le=64)
    #: Client connections one process keeps. Over it, the connection waiting longest without a
    #: request in progress is closed; when all have one, the new connection gets 503.
    max_connections: int = Field(2048, ge=1, le=1_000_000)
    #: A request's head (request line and headers) must arrive within this many seconds of the
    #: connection opening or of its first byte (else 408), and be at most max_header_bytes (431).
    header_timeout: float = Field(10.0, gt=0, le=3600)
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024)
    #: A request's whole body must arrive within this many seconds (else 408).
    body_timeout: float = Field(30.0, gt=0, le=3600)
    #: Idle client connections are closed after this many seconds (keep it above the idle
    #: timeout of any load balancer in front).
    keepalive_seconds: float = Field(75.0, gt=0, le=3600)


class LimitsSection(_Section):
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    #: Largest upstream response of an MRTR method the gateway will hold to inspect.
    max_inspect_bytes: int = Field(16 * 1024 * 1024, gt=0)
    connect_timeout: float = Field(5.0, gt=0)
    #: Longest silence between two chunks of an upstream response (SSE keep-alives reset it).
    read_timeout: float = Field(300.0, gt=0)
    #: Longest wait for the final response of ``tools/call``, ``resources/read`` and
    #: ``prompts/get``, whatever the upstream streams meanwhile (progress, keep-alives).
    final_response_timeout: float = Field(600.0, gt=0)
    max_connections: int = Field(512, gt=0)
    #: How long an idle upstream connection is kept for reuse. Keep it below the upstream's own
    #: idle timeout (uvicorn closes idle connections after 5 s), or a request may be sent on a
    #: connection the upstream is closing.
    keepalive_seconds: float = Field(4.0, gt=0)
    #: Request bodies all requests in flight may hold at once, per process; over it a request
    #: gets 503 with Retry-After before its body is read.
    max_inflight_body_bytes: int = Field(64 * 1024 * 1024, gt=0)
    #: Deepest nesting of objects and arrays accepted in a request body (-32700 beyond).
    max_json_depth: int = Field(DEFAULT_MAX_DEPTH, ge=8, le=MAX_DEPTH_LIMIT)

    @model_validator(mode="after")
    def _body_budget(self) -> LimitsSection:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes: must be at least max_body_bytes")
        return self


class StateSection(_Section):
    #: Key specs, ``<base64url>`` or ``<kid>:<base64url>``; the first seals, all open.
    keys: list[str] = Field(default_factory=list, repr=False)
    #: Files holding key specs (comma or newline separated), e.g. a mounted Kubernetes Secret.
    key_files: list[str] = Field(default_factory=list)
    ttl_seconds: int = Field(600, gt=0, le=24 * 3600)
    leeway_seconds: int = Field(5, ge=0, le=300)
    max_rounds: int = Field(16, ge=1, le=1000)


class SecuritySection(_Section):
    #: Origins allowed on requests that carry ``Origin`` (``*`` wildcards allowed).
    #: Default: loopback origins plus the public URL's origin.
    allowed_origins: list[str] | None = None
    #: Host header values accepted (DNS-rebinding protection). Default: loopback hosts when
    #: listening on loopback, else any.
    allowed_hosts: list[str] | None = None


class StoreSection(_Section):
    """Where single-use routes record spent states (see ``routes[].single_use``)."""

    #: ``memory`` is per process (one replica only); ``redis`` is shared by all replicas.
    type: Literal["memory", "redis"] = "memory"
    #: ``redis://[user:password@]host:port/db``, ``rediss://...`` or ``unix://...`` (env MCP_EDGE_STORE_URL).
    url: str | None = Field(None, repr=False)
    #: Store unreachable: refuse the retry with HTTP 503 (default) or let it through unchecked.
    fail_open: bool = False
    timeout_seconds: float = Field(0.5, gt=0, le=30)
    key_prefix: str = "mcp-edge:jti:"
    #: Memory store only: most spent states remembered at once (then it refuses, fail closed).
    max_entries: int = Field(1_000_000, gt=0)

    @model_validator(mode="after")
    def _url(self) -> StoreSection:
        if self.type == "redis":
            if not self.url:
                raise ValueError("url: required when type is redis (e.g. redis://redis:6379/0)")
            if urlsplit(self.url).scheme not in ("redis", "rediss", "unix"):
                raise ValueError("url: must be a redis://, rediss:// or unix:// URL")
        return self


class ClusterListen(_Section):
    """A listener of its own for the replicas' endpoints (``/.mcp-edge/*``)."""

    #: Default: ``listen.host``. A private address (the pod IP) keeps it off public networks.
    host: str | None = None
    #: Must differ from ``listen.port`` (env MCP_EDGE_CLUSTER_PORT).
    port: int = Field(ge=1, le=65535)


class AdminListen(_Section):
    """A listener of its own for the probes and the scraper (``/healthz``, ``/readyz``, ``/metrics``)."""

    #: Default: ``listen.host``.
    host: str | None = None
    #: Must differ from the other listeners' ports (env MCP_EDGE_ADMIN_PORT).
    port: int = Field(ge=1, le=65535)


class AdminSection(_Section):
    #: Serve ``/healthz``, ``/readyz`` and ``/metrics`` on a listener of their own, and only
    #: there (404 on the public and cluster ports). Without it they share the public listener.
    listen: AdminListen | None = None


class ClusterSection(_Section):
    """How replicas reach each other (the legacy bridge's parked calls and stdio sessions)."""

    #: This replica's own address as other replicas reach it, e.g. ``http://$(POD_IP):9090``
    #: (env MCP_EDGE_ADVERTISE_URL). Sealed into the state of calls parked here. Default: the
    #: cluster listener's address (else the public one), or this host's resolved address when
    #: listening on all interfaces.
    advertise_url: str | None = None
    #: Serve the replicas' endpoints on a listener of their own, and only there (404 on the
    #: public port). Without it they share the public listener.
    listen: ClusterListen | None = None
    #: Most legacy calls held open on this replica at once (then flows use another strategy).
    max_parked: int = Field(256, ge=0, le=100_000)

    @field_validator("advertise_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return None if v is None else _check_http_url(v).rstrip("/")


Strategy = Literal["resume", "park", "replay"]


def _strategy_list(v: Any) -> Any:
    """A strategy may be given alone or as a list in order of preference."""
    if isinstance(v, str):
        v = [v]
    if isinstance(v, list):
        if not v:
            raise ValueError("give at least one strategy (resume, park, replay)")
        if len(set(v)) != len(v):
            raise ValueError("a strategy is listed twice")
    return v


class BridgeSection(_Section):
    """How 2026-07-28 calls to a legacy upstream continue after the server asked a question."""

    #: In order of preference: the first one a call can use is taken. ``resume`` needs an
    #: upstream event store; ``park`` holds the call on one replica; ``replay`` re-runs the call
    #: (only for tools that do nothing irreversible before their questions: an opt-in).
    strategy: list[Strategy] = Field(default_factory=lambda: ["resume", "park"])
    #: Per-tool / per-prompt strategies, overriding ``strategy``.
    tools: dict[str, list[Strategy]] = Field(default_factory=dict)
    prompts: dict[str, list[Strategy]] = Field(default_factory=dict)
    #: How long a parked call waits for its answer before it is cancelled upstream (never longer
    #: than ``state.ttl_seconds``: after that its state is expired anyway).
    park_seconds: float = Field(120.0, gt=0, le=3600)
    #: After a question, how long to listen for more that the server asks at the same time, so
    #: the client gets them in one round (0: one question per round).
    question_window_ms: int = Field(20, ge=0, le=5000)
    #: A JSON-response-mode server cannot ask mid-call; its calls fail after this long.
    json_response_timeout: float = Field(30.0, gt=0, le=3600)
    #: Idle legacy sessions kept for reuse by the same caller (one-shot calls), and for how long.
    max_idle_sessions: int = Field(64, ge=0, le=10_000)
    session_idle_seconds: float = Field(60.0, gt=0, le=3600)

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategies(cls, v: Any) -> Any:
        return _strategy_list(v)

    @field_validator("tools", "prompts", mode="before")
    @classmethod
    def _per_name(cls, v: Any) -> Any:
        return {k: _strategy_list(s) for k, s in v.items()} if isinstance(v, dict) else v


class StdioLimits(_Section):
    """Resource limits of each local server process (``setrlimit``, soft = hard, inherited by
    what it starts). ``null`` leaves a limit as the gateway's. Defaults measured with Node 22
    servers: see docs/legacy-and-stdio.md, "What a local server can reach"."""

    #: Private writable memory (RLIMIT_DATA: heap and anonymous mappings, what a program really
    #: allocates). ``npx`` fetching a package peaks between 256 and 512 MiB.
    memory_bytes: int | None = Field(2 * 1024**3, ge=64 * 1024**2)
    #: Address space (RLIMIT_AS). Off by default: V8 reserves about 10 GiB per WebAssembly memory
    #: (Node's own ``fetch`` uses one), so a bound a Node server survives bounds nothing real.
    address_space_bytes: int | None = Field(None, ge=64 * 1024**2)
    #: CPU seconds a process may use in its life (RLIMIT_CPU); then it is killed and restarted.
    cpu_seconds: int | None = Field(None, ge=1)
    #: Open files (RLIMIT_NOFILE).
    open_files: int | None = Field(1024, ge=16, le=1_048_576)
    #: Processes and threads of the child's user (RLIMIT_NPROC; a Node server uses about 11 per
    #: process). Applied only when children run as a user of their own: the count is per user.
    processes: int | None = Field(1024, ge=16)


class StdioUpstreamConfig(_Section):
    """A local MCP server the gateway runs itself, speaking the 2025-era protocol over stdio."""

    #: The program and its arguments (an argv list: no shell is involved).
    command: list[str] = Field(min_length=1)
    #: Environment of the child, on top of a minimal inherited one (PATH, HOME, LANG, ...).
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    #: More variables to inherit from the gateway's environment (never its MCP_EDGE_* ones).
    inherit_env: list[str] = Field(default_factory=list)
    #: Working directory. Default: a fresh private directory owned by the child's user (also its
    #: HOME and TMPDIR unless ``env`` sets them), removed when the process exits.
    cwd: str | None = None
    #: The user (name or number) the processes run as when the gateway runs as root; default
    #: ``nobody``. A gateway that is not root cannot switch users: its children run as itself.
    user: str | None = None
    #: Their group (name or number); default: the user's primary group. No supplementary groups.
    group: str | None = None
    limits: StdioLimits = Field(default_factory=StdioLimits)
    #: Processes to run; each serves one call that may ask the client at a time.
    instances: int = Field(1, ge=1, le=32)
    #: What the processes are told the client can do (once, at initialize, for all callers).
    #: Each request is still only asked what it declared itself.
    capabilities: dict[str, Any] = Field(
        default_factory=lambda: {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}
    )
    max_line_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    #: Requests in flight on one process at most (then the caller gets 503).
    max_pending: int = Field(64, ge=1, le=10_000)
    stop_grace_seconds: float = Field(5.0, gt=0, le=120)
    restart_backoff_max: float = Field(30.0, gt=0, le=600)
    #: How long a call waits for a process to be free (all leased to calls awaiting answers).
    acquire_timeout: float = Field(30.0, gt=0, le=600)

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if any(not isinstance(a, str) or not a for a in v):
            raise ValueError("every element of the command must be a non-empty string")
        return v

    @field_validator("capabilities")
    @classmethod
    def _caps(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = set(v) - {"elicitation", "sampling", "roots"}
        if unknown:
            raise ValueError(f"only elicitation, sampling and roots can be declared, not {sorted(unknown)}")
        return v


def _check_http_url(v: str) -> str:
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{v!r} must be an absolute http(s) URL, e.g. http://127.0.0.1:3001/mcp")
    return v


class RouteConfig(_Section):
    name: str = "default"
    path: str = "/mcp"
    #: The upstream MCP endpoint URL (Streamable HTTP), or a local server to run:
    #: ``{command: [argv...], env: {...}, cwd: ..., instances: N}``. Give this or ``endpoints``.
    upstream: str | StdioUpstreamConfig | None = None
    #: Several upstream processes serving the same MCP server; first rounds are spread round robin.
    endpoints: list[str] | None = None
    #: Resolve the upstream's host name to all its addresses and spread over them (a Kubernetes
    #: headless Service), refreshing every ``dns_refresh_seconds``. The Host header keeps the name.
    dns: bool = False
    dns_refresh_seconds: float = Field(10.0, gt=0, le=3600)
    #: Send each retry to the endpoint that answered the round before (sealed in the state). Needed
    #: when upstream processes cannot open each other's requestState (per-process keys).
    affinity: bool = True
    #: Each sealed state is accepted once (needs the shared ``store`` with several replicas).
    single_use: bool = False
    #: Reject ``inputResponses`` that come without a ``requestState``.
    strict: bool = False
    #: The upstream's protocol era: ``modern`` (2026-07-28), ``legacy`` (2025-era: 2026-07-28
    #: clients are served through the bridge) or ``auto`` (detected with ``server/discover``).
    era: Literal["auto", "modern", "legacy"] = "auto"
    bridge: BridgeSection = Field(default_factory=BridgeSection)
    #: Legacy-era clients' ``Mcp-Session-Id``: replaced by a sealed token (endpoint + upstream id,
    #: bound to the caller), so a session stays on its upstream process behind any replica.
    seal_sessions: bool = True
    #: Legacy-era clients (no ``MCP-Protocol-Version`` header, or a 2025 version): ``allow`` passes
    #: their traffic through (never with MRTR fields, which are refused at the edge), ``deny``
    #: answers them with an error naming 2026-07-28.
    legacy_clients: Literal["allow", "deny"] = "allow"
    auth: RouteAuthConfig = Field(default_factory=RouteAuthConfig)
    upstream_auth: UpstreamCredentialConfig = Field(default_factory=UpstreamCredentialConfig)
    #: Budgets per caller / in total / per tool (see ``gateway.ratelimit``).
    rate_limits: RouteRateLimits = Field(default_factory=RouteRateLimits)
    #: The edge cache for results the upstream marks cacheable (see ``gateway.cache``).
    cache: RouteCache = Field(default_factory=RouteCache)
    #: Authorization rules, the gateway's approval question, tool pinning (see ``gateway.policy``).
    policy: RoutePolicyConfig = Field(default_factory=RoutePolicyConfig)
    #: Switches for clients that need the spec bent (see ``gateway.edge.compat``).
    compat: RouteCompat = Field(default_factory=RouteCompat)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if (not v.startswith("/") or v.startswith(("/.well-known", "/.mcp-edge"))
                or v in ("/healthz", "/readyz", "/metrics")):  # fmt: skip
            raise ValueError("must start with '/' and not clash with the gateway's own endpoints")
        return v.rstrip("/") or "/"

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str | StdioUpstreamConfig | None) -> str | StdioUpstreamConfig | None:
        return _check_http_url(v) if isinstance(v, str) else v

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one URL")
        if len(set(v)) != len(v):
            raise ValueError("must not list a URL twice")
        return [_check_http_url(url) for url in v]

    @model_validator(mode="after")
    def _targets(self) -> RouteConfig:
        if (self.upstream is None) == (self.endpoints is None):
            raise ValueError("give either 'upstream' (one URL) or 'endpoints' (a list of URLs)")
        if self.stdio is not None and self.era == "modern":
            raise ValueError("era: a stdio upstream speaks the 2025-era protocol (use legacy or auto)")
        if self.stdio is not None and not self.seal_sessions:
            raise ValueError(
                "seal_sessions: a stdio route needs sealed session ids (a 2025-era client's session lives in one "
                "replica, and only a sealed id can say which; an unsealed one would let clients choose the address "
                "the gateway relays to)"
            )
        if self.dns:
            if not isinstance(self.upstream, str):
                raise ValueError("dns: needs 'upstream' (one URL whose host name is resolved), not 'endpoints'")
            if urlsplit(self.upstream).scheme != "http":
                raise ValueError("dns: only http:// upstreams (TLS to individual addresses is not supported)")
        return self

    @property
    def stdio(self) -> StdioUpstreamConfig | None:
        return self.upstream if isinstance(self.upstream, StdioUpstreamConfig) else None

    def upstream_urls(self) -> list[str]:
        """The configured endpoint URLs (before any DNS resolution); none for a stdio upstream."""
        if self.endpoints is not None:
            return list(self.endpoints)
        return [self.upstream] if isinstance(self.upstream, str) else []

    def describe_upstream(self) -> str:
        if self.stdio is not None:
            return "stdio: " + " ".join(self.stdio.command)
        return " ".join(self.upstream_urls())

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not v or not all(c.isalnum() or c in "-_" for c in v):
            raise ValueError("must be letters, digits, '-' or '_'")
        return v


class LoggingSection(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["json", "text"] = "json"
    access_log: bool = False


class GatewayConfig(_Section):
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
            raise ValueError("no route configured: give --upstream URL or a 'routes' list in the config file")
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
            raise ValueError("cache.backend: redis uses the store's Redis; set store.type: redis and store.url")
        for route in self.routes:
            if route.cache.private and self.auth.mode == "anonymous":
                raise ValueError(
                    f"routes ({route.name}): cache.private needs authenticated callers (auth.mode jwt or "
                    "trusted_header); anonymous callers are all one principal"
                )
            identity = route.upstream_auth.principal_header
            if identity is not None and identity.lower() in route.cache.ignore_headers:
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
            if (route.policy.asks_approval and route.policy.approval.single_use and self.store.type == "memory"
                    and self.listen.workers > 1):  # fmt: skip
                raise ValueError(
                    f"routes ({route.name}): single-use approvals with listen.workers > 1 need store.type: redis"
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
                raise ValueError(f"{name}.listen.port: must differ from {taken} (each listener has a port of its own)")
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


def load_config(
    path: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> GatewayConfig:
    """Build the configuration: file < environment < flags."""
    env = os.environ if env is None else env
    flags = dict(flags or {})
    path = path or env.get(ENV_PREFIX + "CONFIG")
    doc: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
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

    try:
        return GatewayConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        message = err["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return "; ".join(lines)


def load_key_ring(state: StateSection) -> KeyRing:
    """Resolve the configured keys. No key is a hard error (fail closed)."""
    specs: list[tuple[str, str]] = [("state.keys", s) for s in state.keys]
    for file in state.key_files:
        try:
            text = Path(file).read_text()
        except OSError as exc:
            raise ConfigError(f"state.key_files: cannot read {file}: {exc.strerror}") from None
        specs.extend((f"state.key_files ({file})", s) for s in text.replace("\n", ",").split(",") if s.strip())
    if not specs:
        raise ConfigError(
            "no state key configured: set MCP_EDGE_STATE_KEYS (generate one with "
            "'mcp-edge keys generate') or state.keys / state.key_files in the config file"
        )
    keys: list[StateKey] = []
    for where, spec in specs:
        try:
            keys.append(parse_key_spec(spec))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    try:
        return KeyRing(keys)
    except ValueError as exc:
        raise ConfigError(f"state: {exc}") from None
