"""What a route or member's ``upstream_auth:`` says about the caller's identity at the upstream:
``token_exchange`` (RFC 8693: the caller's token exchanged for one of the upstream's audience)
and ``oauth`` (the user's own grant at the upstream's authorization server).

:class:`UpstreamAuthConfig` is the ``upstream_auth:`` model of a route and of a member: the
static-credential keys of :class:`mcp_edge.auth.config.UpstreamCredentialConfig` and the two
sections of this package. They exclude each other and ``forward_client_token`` and a static
``Authorization`` credential: one credential goes in the upstream's ``Authorization``.

Shape (``config/identity.yaml`` has a commented example)::

    upstream_auth:
      token_exchange:
        issuer: https://login.example.com/realms/mcp    # metadata discovered (RFC 8414 / OIDC)
        # token_endpoint: https://login.example.com/realms/mcp/token   # or given directly
        client:
          client_id: mcp-edge
          method: client_secret_basic                   # | client_secret_post | private_key_jwt
          secret_env: MCP_EDGE_EXCHANGE_SECRET          # or secret_file; private_key_* for JWT
        audience: [https://tickets.internal/mcp]        # and/or resource (RFC 8707)
        scope: [tickets:read]

Validation only checks shape and consistency; secrets and keys are read once, when the route is
built (mcp_edge.identity.asclient).
"""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from mcp_edge import extras
from mcp_edge.auth.config import UpstreamCredentialConfig
from mcp_edge.core.headers import LOOPBACK_HOSTS
from mcp_edge.core.urls import no_credentials
from mcp_edge.sections import Section

TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
#: Token types the gateway may ask for and send as ``Authorization: Bearer`` (RFC 8693 §3).
REQUESTABLE_TOKEN_TYPES = (ACCESS_TOKEN_TYPE, JWT_TOKEN_TYPE)

#: Signing algorithms for ``private_key_jwt`` client assertions.
ASSERTION_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384")


def _string_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def check_as_url(url: str, what: str, *, allow_http: bool = False) -> str:
    """An authorization server URL: absolute, https (http only for loopback hosts, or when
    ``allow_http``), no fragment, no credentials, printable ASCII only (it goes in a request
    line or a browser's ``Location``: an international host is written in punycode)."""
    if not url or not all(0x21 <= ord(ch) <= 0x7E for ch in url):
        raise ValueError(
            f"{what} must be printable ASCII without spaces (punycode for an international "
            f"host), got {url.encode('unicode_escape').decode()[:120]!r}"
        )
    no_credentials(url)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} must be an absolute https URL, got {url!r}")
    if parts.scheme == "http" and not allow_http and parts.hostname not in LOOPBACK_HOSTS:
        raise ValueError(
            f"{what} must use https (plain http only for loopback hosts, or with allow_http)"
        )
    if parts.fragment or "#" in url:
        raise ValueError(f"{what} must not have a fragment")
    return url


def check_named_url(url: str, what: str, *, named_by: str | None, allow_http: bool = False) -> str:
    """A URL a document names (an endpoint in a server's metadata, the authorization server in
    an upstream's protected-resource metadata): :func:`check_as_url`, and plain http only where
    the document itself came over http (or ``allow_http``): an https server naming an http
    endpoint, on a loopback host say, would have the gateway send its client's credentials and
    the caller's tokens in the clear to whatever listens there."""
    check_as_url(url, what, allow_http=allow_http)
    if (
        not allow_http
        and named_by is not None
        and urlsplit(named_by).scheme == "https"
        and urlsplit(url).scheme != "https"
    ):
        raise ValueError(f"{what} must use https, as the document naming it does")
    return url


def _scope_tokens(scopes: list[str], where: str) -> list[str]:
    for scope in scopes:
        if not scope or any(ch.isspace() or ch in '"\\' or ord(ch) < 0x21 for ch in scope):
            raise ValueError(f"{where}: {scope!r} is not a valid scope token")
    return list(dict.fromkeys(scopes))


class ClientAuthConfig(Section):
    """How the gateway authenticates itself to the authorization server (its OAuth client)."""

    client_id: str
    method: Literal["client_secret_basic", "client_secret_post", "private_key_jwt"] = (
        "client_secret_basic"
    )
    #: ``client_secret_basic`` / ``client_secret_post``: the secret, read once at start.
    secret_env: str | None = None
    secret_file: str | None = None
    #: ``private_key_jwt``: the PEM private key signing the client assertion (RFC 7523).
    private_key_env: str | None = None
    private_key_file: str | None = None
    #: The assertion's ``kid`` header (the key's id in the client's registered JWKS).
    key_id: str | None = None
    algorithm: str = "RS256"

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, v: str) -> str:
        if not v or v != v.strip() or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in v):
            raise ValueError("must be the client's registered id (printable, no surrounding space)")
        return v

    @model_validator(mode="after")
    def _one_credential(self) -> ClientAuthConfig:
        secret = [self.secret_env, self.secret_file]
        key = [self.private_key_env, self.private_key_file]
        if self.method == "private_key_jwt":
            if sum(v is not None for v in key) != 1 or any(v is not None for v in secret):
                raise ValueError(
                    "private_key_jwt: set exactly one of private_key_env or private_key_file "
                    "(and no secret)"
                )
            if self.algorithm not in ASSERTION_ALGORITHMS:
                raise ValueError(f"algorithm must be one of {', '.join(ASSERTION_ALGORITHMS)}")
        else:
            if sum(v is not None for v in secret) != 1 or any(v is not None for v in key):
                raise ValueError(
                    f"{self.method}: set exactly one of secret_env or secret_file (and no private key)"
                )
            if "algorithm" in self.model_fields_set or self.key_id is not None:
                raise ValueError("algorithm and key_id apply to private_key_jwt only")
        return self


class AuthorizationServerConfig(Section):
    """Where the authorization server is, and how the gateway talks to it."""

    #: The server's issuer identifier: its metadata is discovered (RFC 8414
    #: ``/.well-known/oauth-authorization-server``, then OpenID Connect discovery), and its
    #: ``issuer`` must match exactly.
    issuer: str | None = None
    #: Or the token endpoint itself (no discovery; ``check-config --probe`` then cannot say
    #: which grants the server advertises unless ``issuer`` is given too).
    token_endpoint: str | None = None
    client: ClientAuthConfig
    #: Every request to the server (metadata, token) ends within this, answer read whole.
    timeout_seconds: float = Field(5.0, gt=0, le=60)
    #: The most of an answer that is read (a larger one is refused).
    max_response_bytes: int = Field(64 * 1024, ge=1024, le=1024 * 1024)
    #: Metadata is fetched again after this long.
    metadata_cache_seconds: float = Field(3600.0, ge=10, le=7 * 24 * 3600)
    #: Allow ``http://`` for non-loopback hosts (e.g. an in-cluster service).
    allow_http: bool = False

    @model_validator(mode="after")
    def _where(self) -> AuthorizationServerConfig:
        if self.issuer is None and self.token_endpoint is None:
            raise ValueError("give issuer (its metadata is discovered) or token_endpoint")
        extras.require(
            "identity", "upstream_auth (the gateway as an authorization server's client)"
        )
        if self.issuer is not None:
            check_as_url(self.issuer, "issuer", allow_http=self.allow_http)
            if urlsplit(self.issuer).query:
                raise ValueError("issuer must not have a query (RFC 8414)")
        if self.token_endpoint is not None:
            check_as_url(self.token_endpoint, "token_endpoint", allow_http=self.allow_http)
        return self


class TokenExchangeConfig(AuthorizationServerConfig):
    """``upstream_auth.token_exchange``: the caller's validated token exchanged (RFC 8693) for one
    the upstream accepts, sent as ``Authorization: Bearer``; the caller's own never goes."""

    #: The upstream's audience(s) (``audience``) and/or resource URI(s) (``resource``, RFC 8707).
    #: At least one: the gateway never asks for a token without saying where it is for.
    audience: list[str] = Field(default_factory=list, max_length=8)
    resource: list[str] = Field(default_factory=list, max_length=8)
    scope: list[str] = Field(default_factory=list, max_length=64)
    requested_token_type: str = ACCESS_TOKEN_TYPE
    #: What the caller's token is to the server (``subject_token_type``).
    subject_token_type: str = ACCESS_TOKEN_TYPE
    #: ``client_credentials``: an ``actor_token`` naming the gateway goes with each exchange (its
    #: own token from the same server, by the client-credentials grant, cached), for servers that
    #: record delegation (``act`` claim). ``none``: the client authentication names it.
    actor: Literal["none", "client_credentials"] = "none"
    actor_scope: list[str] = Field(default_factory=list, max_length=64)
    #: An exchanged token is used until this long before it expires, then exchanged again.
    refresh_before_seconds: float = Field(30.0, ge=0, le=3600)
    #: Kept at most this long, whatever the server says (and never past the caller's token).
    max_ttl_seconds: float = Field(3600.0, gt=0, le=24 * 3600)
    #: Exchanged tokens held in this process's memory for this upstream (least recently used go).
    cache_entries: int = Field(10_000, ge=1, le=1_000_000)
    #: The most characters of an exchanged token (it goes in a header).
    max_token_chars: int = Field(16 * 1024, ge=256, le=64 * 1024)

    @field_validator("audience", "resource", "scope", "actor_scope", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _string_list(v)

    @field_validator("audience")
    @classmethod
    def _audience(cls, v: list[str]) -> list[str]:
        if any(not a or a != a.strip() for a in v):
            raise ValueError("audience values must be non-empty, without surrounding space")
        return list(dict.fromkeys(v))

    @field_validator("resource")
    @classmethod
    def _resource(cls, v: list[str]) -> list[str]:
        for uri in v:
            parts = urlsplit(uri)
            if not parts.scheme or not (parts.netloc or parts.path) or parts.fragment:
                raise ValueError(
                    f"resource {uri!r} must be an absolute URI without a fragment (RFC 8707)"
                )
        return list(dict.fromkeys(v))

    @field_validator("scope", "actor_scope")
    @classmethod
    def _scopes(cls, v: list[str]) -> list[str]:
        return _scope_tokens(v, "scope")

    @field_validator("requested_token_type")
    @classmethod
    def _requested(cls, v: str) -> str:
        if v not in REQUESTABLE_TOKEN_TYPES:
            raise ValueError(
                f"must be one of {', '.join(REQUESTABLE_TOKEN_TYPES)} (it is sent as a bearer token)"
            )
        return v

    @field_validator("subject_token_type")
    @classmethod
    def _subject(cls, v: str) -> str:
        if v not in REQUESTABLE_TOKEN_TYPES:
            raise ValueError(f"must be one of {', '.join(REQUESTABLE_TOKEN_TYPES)}")
        return v

    @model_validator(mode="after")
    def _target(self) -> TokenExchangeConfig:
        if not self.audience and not self.resource:
            raise ValueError(
                "give audience and/or resource: the upstream the exchanged token is for"
            )
        if self.actor_scope and self.actor != "client_credentials":
            raise ValueError("actor_scope needs actor: client_credentials")
        return self


class OAuthConfig(AuthorizationServerConfig):
    """``upstream_auth.oauth``: the gateway as an OAuth client of the upstream's authorization
    server, holding each user's own grant (authorization code with PKCE, asked as a URL-mode
    elicitation round). Without ``issuer``, the server is the first one the upstream's
    protected-resource metadata names (RFC 9728, as the MCP authorization spec has a client
    find it), and ``resource`` its ``resource`` unless given."""

    scope: list[str] = Field(default_factory=list, max_length=64)
    resource: list[str] = Field(default_factory=list, max_length=8)

    @model_validator(mode="after")
    def _where(self) -> OAuthConfig:  # replaces the server section's: the issuer may be found
        extras.require(
            "identity", "upstream_auth.oauth (the gateway as an authorization server's client)"
        )
        if self.issuer is None and self.token_endpoint is not None:
            raise ValueError(
                "give issuer (the authorization endpoint is in its metadata), or neither to find "
                "the server in the upstream's protected-resource metadata"
            )
        if self.issuer is not None:
            check_as_url(self.issuer, "issuer", allow_http=self.allow_http)
            if urlsplit(self.issuer).query:
                raise ValueError("issuer must not have a query (RFC 8414)")
        if self.token_endpoint is not None:
            check_as_url(self.token_endpoint, "token_endpoint", allow_http=self.allow_http)
        return self

    @field_validator("scope", "resource", mode="before")
    @classmethod
    def _lists(cls, v: Any) -> Any:
        return _string_list(v)

    @field_validator("scope")
    @classmethod
    def _scopes(cls, v: list[str]) -> list[str]:
        return _scope_tokens(v, "scope")


class UpstreamAuthConfig(UpstreamCredentialConfig):
    """A route's or member's ``upstream_auth:``: a static credential, the caller's identity
    header, or the caller's identity exchanged (``token_exchange``) or granted (``oauth``)."""

    token_exchange: TokenExchangeConfig | None = None
    oauth: OAuthConfig | None = None

    @model_validator(mode="after")
    def _one_authorization(self) -> UpstreamAuthConfig:
        chosen = [
            name
            for name, on in (
                ("token_exchange", self.token_exchange is not None),
                ("oauth", self.oauth is not None),
                ("forward_client_token", self.forward_client_token),
                (
                    "a static Authorization credential",
                    self.has_static_credential()
                    and self.credential_header().lower() == "authorization",
                ),
            )
            if on
        ]
        if len(chosen) > 1:
            raise ValueError(
                f"{' and '.join(chosen)} exclude each other: one credential goes in the "
                "upstream's Authorization"
            )
        return self

    @property
    def identity(self) -> TokenExchangeConfig | OAuthConfig | None:
        """The identity section in use, if any."""
        return self.token_exchange or self.oauth

    def needs_client_token(self) -> bool:
        """The caller's validated bearer token is needed (forwarded, or exchanged)."""
        return self.forward_client_token or self.token_exchange is not None

    def client_token_use(self) -> str:
        if self.token_exchange is not None:
            return "upstream_auth.token_exchange"
        return super().client_token_use()
