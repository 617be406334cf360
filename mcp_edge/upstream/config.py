"""What an upstream is, in configuration: one model shared by a single-upstream route and each
member of a federated route (``routes[].members[]``), and a member's own keys (its name, prefix,
deadline and item rules).

A single-upstream route keeps its keys where they always were (``upstream``, ``endpoints``,
``era``, ``bridge``, ``upstream_auth``...): :class:`UpstreamSettings` is the part of
``RouteConfig`` those keys belong to. A route with ``members:`` gives them per member instead.
"""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mcp_edge.core.federation.names import ItemRules, MemberNames
from mcp_edge.core.urls import redact
from mcp_edge.identity.config import UpstreamAuthConfig
from mcp_edge.sections import Section, check_http_url
from mcp_edge.upstream.legacy.config import BridgeSection
from mcp_edge.upstream.stdio.config import StdioUpstreamConfig

#: Validation context of a configuration for an in-process app (``mcp_edge.Edge``): its routes
#: name no upstream (the app is it); what only ``serve`` has is refused by mcp_edge.server.embed.
IN_PROCESS = "in_process"

#: The keys of :class:`UpstreamSettings`: on a federated route they belong to its members.
UPSTREAM_KEYS = (
    "upstream",
    "endpoints",
    "dns",
    "dns_refresh_seconds",
    "affinity",
    "era",
    "bridge",
    "seal_sessions",
    "upstream_auth",
)


class UpstreamSettings(Section):
    """One upstream server: where it is and how the gateway talks to it."""

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
    #: The upstream's protocol era: ``modern`` (2026-07-28), ``legacy`` (2025-era: 2026-07-28
    #: clients are served through the bridge) or ``auto`` (detected with ``server/discover``).
    era: Literal["auto", "modern", "legacy"] = "auto"
    bridge: BridgeSection = Field(default_factory=BridgeSection)
    #: Legacy-era clients' ``Mcp-Session-Id``: replaced by a sealed token (endpoint + upstream id,
    #: bound to the caller), so a session stays on its upstream process behind any replica.
    seal_sessions: bool = True
    #: What the gateway presents to the upstream (mcp_edge.auth.config, mcp_edge.identity.config).
    upstream_auth: UpstreamAuthConfig = Field(default_factory=UpstreamAuthConfig)

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str | StdioUpstreamConfig | None) -> str | StdioUpstreamConfig | None:
        return check_http_url(v) if isinstance(v, str) else v

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one URL")
        if len(set(v)) != len(v):
            raise ValueError("must not list a URL twice")
        return [check_http_url(url) for url in v]

    def check_target(self) -> None:
        """The upstream is given once and its settings fit it (ValueError naming the key)."""
        if (self.upstream is None) == (self.endpoints is None):
            raise ValueError("give either 'upstream' (one URL) or 'endpoints' (a list of URLs)")
        if self.stdio is not None and self.era == "modern":
            raise ValueError(
                "era: a stdio upstream speaks the 2025-era protocol (use legacy or auto)"
            )
        if self.stdio is not None and not self.seal_sessions:
            raise ValueError(
                "seal_sessions: a stdio route needs sealed session ids (a 2025-era client's session lives in one "
                "replica, and only a sealed id can say which; an unsealed one would let clients choose the address "
                "the gateway relays to)"
            )
        identity = self.upstream_auth.identity
        if identity is not None:
            section = "token_exchange" if self.upstream_auth.token_exchange else "oauth"
            if self.stdio is not None:
                raise ValueError(
                    f"upstream_auth.{section}: a stdio upstream has no HTTP credential to send"
                )
            if self.era == "auto":
                raise ValueError(
                    f"upstream_auth.{section}: set era: modern or legacy (the era probe carries "
                    "no caller's token, so it cannot detect the era of a server that needs one)"
                )
        if self.dns:
            if not isinstance(self.upstream, str):
                raise ValueError(
                    "dns: needs 'upstream' (one URL whose host name is resolved), not 'endpoints'"
                )
            if urlsplit(self.upstream).scheme != "http":
                raise ValueError(
                    "dns: only http:// upstreams (TLS to individual addresses is not supported)"
                )

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
        return " ".join(redact(url) for url in self.upstream_urls()) or "the app wrapped in-process"


class ItemRulesConfig(Section):
    """Which of a member's tools (or prompts, or resources) the route shows, and as what."""

    #: Shell-style globs on the member's own names (URIs for resources); empty: everything.
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    #: The member's own name -> the name the route gives it (exact names; not for resources).
    rename: dict[str, str] = Field(default_factory=dict)

    def rules(self) -> ItemRules:
        return ItemRules(tuple(self.include), tuple(self.exclude), dict(self.rename))


class MemberConfig(UpstreamSettings):
    """One member of a federated route: an upstream with a name in the route's namespace."""

    #: ``[a-z][a-z0-9-]{0,31}``, unique in the route (metrics and /readyz use it).
    name: str
    #: Put before the member's tool and prompt names (with the route's separator) and resource
    #: URIs (with ``+``). Default: the member's name; ``""``: names pass unchanged (one member).
    prefix: str | None = None
    #: This member's deadline in a fan-out (lists, ``server/discover``, listen acknowledgements).
    list_timeout_ms: int = Field(2000, ge=10, le=600_000)
    tools: ItemRulesConfig = Field(default_factory=ItemRulesConfig)
    prompts: ItemRulesConfig = Field(default_factory=ItemRulesConfig)
    resources: ItemRulesConfig = Field(default_factory=ItemRulesConfig)

    @model_validator(mode="after")
    def _target(self, info: ValidationInfo) -> MemberConfig:
        self.check_target()
        return self

    def names(self) -> MemberNames:
        return MemberNames(
            name=self.name,
            prefix=self.name if self.prefix is None else self.prefix,
            tools=self.tools.rules(),
            prompts=self.prompts.rules(),
            resources=self.resources.rules(),
        )
