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

    def source(self, key: str, name: str, upstream_auth: UpstreamAuthConfig) -> Any:
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
            source = self.consent_once().member(key, name, upstream_auth.oauth)
        self.sources[key] = source
        return source

    def wrap(self, key: str, name: str, upstream_auth: UpstreamAuthConfig, app: ASGIApp) -> ASGIApp:
        """``app`` behind the identity layer of its member, or as is when it has none."""
        if upstream_auth.identity is None:
            return app
        if upstream_auth.oauth is not None:
            from mcp_edge.identity.consent import ConsentLayer

            return ConsentLayer(app, member=self.source(key, name, upstream_auth))
        return UpstreamIdentityLayer(app, source=self.source(key, name, upstream_auth), member=key)

    def consent_once(self) -> Any:
        if self.consent is None:
            from mcp_edge.identity.consent_wiring import ConsentWiring

            self.consent = ConsentWiring(
                self.config, self.ring, self.registry, self.vault_once(), clock=self.clock
            )
        return self.consent

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
