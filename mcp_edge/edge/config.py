"""The edge's own sections: who the gateway is (``gateway:``), where and how it listens
(``listen:``), the bounds on every request and upstream answer (``limits:``), the key ring and the
life of sealed state (``state:``), and which hosts and origins may call (``security:``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from mcp_edge.core.headers import LOOPBACK_HOSTS, is_loopback
from mcp_edge.core.seal import KeyRing, StateKey, parse_key_spec
from mcp_edge.core.strict_json import DEFAULT_MAX_DEPTH, MAX_DEPTH_LIMIT
from mcp_edge.core.urls import no_credentials
from mcp_edge.sections import ConfigError, Section


class GatewaySection(Section):
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
        return no_credentials(v).rstrip("/")  # (published: the metadata's resource, audiences)


class ListenSection(Section):
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
    #: A client that takes nothing of its answer for this many seconds, while the gateway holds
    #: more of it than fits its connection's buffer, is disconnected.
    write_timeout: float = Field(60.0, gt=0, le=3600)
    #: Idle client connections are closed after this many seconds (keep it above the idle
    #: timeout of any load balancer in front).
    keepalive_seconds: float = Field(75.0, gt=0, le=3600)


class LimitsSection(Section):
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
    #: Upstream answers all requests in flight may hold at once for inspection, per process,
    #: until their clients have taken them (answers up to 64 KiB are not counted); over it the
    #: client gets 503 with Retry-After (``-32603``, ``data.reason: answer_budget``).
    max_inflight_answer_bytes: int = Field(64 * 1024 * 1024, gt=0)
    #: Deepest nesting of objects and arrays accepted in a request body (-32700 beyond).
    max_json_depth: int = Field(DEFAULT_MAX_DEPTH, ge=8, le=MAX_DEPTH_LIMIT)

    @model_validator(mode="after")
    def _body_budget(self) -> LimitsSection:
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError("max_inflight_body_bytes: must be at least max_body_bytes")
        if self.max_inflight_answer_bytes < self.max_inspect_bytes:
            raise ValueError("max_inflight_answer_bytes: must be at least max_inspect_bytes")
        return self


class StateSection(Section):
    #: Key specs, ``<base64url>`` or ``<kid>:<base64url>``; the first seals, all open.
    keys: list[str] = Field(default_factory=list, repr=False)
    #: Files holding key specs (comma or newline separated), e.g. a mounted Kubernetes Secret.
    key_files: list[str] = Field(default_factory=list)
    ttl_seconds: int = Field(600, gt=0, le=24 * 3600)
    leeway_seconds: int = Field(5, ge=0, le=300)
    max_rounds: int = Field(16, ge=1, le=1000)


class SecuritySection(Section):
    #: Origins allowed on requests that carry ``Origin`` (``*`` wildcards allowed).
    #: Default: loopback origins plus the public URL's origin.
    allowed_origins: list[str] | None = None
    #: Host header values accepted (DNS-rebinding protection). Default: loopback hosts when
    #: listening on loopback, else any.
    allowed_hosts: list[str] | None = None


def allowed_hosts(
    security: SecuritySection, listen: ListenSection, gateway: GatewaySection
) -> list[str] | None:
    """The Host values the MCP routes accept (None: any)."""
    if security.allowed_hosts is not None:
        return None if "*" in security.allowed_hosts else security.allowed_hosts
    if not is_loopback(listen.host):
        return None  # behind a load balancer, Host varies; restrict it with security.allowed_hosts
    hosts = [f"[{host}]" if ":" in host else host for host in LOOPBACK_HOSTS]
    if gateway.public_url:
        hosts.append(urlsplit(gateway.public_url).netloc)
    return hosts


def allowed_origins(
    security: SecuritySection, listen: ListenSection, gateway: GatewaySection
) -> list[str]:
    """The Origin values the MCP routes accept."""
    if security.allowed_origins is not None:
        return security.allowed_origins
    origins: list[str] = []
    if is_loopback(listen.host):
        hosts = [f"[{host}]" if ":" in host else host for host in LOOPBACK_HOSTS]
        origins += [
            f"{scheme}://{host}{port}"
            for scheme in ("http", "https")
            for host in hosts
            for port in ("", ":*")
        ]
    if gateway.public_url:
        parts = urlsplit(gateway.public_url)
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return origins


def key_specs(state: StateSection, keys_from: str = "state.keys") -> list[tuple[str, str]]:
    """Every configured key spec, with where it came from: ``state.keys`` (which
    ``MCP_EDGE_STATE_KEYS`` fills; ``keys_from`` names it), then each key file's."""
    specs: list[tuple[str, str]] = [(keys_from, s) for s in state.keys]
    for file in state.key_files:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"state.key_files: cannot read {file}: {exc.strerror or exc}"
            ) from None
        except UnicodeDecodeError:
            raise ConfigError(
                f"state.key_files: {file} is not text (base64url keys, one a line)"
            ) from None
        specs.extend(
            (f"state.key_files ({file})", s)
            for s in text.replace("\n", ",").split(",")
            if s.strip()
        )
    return specs


#: What the gateway says without a key (``mcp-edge serve``'s words; ``mcp_edge.Edge`` has its own).
NO_KEY = (
    "no state key configured: set MCP_EDGE_STATE_KEYS (generate one with "
    "'mcp-edge keys generate') or state.keys / state.key_files in the config file"
)


def load_key_ring(
    state: StateSection, *, keys_from: str = "state.keys", no_key: str = NO_KEY
) -> KeyRing:
    """Resolve the configured keys. No key is a hard error (fail closed): ``no_key`` says so, in
    the words of the caller's form (``keys_from``: how ``state.keys`` was given)."""
    specs = key_specs(state, keys_from)
    if not specs:
        raise ConfigError(no_key)
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
