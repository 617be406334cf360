"""Per-user consent as the identity wiring (mcp_edge.identity.wiring) builds it: one
:class:`ConsentWiring` per app, built when the first member configures ``upstream_auth.oauth``,
holding each such member's :class:`~mcp_edge.identity.consent.ConsentMember`, what they share
(the grants in the secret vault, the single-use store, the gateway's sign-in, the metrics) and
the browser endpoints (:meth:`endpoints`).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.seal import KeyRing, StateRejected
from mcp_edge.edge.body import BodyBudget
from mcp_edge.identity.config import OAuthConfig
from mcp_edge.identity.consent import ConsentMember
from mcp_edge.identity.consent_config import CALLBACK_PATH, ConsentSection
from mcp_edge.identity.grants import GrantBook
from mcp_edge.identity.vault import SecretVault, VaultUnavailable
from mcp_edge.store import build_store


class ConsentMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.consent_rounds = Counter(
            "mcp_edge_consent_rounds",
            "Calls of members with upstream_auth.oauth that needed the user's grant, by what "
            "happened: asked (a consent round), again (asked again: not finished, withdrawn, or "
            "refused by the upstream), upstream_refused (401 with WWW-Authenticate), replaced "
            "(the refused token was already replaced in the store: sent once more with the "
            "stored one), declined, "
            "cancelled, denied, failed, needs_url_mode (-32021), not_asked (a list or another "
            "request that cannot ask: consent_required)",
            ["route", "outcome"],
            registry=registry,
        )
        self.consent_browser = Counter(
            "mcp_edge_consent_browser",
            "Steps of the consent pages, by outcome: sent_to_sign_in, sent_to_grant, granted, "
            "revoked_by_user, or the refusal (malformed, expired, used, no_transaction, "
            "state_mismatch, other_user, denied, bad_request, failed, unavailable)",
            ["outcome"],
            registry=registry,
        )
        self.refreshes = Counter(
            "mcp_edge_consent_refreshes",
            "Refreshes of users' access tokens, by outcome: ok, refused (the grant is dropped), "
            "unavailable, unusable, withdrawn (while it was renewed: not stored, revoked)",
            ["route", "outcome"],
            registry=registry,
        )
        self.consent_errors = Counter(
            "mcp_edge_consent_errors",
            "Calls refused because what the grants need could not be reached (store_unavailable)",
            ["route", "reason"],
            registry=registry,
        )


class ConsentWiring:
    def __init__(
        self,
        config: Any,
        ring: KeyRing,
        registry: CollectorRegistry,
        vault: SecretVault,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.settings: ConsentSection = config.consent
        self.ring = ring
        self.clock = clock
        self.metrics = ConsentMetrics(registry)
        self.public_base: str = config.public_base()
        self.grants = GrantBook(
            vault,
            idle_seconds=self.settings.grant_idle_seconds,
            touch_seconds=self.settings.touch_seconds,
            # A retry may wait for the outcome as long as its state lives.
            outcome_seconds=max(config.state.ttl_seconds, self.settings.link_seconds)
            + self.settings.browser_seconds,
            clock=clock,
            local_seconds=self.settings.local_seconds,
        )
        #: Start links and callbacks are spent here (Redis when the store is).
        self.store = build_store(config.store, clock)
        self.leeway: int = config.state.leeway_seconds
        self.members: dict[str, ConsentMember] = {}
        self._sign_in: Any = None

    async def spend(self, single_use_id: str, expires_at: int) -> None:
        """Spend an id once (StateRejected on a second use); a store that cannot tell is an
        RpcError, whatever ``store.fail_open`` says (consent always fails closed)."""
        try:
            await self.store.consume(single_use_id, expires_at)
        except StateRejected:
            raise
        except Exception:  # noqa: BLE001  (StoreUnavailable, or whatever the store raised)
            raise RpcError(
                INTERNAL_ERROR, "The single-use store does not answer", {"reason": "store"}
            ) from None

    def grant_lookup(
        self, route: str, *, federated: bool
    ) -> Callable[[str, str], Awaitable[bool | None]]:
        """For the route's policy (rules reading ``grant``): (principal id, member name) ->
        whether the caller holds a grant for it (False for a member without consent; None when
        the store cannot tell, which fails the rule closed)."""

        async def lookup(principal_id: str, member: str) -> bool | None:
            key = f"{route}/{member}" if federated else route
            if key not in self.members:
                return False
            try:
                return await self.grants.get(principal_id, key) is not None
            except VaultUnavailable:
                return None

        return lookup

    def member(
        self, key: str, name: str, oauth: OAuthConfig, *, upstream: str | None = None
    ) -> ConsentMember:
        """The member's consent side, built once (its client's secret read now: ValueError)."""
        found = self.members.get(key)
        if found is not None:
            return found
        from mcp_edge.identity.asclient import AuthorizationServer

        self.sign_in()  # the sign-in is needed by every consent: its secrets read now too
        member = ConsentMember(
            key=key,
            name=name,
            config=oauth,
            settings=self.settings,
            server=AuthorizationServer(oauth) if oauth.issuer else None,
            upstream=upstream,
            grants=self.grants,
            spend=self.spend,
            ring=self.ring,
            public_base=self.public_base,
            metrics=self.metrics,
            clock=self.clock,
        )
        self.members[key] = member
        return member

    def sign_in(self) -> Any:
        if self._sign_in is None:
            from mcp_edge.identity.asclient import AuthorizationServer
            from mcp_edge.identity.sign_in import SignIn

            section = self.settings.sign_in
            if section is None:
                raise ValueError("upstream_auth.oauth needs the consent.sign_in section")
            auth = self.config.auth
            self._sign_in = SignIn(
                section,
                server=AuthorizationServer(section),
                keys=auth.key_source(),
                algorithms=auth.jwt.algorithms,
                redirect_uri=self.public_base + CALLBACK_PATH,
            )
        return self._sign_in

    def endpoints(self, *, body_budget: BodyBudget | None, body_timeout: float) -> Any:
        from mcp_edge.identity.consent_endpoints import ConsentEndpoints

        return ConsentEndpoints(
            members=self.members,
            sign_in=self.sign_in(),
            settings=self.settings,
            ring=self.ring,
            spend=self.spend,
            grants=self.grants,
            public_base=self.public_base,
            metrics=self.metrics,
            body_budget=body_budget,
            body_timeout=body_timeout,
            leeway=self.leeway,
            clock=self.clock,
        )

    async def describe(self, key: str, who: str, *, probe: bool) -> tuple[str, int]:
        """``check-config``'s line for a member with ``upstream_auth.oauth`` (and 1 when its
        server's metadata, read with ``probe``, cannot serve the consent flow)."""
        from mcp_edge.identity.asclient import ASUnavailable
        from mcp_edge.identity.oauth_client import authorization_endpoint

        member = self.members[key]
        config = member.config
        where = config.issuer or f"the server {member.upstream}'s metadata names"
        head = (
            f"{who}: users' own grants (consent) at {where} "
            f"(client {config.client.client_id}, {config.client.method}"
            + (f", scope {' '.join(config.scope)}" if config.scope else "")
            + f"), redirect URI {self.public_base}{CALLBACK_PATH}"
        )
        if not probe:
            return head + "; --probe reads its metadata", 0
        try:
            server = await member.authorization_server()
            meta = await server.discover()
            endpoint = authorization_endpoint(meta, allow_http=config.allow_http)
        except ASUnavailable as exc:
            return f"{head}: FAILED: {exc.detail}", 1
        grants = meta.advertises("authorization_code")
        said = (
            "does NOT list the authorization_code grant (consent will fail)"
            if grants is False
            else "authorization endpoint " + endpoint
        )
        return f"{head}: metadata at {meta.source}: {said}", 1 if grants is False else 0

    async def admin(self, method: str, principal: str, member: str | None) -> tuple[int, Any]:
        """The admin listener's ``/grants``: list (GET, HEAD) or revoke (DELETE)."""
        from mcp_edge.identity.grant_admin import list_grants, revoke_grants
        from mcp_edge.identity.vault import VaultUnavailable

        try:
            if method == "DELETE":
                count = await revoke_grants(
                    self.grants, principal, member=member, members=self.members
                )
                return 200, {"revoked": count}
            return 200, {"grants": await list_grants(self.grants, principal)}
        except VaultUnavailable:
            return 503, {"error": "the grant store does not answer"}

    async def aclose(self) -> None:
        for member in self.members.values():
            await member.aclose()
        self.members.clear()
        if self._sign_in is not None:
            await self._sign_in.aclose()
            self._sign_in = None
        await self.store.aclose()
