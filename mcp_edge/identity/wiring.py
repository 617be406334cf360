"""Upstream identity as the route stacks (mcp_edge.server.stack) build it: one
:class:`IdentityWiring` per app, built when the first member configures identity, which wraps
each such member's app in the identity layer with its credential source and holds what they
share (the secret vault, the metrics) until the app closes.

API (stable)::

    wiring = IdentityWiring(config, ring, registry)
    app = wiring.wrap(member_key, member_name, upstream_auth, app)   # the layer, or app as is
    wiring.sources        # member key -> its credential source (check-config, tests)
    wiring.vault_once()         # the shared SecretVault (consent grants use the same one)
    await wiring.aclose()
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry

from mcp_edge.core.seal import KeyRing
from mcp_edge.edge.asgi import ASGIApp
from mcp_edge.identity.config import UpstreamAuthConfig
from mcp_edge.identity.layer import UpstreamIdentityLayer
from mcp_edge.identity.metrics import IdentityMetrics
from mcp_edge.identity.vault import SecretVault, build_vault


class IdentityWiring:
    def __init__(
        self,
        config: Any,
        ring: KeyRing,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.ring = ring
        self.clock = clock
        self.metrics = IdentityMetrics(registry)
        self.vault: SecretVault | None = None
        #: Each member's credential source, by member key.
        self.sources: dict[str, Any] = {}
        #: Per-user consent (mcp_edge.identity.consent_wiring), built with the first member
        #: that configures ``upstream_auth.oauth``.
        self.consent: Any = None
        self.registry = registry

    def vault_once(self) -> SecretVault:
        """The gateway's secret vault (Redis when the store is; else this process's memory)."""
        if self.vault is None:
            self.vault = build_vault(self.config.store, self.ring, clock=self.clock)
        return self.vault

    def source(
        self, key: str, name: str, upstream_auth: UpstreamAuthConfig, upstream: str | None = None
    ) -> Any:
        """The member's credential source, built once (its secrets read now: ValueError)."""
        if key in self.sources:
            return self.sources[key]
        if upstream_auth.token_exchange is not None:
            from mcp_edge.identity.asclient import AuthorizationServer
            from mcp_edge.identity.exchange import TokenExchange

            section = upstream_auth.token_exchange
            source: Any = TokenExchange(
                member=name,
                key=key,
                config=section,
                server=AuthorizationServer(section),
                metrics=self.metrics,
                vault=self.vault_once() if self.config.store.type == "redis" else None,
                clock=self.clock,
            )
        else:
            assert upstream_auth.oauth is not None
            source = self.consent_once().member(key, name, upstream_auth.oauth, upstream=upstream)
        self.sources[key] = source
        return source

    def wrap(
        self,
        key: str,
        name: str,
        upstream_auth: UpstreamAuthConfig,
        app: ASGIApp,
        *,
        upstream: str | None = None,
    ) -> ASGIApp:
        """``app`` behind the identity layer of its member, or as is when it has none."""
        if upstream_auth.identity is None:
            return app
        if upstream_auth.oauth is not None:
            from mcp_edge.identity.consent import ConsentLayer

            return ConsentLayer(app, member=self.source(key, name, upstream_auth, upstream))
        return UpstreamIdentityLayer(app, source=self.source(key, name, upstream_auth), member=key)

    def consent_once(self) -> Any:
        if self.consent is None:
            from mcp_edge.identity.consent_wiring import ConsentWiring

            self.consent = ConsentWiring(
                self.config, self.ring, self.registry, self.vault_once(), clock=self.clock
            )
        return self.consent

    async def describe(self, *, probe: bool) -> tuple[list[str], int]:
        """``check-config``'s lines for each member with identity, and how many failed. With
        ``probe`` the server's metadata is read now: whether it advertises the grant the member
        needs and the client authentication it uses (a server may support a grant it does not
        list: said, not failed); metadata that cannot be read or names another issuer fails."""
        from mcp_edge.identity.asclient import ASUnavailable
        from mcp_edge.identity.config import TOKEN_EXCHANGE_GRANT

        lines, failed = [], 0
        for key, source in self.sources.items():
            config = source.config
            who = _who(key)
            if self.consent is not None and key in self.consent.members:
                line, bad = await self.consent.describe(key, who, probe=probe)
                lines.append(line)
                failed += bad
                continue
            target = ", ".join([*config.audience, *config.resource])
            where = config.issuer or config.token_endpoint
            head = (
                f"{who}: token exchange at {where} for {target} "
                f"(client {config.client.client_id}, {config.client.method})"
            )
            if not probe:
                lines.append(head + ("; --probe reads its metadata" if config.issuer else ""))
                continue
            if config.issuer is None:
                lines.append(head + "; no issuer configured, so no metadata to read")
                continue
            try:
                meta = await source.server.discover()
            except ASUnavailable as exc:
                failed += 1
                lines.append(f"{head}: FAILED: {exc.detail}")
                continue
            grant = meta.advertises(TOKEN_EXCHANGE_GRANT)
            said = {
                True: "advertises the token-exchange grant",
                False: "does NOT list the token-exchange grant in grant_types_supported "
                "(exchanges may be refused)",
                None: "does not say which grants it supports (no grant_types_supported)",
            }[grant]
            methods = meta.auth_methods
            if methods is not None and config.client.method not in methods:
                said += (
                    f"; it does not list {config.client.method} among its client authentications"
                )
            lines.append(
                f"{head}: metadata at {meta.source}: {said}, token endpoint {meta.token_endpoint}"
            )
        return lines, failed

    async def aclose(self) -> None:
        consented = set(self.consent.members) if self.consent is not None else set()
        for key, source in self.sources.items():
            if key not in consented:  # the consent wiring closes its own members
                await source.aclose()
        self.sources.clear()
        if self.consent is not None:
            await self.consent.aclose()
        if self.vault is not None:
            await self.vault.aclose()


def _who(key: str) -> str:
    route, _, member = key.partition("/")
    return f"route {route} member {member}" if member else f"route {route}"
