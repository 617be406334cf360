"""Authentication settings: the top-level ``auth:`` section and each route's ``auth:`` and
``upstream_auth:`` (:mod:`mcp_edge.auth.factory` turns them into authenticators).

Shape (see ``config/auth-*.yaml`` for commented examples)::

    auth:
      mode: jwt                      # none | anonymous | jwt | trusted_header
      authorization_servers: [https://login.example.com/realms/mcp]
      scopes_supported: [mcp:tools]
      jwt:
        issuer: https://login.example.com/realms/mcp
        jwks_url: https://login.example.com/realms/mcp/protocol/openid-connect/certs
        algorithms: [RS256]
    routes:
      - name: default
        path: /mcp
        upstream: http://127.0.0.1:3001/mcp
        auth: {required_scopes: [mcp:tools]}
        upstream_auth: {principal_header: X-MCP-Principal}

Validation only checks shape and consistency; files and environment variables holding secrets
or keys are read once, when the authenticators are built at start.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from mcp_edge.auth.base import DEFAULT_MAX_TOKEN_BYTES
from mcp_edge.auth.challenge import UNADVERTISED_SCOPES
from mcp_edge.auth.jwks import (
    DEFAULT_MAX_AGE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MIN_REFRESH_INTERVAL,
    DEFAULT_TIMEOUT,
    HttpClientFactory,
    JwksKeySource,
)
from mcp_edge.auth.keys import (
    ASYMMETRIC_ALGORITHMS,
    HMAC_ALGORITHMS,
    SUPPORTED_ALGORITHMS,
    KeySource,
    StaticKeySource,
    key_from_pem,
    key_from_secret,
)
from mcp_edge.auth.upstream import check_header_name, read_secret
from mcp_edge.core.headers import LOOPBACK_HOSTS
from mcp_edge.core.urls import no_credentials, redact


class AuthSetupError(ValueError):
    """Authentication cannot be set up as configured (message is for the operator)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _string_list(value: Any) -> Any:
    """Accept a single string where a list is expected (``audience: https://x/mcp``)."""
    return [value] if isinstance(value, str) else value


def _check_scopes(scopes: list[str], where: str) -> list[str]:
    for scope in scopes:
        if not scope or any(ch.isspace() or ch in '"\\' for ch in scope):
            raise ValueError(f"{where}: {scope!r} is not a valid scope token")
    return list(dict.fromkeys(scopes))


def _check_url(url: str, what: str, *, allow_http: bool = False) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https URL, got {redact(url)!r}")
    if parts.scheme == "http" and not allow_http and parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(f"{what} must use https (plain http is allowed only for loopback hosts)")
    if parts.fragment:
        raise ValueError(f"{what} must not have a fragment")
    return url


# ---------------------------------------------------------------------- jwt


class PublicKeyConfig(_Model):
    """A static verification key: PEM text inline or a PEM file (public key or certificate)."""

    kid: str | None = None
    pem: str | None = Field(None, repr=False)
    file: str | None = None
    #: Pin the key to one algorithm (recommended when several algorithms are allowed).
    algorithm: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PublicKeyConfig:
        if (self.pem is None) == (self.file is None):
            raise ValueError("set exactly one of pem or file")
        if self.algorithm is not None and self.algorithm not in ASYMMETRIC_ALGORITHMS:
            raise ValueError(f"algorithm must be one of {sorted(ASYMMETRIC_ALGORITHMS)}")
        return self


class JwtConfig(_Model):
    """Bearer JWT validation (the gateway as an OAuth resource server)."""

    #: Expected ``iss`` (exact match).
    issuer: str
    #: Where the authorization server publishes its signing keys.
    jwks_url: str | None = None
    #: Or: fixed public keys / certificates.
    public_keys: list[PublicKeyConfig] = Field(default_factory=list)
    #: Or: an HMAC shared secret (only for HS* algorithms; needs at least 32 bytes).
    shared_secret_env: str | None = None
    shared_secret_file: str | None = None
    #: Accepted ``alg`` values. Never ``none``; HS* only with a shared secret.
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256"])
    #: Accepted ``aud`` values for every route (default: each route's canonical public URL).
    #: A route's ``auth.audience`` overrides this.
    audience: list[str] | None = None
    #: Clock skew tolerated on ``exp``, ``nbf`` and ``iat``.
    leeway_seconds: float = Field(30.0, ge=0, le=300)
    #: Accepted ``typ`` header values, e.g. ``[at+jwt]`` (RFC 9068). Empty: not checked.
    token_types: list[str] = Field(default_factory=list)
    max_token_bytes: int = Field(DEFAULT_MAX_TOKEN_BYTES, ge=256, le=1024 * 1024)
    #: JWKS: refresh attempts (e.g. on an unknown ``kid``) happen at most this often.
    jwks_min_refresh_seconds: float = Field(DEFAULT_MIN_REFRESH_INTERVAL, ge=1, le=3600)
    #: JWKS: refetch keys older than this even without an unknown ``kid``.
    jwks_cache_seconds: float = Field(DEFAULT_MAX_AGE, ge=10, le=7 * 24 * 3600)
    jwks_timeout_seconds: float = Field(DEFAULT_TIMEOUT, gt=0, le=60)
    jwks_max_bytes: int = Field(DEFAULT_MAX_BYTES, ge=1024, le=16 * 1024 * 1024)
    #: Allow ``http://`` JWKS URLs for non-loopback hosts (e.g. an in-cluster service).
    allow_http_jwks: bool = False

    @field_validator("audience", mode="before")
    @classmethod
    def _audience_list(cls, v: Any) -> Any:
        return _string_list(v)

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, v: str) -> str:
        if not v or v != v.strip():
            raise ValueError("must be the exact issuer identifier of the authorization server")
        return no_credentials(v)  # (published as the metadata's authorization server)

    @field_validator("algorithms")
    @classmethod
    def _algorithms(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("list at least one algorithm, e.g. [RS256]")
        for alg in v:
            if alg.lower() == "none":
                raise ValueError("'none' is never accepted: tokens must be signed")
            if alg not in SUPPORTED_ALGORITHMS:
                raise ValueError(
                    f"unknown algorithm {alg!r}; supported: {', '.join(sorted(SUPPORTED_ALGORITHMS))}"
                )
        return list(dict.fromkeys(v))

    @model_validator(mode="after")
    def _key_source(self) -> JwtConfig:
        secret = self.shared_secret_env is not None or self.shared_secret_file is not None
        sources = [self.jwks_url is not None, bool(self.public_keys), secret]
        if sum(sources) != 1:
            raise ValueError(
                "configure exactly one key source: jwks_url, public_keys, or shared_secret_env/shared_secret_file"
            )
        if self.shared_secret_env is not None and self.shared_secret_file is not None:
            raise ValueError("set only one of shared_secret_env and shared_secret_file")
        hmac_algs = [a for a in self.algorithms if a in HMAC_ALGORITHMS]
        if secret:
            if len(hmac_algs) != len(self.algorithms):
                raise ValueError(
                    "with a shared secret, algorithms may only be HS256, HS384 or HS512"
                )
        elif hmac_algs:
            raise ValueError(
                f"{', '.join(hmac_algs)} need a shared secret (shared_secret_env or shared_secret_file); "
                "HS algorithms are never verified with public keys"
            )
        if self.jwks_url is not None:
            _check_url(self.jwks_url, "jwks_url", allow_http=self.allow_http_jwks)
        for key in self.public_keys:
            if key.algorithm is not None and key.algorithm not in self.algorithms:
                raise ValueError(
                    f"public key {key.kid or '(no kid)'} is pinned to {key.algorithm}, "
                    "which is not in algorithms"
                )
        kids = [k.kid for k in self.public_keys if k.kid is not None]
        if len(set(kids)) != len(kids):
            raise ValueError("public key kids must be unique")
        return self


# ---------------------------------------------------------------------- trusted header


class TrustedHeaderConfig(_Model):
    """Identity from a header set by an authenticating proxy or mesh sidecar."""

    #: The header carrying the authenticated user.
    header: str = "X-Forwarded-User"
    #: Peer addresses allowed to set it (CIDRs, e.g. ``127.0.0.1/32``, ``10.0.0.0/8``).
    trusted_cidrs: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = Field(default_factory=list)
    #: Or/and: a shared secret the proxy adds in this header.
    secret_header: str | None = None
    secret_env: str | None = None
    secret_file: str | None = None
    #: Require both a trusted peer address and the secret (default: either is enough).
    require_both: bool = False
    #: Optional header with granted scopes (space or comma separated) for ``required_scopes``.
    scopes_header: str | None = None
    #: Part of every principal id this mode makes (e.g. ``"mesh"``), to keep the callers of two
    #: sidecars apart. Ids of different modes never meet whatever it says (see ``auth.base``).
    id_prefix: str = ""

    @field_validator("trusted_cidrs", mode="before")
    @classmethod
    def _cidrs(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [v]
        out = []
        for item in v or []:
            try:
                out.append(ipaddress.ip_network(str(item), strict=False))
            except ValueError:
                raise ValueError(f"{item!r} is not an IP network (e.g. 10.0.0.0/8)") from None
        return out

    @model_validator(mode="after")
    def _consistent(self) -> TrustedHeaderConfig:
        for net in self.trusted_cidrs:
            if net.prefixlen == 0:
                raise ValueError(
                    f"trusted_cidrs: {net} trusts every address, which is no authentication"
                )
        secret = self.secret_env is not None or self.secret_file is not None
        if self.secret_env is not None and self.secret_file is not None:
            raise ValueError("set only one of secret_env and secret_file")
        if (self.secret_header is None) != (not secret):
            raise ValueError(
                "secret_header needs secret_env or secret_file, and the other way round"
            )
        if not self.trusted_cidrs and not secret:
            raise ValueError(
                "set trusted_cidrs, or secret_header with secret_env/secret_file, or both"
            )
        if self.require_both and not (self.trusted_cidrs and secret):
            raise ValueError("require_both needs both trusted_cidrs and a secret")
        names = [check_header_name(self.header, "header")]
        if self.secret_header:
            names.append(check_header_name(self.secret_header, "secret_header"))
        if self.scopes_header:
            names.append(check_header_name(self.scopes_header, "scopes_header"))
        if "authorization" in names:
            raise ValueError("Authorization cannot be used as a trusted header")
        if len(set(names)) != len(names):
            raise ValueError("header, secret_header and scopes_header must be different headers")
        return self


# ---------------------------------------------------------------------- auth section


class AuthConfig(_Model):
    """The ``auth:`` section."""

    #: ``none`` means not configured: the gateway refuses to start (unless run with --anonymous).
    mode: Literal["none", "anonymous", "jwt", "trusted_header"] = "none"
    jwt: JwtConfig | None = None
    trusted_header: TrustedHeaderConfig | None = None
    #: Published in protected resource metadata. Default in jwt mode: ``[jwt.issuer]``.
    authorization_servers: list[str] = Field(default_factory=list)
    #: Published in protected resource metadata and used as the 401 ``scope`` hint.
    scopes_supported: list[str] = Field(default_factory=list)
    #: Optional human-readable name and documentation URL for the metadata document.
    resource_name: str | None = None
    resource_documentation: str | None = None

    # One shared key source (one JWKS cache) for all routes, created on first use.
    _key_source: KeySource | None = PrivateAttr(default=None)

    @field_validator("authorization_servers")
    @classmethod
    def _servers(cls, v: list[str]) -> list[str]:
        return [
            no_credentials(_check_url(url, "authorization_servers entry"))  # (it is published)
            for url in dict.fromkeys(v)
        ]

    @field_validator("resource_documentation")
    @classmethod
    def _documentation(cls, v: str | None) -> str | None:
        return None if v is None else no_credentials(v)  # (it is published)

    @field_validator("scopes_supported")
    @classmethod
    def _scopes(cls, v: list[str]) -> list[str]:
        v = _check_scopes(v, "scopes_supported")
        for scope in v:
            if scope in UNADVERTISED_SCOPES:
                raise ValueError(
                    f"{scope} should not be advertised; remove it from scopes_supported"
                )
        return v

    @model_validator(mode="after")
    def _mode_sections(self) -> AuthConfig:
        if self.mode == "jwt" and self.jwt is None:
            raise ValueError("mode jwt needs a 'jwt' section (issuer and jwks_url or public_keys)")
        if self.mode == "trusted_header" and self.trusted_header is None:
            raise ValueError("mode trusted_header needs a 'trusted_header' section")
        if self.jwt is not None and self.mode != "jwt":
            raise ValueError(
                f"a 'jwt' section is set but mode is {self.mode!r}; set mode: jwt or remove it"
            )
        if self.trusted_header is not None and self.mode != "trusted_header":
            raise ValueError(
                f"a 'trusted_header' section is set but mode is {self.mode!r}; set mode: trusted_header or remove it"
            )
        return self

    def effective_authorization_servers(self) -> list[str]:
        if self.authorization_servers:
            return list(self.authorization_servers)
        if self.jwt is not None:
            return [self.jwt.issuer]
        return []

    def publishes_metadata(self) -> bool:
        """Whether protected resource metadata is served (and advertised in challenges)."""
        return bool(self.effective_authorization_servers())

    def key_source(
        self,
        http_client_factory: HttpClientFactory | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> KeySource:
        """The key source for jwt mode, built once (so all routes share one JWKS cache)."""
        if self._key_source is None:
            if self.jwt is None:
                raise AuthSetupError("auth.jwt is not configured")
            self._key_source = build_key_source(
                self.jwt, http_client_factory=http_client_factory, environ=environ
            )
        return self._key_source

    async def aclose(self) -> None:
        """Release what the authenticators hold (the JWKS HTTP client)."""
        if self._key_source is not None:
            await self._key_source.aclose()


# ---------------------------------------------------------------------- per route


class RouteAuthConfig(_Model):
    """A route's ``auth:``."""

    #: Scopes every token must carry for this route (403 insufficient_scope otherwise).
    required_scopes: list[str] = Field(default_factory=list)
    #: Accepted ``aud`` values for this route (default: ``jwt.audience`` or the route's
    #: canonical public URL, i.e. ``gateway.public_url`` + route path).
    audience: list[str] | None = None

    @field_validator("audience", mode="before")
    @classmethod
    def _audience_list(cls, v: Any) -> Any:
        return _string_list(v)

    @field_validator("required_scopes")
    @classmethod
    def _scopes(cls, v: list[str]) -> list[str]:
        return _check_scopes(v, "required_scopes")

    @field_validator("audience")
    @classmethod
    def _aud(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and (not v or any(not a for a in v)):
            raise ValueError("audience must list at least one non-empty value")
        return v


class UpstreamCredentialConfig(_Model):
    """A route's ``upstream_auth:``: what the gateway presents to the upstream."""

    #: Forward the client's own validated bearer token (jwt mode only). Token passthrough is
    #: forbidden by MCP unless gateway and upstream are one resource with the same audience.
    forward_client_token: bool = False
    #: Static credential header (default ``Authorization`` when a value is configured).
    header: str | None = None
    #: Prefix for the value; default ``Bearer`` for Authorization, none for other headers.
    #: Set ``""`` to send the value as is.
    scheme: str | None = None
    #: Where the credential value is read from, once at start.
    value_env: str | None = None
    value_file: str | None = None
    #: Header carrying the authenticated caller to the upstream, e.g. ``X-MCP-Principal``.
    principal_header: str | None = None
    #: What goes into it: ``display`` (the subject / user name) or ``id`` (the principal id: kind,
    #: issuer and subject as a JSON array, see ``mcp_edge.auth.base.principal_id``).
    principal_value: Literal["display", "id"] = "display"

    @model_validator(mode="after")
    def _consistent(self) -> UpstreamCredentialConfig:
        has_value = self.value_env is not None or self.value_file is not None
        if self.value_env is not None and self.value_file is not None:
            raise ValueError("set only one of value_env and value_file")
        if not has_value and (self.header is not None or self.scheme is not None):
            raise ValueError("header/scheme need value_env or value_file")
        if self.header is not None:
            check_header_name(self.header, "header")
        if self.principal_header is not None:
            check_header_name(self.principal_header, "principal_header")
        if (
            has_value
            and self.forward_client_token
            and self.credential_header().lower() == "authorization"
        ):
            raise ValueError(
                "forward_client_token and a static Authorization credential exclude each other"
            )
        if self.scheme is not None and any(ch.isspace() for ch in self.scheme):
            raise ValueError("scheme must be one word, e.g. Bearer")
        return self

    def credential_header(self) -> str:
        return self.header or "Authorization"

    def has_static_credential(self) -> bool:
        return self.value_env is not None or self.value_file is not None

    def needs_client_token(self) -> bool:
        """The caller's validated bearer token is needed upstream-side (forwarded here; the
        identity sections, mcp_edge.identity.config, exchange it too)."""
        return self.forward_client_token

    def client_token_use(self) -> str:
        """What needs the caller's token, for messages."""
        return "upstream_auth.forward_client_token"


# ---------------------------------------------------------------------- keys


def build_key_source(
    jwt_cfg: JwtConfig,
    *,
    http_client_factory: HttpClientFactory | None = None,
    environ: Mapping[str, str] | None = None,
) -> KeySource:
    """The key source of a jwt section: reads PEM files and secrets now (once)."""
    if jwt_cfg.jwks_url is not None:
        return JwksKeySource(
            jwt_cfg.jwks_url,
            http_client_factory=http_client_factory,
            min_refresh_interval=jwt_cfg.jwks_min_refresh_seconds,
            max_age=jwt_cfg.jwks_cache_seconds,
            timeout=jwt_cfg.jwks_timeout_seconds,
            max_bytes=jwt_cfg.jwks_max_bytes,
        )
    if jwt_cfg.public_keys:
        keys = []
        for index, item in enumerate(jwt_cfg.public_keys):
            where = f"auth.jwt.public_keys[{index}]"
            if item.file is not None:
                try:
                    pem = Path(item.file).read_bytes()
                except OSError as exc:
                    raise AuthSetupError(
                        f"{where}: cannot read {item.file}: {exc.strerror}"
                    ) from None
                where += f" ({item.file})"
            else:
                pem = (item.pem or "").encode()
            try:
                keys.append(key_from_pem(pem, kid=item.kid, alg=item.algorithm, where=where))
            except ValueError as exc:
                raise AuthSetupError(str(exc)) from None
        return StaticKeySource(keys)
    try:
        secret = read_secret(
            env=jwt_cfg.shared_secret_env,
            file=jwt_cfg.shared_secret_file,
            what="auth.jwt shared secret",
            environ=environ,
        )
        return StaticKeySource([key_from_secret(secret.encode("utf-8"))])
    except ValueError as exc:
        raise AuthSetupError(str(exc)) from None
