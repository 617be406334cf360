"""Configuration: one YAML file, overridden by ``MCP_EDGE_*`` environment variables, overridden by
command-line flags. Validated at start; errors name the offending field."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gateway.auth.config import AuthConfig, RouteAuthConfig, UpstreamCredentialConfig
from gateway.core.seal import KeyRing, StateKey, parse_key_spec

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


class LimitsSection(_Section):
    max_body_bytes: int = Field(4 * 1024 * 1024, gt=0)
    #: Largest upstream response of an MRTR method the gateway will hold to inspect.
    max_inspect_bytes: int = Field(16 * 1024 * 1024, gt=0)
    connect_timeout: float = Field(5.0, gt=0)
    #: Longest silence between two chunks of an upstream response (SSE keep-alives reset it).
    read_timeout: float = Field(300.0, gt=0)
    write_timeout: float = Field(30.0, gt=0)
    max_connections: int = Field(512, gt=0)
    max_keepalive_connections: int = Field(128, ge=0)


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


class RouteConfig(_Section):
    name: str = "default"
    path: str = "/mcp"
    #: The upstream MCP endpoint URL (Streamable HTTP).
    upstream: str
    #: Reject ``inputResponses`` that come without a ``requestState``.
    strict: bool = False
    auth: RouteAuthConfig = Field(default_factory=RouteAuthConfig)
    upstream_auth: UpstreamCredentialConfig = Field(default_factory=UpstreamCredentialConfig)

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/") or v.startswith("/.well-known") or v in ("/healthz", "/readyz", "/metrics"):
            raise ValueError("must start with '/' and not clash with the gateway's own endpoints")
        return v.rstrip("/") or "/"

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http(s) URL, e.g. http://127.0.0.1:3001/mcp")
        return v

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
    routes: list[RouteConfig] = Field(default_factory=list)

    @model_validator(mode="after")
    def _routes(self) -> GatewayConfig:
        if not self.routes:
            raise ValueError("no route configured: give --upstream URL or a 'routes' list in the config file")
        for attr in ("name", "path"):
            seen = [getattr(r, attr) for r in self.routes]
            if len(set(seen)) != len(seen):
                raise ValueError(f"route {attr}s must be unique")
        return self

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
    "PUBLIC_URL": ("gateway.public_url", str),
    "GATEWAY_ID": ("gateway.id", str),
    "STATE_KEYS": ("state.keys", _csv),
    "STATE_TTL": ("state.ttl_seconds", int),
    "MAX_BODY_BYTES": ("limits.max_body_bytes", int),
    "ALLOWED_ORIGINS": ("security.allowed_origins", _csv),
    "ALLOWED_HOSTS": ("security.allowed_hosts", _csv),
    "LOG_LEVEL": ("logging.level", str.lower),
    "LOG_FORMAT": ("logging.format", str.lower),
}


def _apply_simple_route(doc: dict[str, Any], upstream: str) -> None:
    routes = doc.setdefault("routes", [])
    if routes:
        routes[0]["upstream"] = upstream
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
        try:
            _set_path(doc, dotted, convert(raw))
        except ValueError:
            raise ConfigError(f"{ENV_PREFIX}{name}: invalid value") from None
    if env.get(ENV_PREFIX + "UPSTREAM"):
        _apply_simple_route(doc, env[ENV_PREFIX + "UPSTREAM"])
    if _truthy(env.get(ENV_PREFIX + "ANONYMOUS", "")):
        _set_path(doc, "auth.mode", "anonymous")

    if flags.get("upstream"):
        _apply_simple_route(doc, flags["upstream"])
    if flags.get("host") is not None:
        _set_path(doc, "listen.host", flags["host"])
    if flags.get("port") is not None:
        _set_path(doc, "listen.port", flags["port"])
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
