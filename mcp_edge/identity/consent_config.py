"""The ``consent:`` section: the browser's side of per-user consent (``upstream_auth.oauth``).

Shape (``config/identity.yaml`` has a commented example)::

    consent:
      sign_in:                       # who opens a consent link: the gateway's own sign-in
        issuer: https://login.example.com/realms/mcp   # the issuer of the callers' tokens
        client:
          client_id: mcp-edge-consent
          secret_env: MCP_EDGE_CONSENT_SECRET
      link_seconds: 300              # a start link works this long, and once
      grant_idle_seconds: 2592000    # a grant not used for 30 days is forgotten

The person who opens a consent link must be the caller whose request asked for it (the URL-mode
elicitation's security requirement): the link's page first signs the browser in at the gateway's
own identity provider (OpenID Connect, authorization code with PKCE and a nonce) and compares
the issuer and subject it names with the caller's; only then is the browser sent to the
upstream's authorization server. The sign-in client's redirect URI, and that of each
``upstream_auth.oauth`` client, is ``<gateway.public_url>/.mcp-edge/consent/callback``.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from mcp_edge.identity.config import AuthorizationServerConfig
from mcp_edge.sections import Section

#: Where the consent endpoints live, on the public listener.
CONSENT_PREFIX = "/.mcp-edge/consent/"
CALLBACK_PATH = CONSENT_PREFIX + "callback"
START_PATH = CONSENT_PREFIX + "start"
#: The signed-in person's authorizations (see and withdraw; grant one).
GRANTS_PATH = CONSENT_PREFIX
REVOKE_PATH = CONSENT_PREFIX + "revoke"
CONNECT_PATH = CONSENT_PREFIX + "connect"
SIGN_IN_PATH = CONSENT_PREFIX + "sign-in"


class SignInConfig(AuthorizationServerConfig):
    """The gateway's own sign-in of a browser (OpenID Connect): its identity provider is the
    issuer of the callers' tokens (``auth.jwt.issuer``)."""

    #: Asked of the identity provider: ``openid`` at least (an ID token names who signed in).
    scope: list[str] = Field(default_factory=lambda: ["openid"], max_length=16)
    #: An ID token's signing algorithms (the callers' tokens' by default: ``auth.jwt.algorithms``).
    algorithms: list[str] | None = None

    @model_validator(mode="after")
    def _openid(self) -> SignInConfig:
        if self.issuer is None:
            raise ValueError("issuer: required (the issuer of the callers' tokens)")
        if "openid" not in self.scope:
            raise ValueError("scope: must include openid (the ID token names who signed in)")
        return self


class ConsentSection(Section):
    """How a person grants an upstream access to their own account (``upstream_auth.oauth``)."""

    #: Required when a route has ``upstream_auth.oauth``.
    sign_in: SignInConfig | None = None
    #: A start link works this long after its round was asked, and once.
    link_seconds: int = Field(300, ge=30, le=3600)
    #: Each leg at an authorization server (sign-in, grant) must come back within this.
    browser_seconds: int = Field(600, ge=60, le=3600)
    #: A browser the gateway signed in stays so this long (its next consents skip the sign-in;
    #: the authorizations page). 0: never kept.
    session_seconds: int = Field(900, ge=0, le=24 * 3600)
    #: A retry that answered ``accept`` before the person finished waits this long for the
    #: grant (keep it under the clients' request timeout), then asks again.
    wait_seconds: float = Field(20.0, ge=0, le=300)
    #: Retries waiting at once in one process; more are asked again at once.
    max_waiting: int = Field(256, ge=0, le=100_000)
    #: A grant not used for this long is forgotten (its tokens deleted): the next call asks again.
    grant_idle_seconds: int = Field(30 * 24 * 3600, ge=60, le=366 * 24 * 3600)
    #: An access token is refreshed (with its refresh token) this long before it expires.
    refresh_before_seconds: int = Field(60, ge=0, le=3600)
    #: A grant's last use is written back at most this often (each write extends its life).
    touch_seconds: int = Field(3600, ge=1, le=24 * 3600)
    #: A grant read from the store is kept in each process's memory this long (calls do not
    #: each read the store). A grant withdrawn through one replica stops being used by the
    #: others at most this much later (at once by that one). 0: read the store every call.
    local_seconds: float = Field(5.0, ge=0, le=60)

    @model_validator(mode="after")
    def _bounds(self) -> ConsentSection:
        if self.touch_seconds >= self.grant_idle_seconds:
            raise ValueError("touch_seconds must be shorter than grant_idle_seconds")
        return self
