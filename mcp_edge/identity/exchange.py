"""RFC 8693 token exchange as a credential source: the caller's validated bearer token (the
subject token) exchanged at the authorization server for a token of the upstream's audience,
which the upstream gets as ``Authorization: Bearer``; the caller's own token never goes.

Kept, per caller and upstream:

1. in this process's memory (at most ``cache_entries`` per member, least recently used go),
   keyed by the principal id and the caller's token;
2. with ``store.type: redis``, in the secret vault too (mcp_edge.identity.vault: sealed, under
   keyed-hash names), so every replica uses one exchange;

each until ``refresh_before_seconds`` before it expires, at most ``max_ttl_seconds``, never past
the caller's own token's ``exp`` (then the next call exchanges again). Keyed by the caller's
token as well as the principal: a caller who comes back with another token (other scopes) gets
an exchange of that token, never one made from the earlier. One exchange per key is in flight
at a time in a process (mcp_edge.identity.flight); the others wait for it.

A shared store that cannot answer is passed over (counted, logged once a minute): the exchange
is made again, the token is correct either way.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable

from mcp_edge.edge.asgi import Scope
from mcp_edge.edge.context import RequestContext
from mcp_edge.identity.asclient import ASRefused, ASUnavailable, AuthorizationServer
from mcp_edge.identity.config import TokenExchangeConfig
from mcp_edge.identity.flight import SingleFlight, TooManyFlights
from mcp_edge.identity.layer import CredentialError
from mcp_edge.identity.metrics import IdentityMetrics
from mcp_edge.identity.rules import (
    Exchanged,
    UnusableAnswer,
    exchange_failed,
    exchange_form,
    exchange_unavailable,
    failure_label,
    keep_until,
    no_subject_token,
    parse_exchange_answer,
    subject_expiry,
    target_digest,
    token_digest,
)
from mcp_edge.identity.vault import SecretVault, Slot, VaultUnavailable
from mcp_edge.observability.logs import event
from mcp_edge.observability.observer import Count

KIND = "exchange"


class _Memory:
    """Exchanged tokens of one member in this process: bounded, least recently used first out."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple[str, str], now: float) -> str | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple[str, str], token: str, until: float) -> None:
        self._entries.pop(key, None)
        while len(self._entries) >= self.max_entries:
            self._entries.popitem(last=False)
        self._entries[key] = (token, until)

    def clear(self) -> None:
        self._entries.clear()


class TokenExchange:
    """The credential source of one member with ``upstream_auth.token_exchange``."""

    def __init__(
        self,
        *,
        member: str,
        key: str,
        config: TokenExchangeConfig,
        server: AuthorizationServer,
        metrics: IdentityMetrics,
        vault: SecretVault | None = None,
        clock: Callable[[], float] = time.time,
        max_flights: int = 1024,
    ) -> None:
        #: The member's name (what errors say) and key (metrics, cache names).
        self.member = member
        self.key = key
        self.config = config
        self.server = server
        self.metrics = metrics
        self.vault = vault if vault is not None and vault.shared else None
        self.clock = clock
        self.memory = _Memory(config.cache_entries)
        self.flights: SingleFlight[tuple[str, str], str] = SingleFlight(max_keys=max_flights)
        self._actor: tuple[str, float] | None = None
        self._actor_flight: SingleFlight[str, str] = SingleFlight(max_keys=1)
        self._target: str | None = None
        self._hit_memory = Count(metrics.cache.labels(key, "memory"))
        self._last_store_warning = -math.inf

    def __repr__(self) -> str:
        return f"TokenExchange(member={self.key!r})"

    # ------------------------------------------------------------------ the source

    async def credential(self, scope: Scope, ctx: RequestContext) -> str | None:
        principal, subject = ctx.principal, ctx.client_token
        if principal is None:
            return None  # the gateway's own request (a health probe): it goes without
        if not subject:
            self._failed("no_subject_token")
            raise CredentialError(no_subject_token(self.member))
        # In this process's memory, keyed by the token itself (the request holds it already);
        # only a digest of it ever names anything in the shared store.
        cache_key = (principal.id, subject)
        token = self.memory.get(cache_key, self.clock())
        if token is not None:
            self._hit_memory.inc()
            return token
        subject_exp = subject_expiry(principal.claims)
        try:
            return await self.flights.run(
                cache_key, lambda: self._fetch(cache_key, subject, subject_exp)
            )
        except TooManyFlights:
            self._failed("busy")
            event(
                logging.WARNING,
                "token exchange: too many exchanges in flight",
                route=self.key,
                request_uid=ctx.request_uid,
            )
            raise CredentialError(exchange_unavailable(self.member)) from None

    async def _fetch(
        self, cache_key: tuple[str, str], subject: str, subject_exp: float | None
    ) -> str:
        slot = None
        if self.vault is not None:
            target = f"{self._target_digest()}\0{token_digest(subject)}"
            slot = Slot(KIND, cache_key[0], self.key, target)
            shared = await self._shared_get(slot)
            if shared is not None:
                until = keep_until(
                    shared,
                    now=self.clock(),
                    subject_expires_at=subject_exp,
                    refresh_before=self.config.refresh_before_seconds,
                    max_ttl=self.config.max_ttl_seconds,
                )
                if until > self.clock():
                    self.metrics.cache.labels(self.key, "shared").inc()
                    self.memory.put(cache_key, shared.token, until)
                    return shared.token
        self.metrics.cache.labels(self.key, "miss").inc()
        exchanged = await self.exchange(subject)
        now = self.clock()
        until = keep_until(
            exchanged,
            now=now,
            subject_expires_at=subject_exp,
            refresh_before=self.config.refresh_before_seconds,
            max_ttl=self.config.max_ttl_seconds,
        )
        if until > now:
            self.memory.put(cache_key, exchanged.token, until)
            if slot is not None:
                await self._shared_put(slot, exchanged, until - now)
        return exchanged.token

    def _target_digest(self) -> str:
        if self._target is None:
            where = self.config.token_endpoint or self.config.issuer or ""
            self._target = target_digest(self.config, where)
        return self._target

    # ------------------------------------------------------------------ the exchange

    async def exchange(self, subject: str) -> Exchanged:
        """One exchange at the server now (no cache): the token, or CredentialError."""
        started = time.perf_counter()
        try:
            actor = await self._actor_token() if self.config.actor == "client_credentials" else None
            doc = await self.server.token_request(exchange_form(self.config, subject, actor))
            exchanged = parse_exchange_answer(
                doc, max_token_chars=self.config.max_token_chars, now=self.clock()
            )
        except ASRefused as refused:
            self._observe(started, "failed", failure_label(refused.error))
            event(
                logging.WARNING,
                "token exchange refused by the authorization server",
                route=self.key,
                error=refused.error,
                description=refused.description,
                status=refused.status,
            )
            raise CredentialError(
                exchange_failed(self.member, error=failure_label(refused.error))
            ) from None
        except UnusableAnswer as unusable:
            self._observe(started, "failed", "unusable_answer")
            event(
                logging.WARNING,
                "token exchange answer unusable",
                route=self.key,
                detail=unusable.detail,
            )
            raise CredentialError(exchange_failed(self.member)) from None
        except ASUnavailable as down:
            self._observe(started, "unavailable", down.kind)
            event(
                logging.WARNING,
                "token exchange: no usable answer from the authorization server",
                route=self.key,
                kind=down.kind,
                detail=down.detail,
            )
            raise CredentialError(exchange_unavailable(self.member)) from None
        self._observe(started, "ok", None)
        return exchanged

    async def _actor_token(self) -> str:
        """The gateway's own token at the server (client credentials), to name it as the actor."""
        now = self.clock()
        if self._actor is not None and self._actor[1] > now:
            return self._actor[0]
        return await self._actor_flight.run("actor", self._fetch_actor)

    async def _fetch_actor(self) -> str:
        form = [("grant_type", "client_credentials")]
        if self.config.actor_scope:
            form.append(("scope", " ".join(self.config.actor_scope)))
        doc = await self.server.token_request(form)
        now = self.clock()
        actor = parse_exchange_answer(doc, max_token_chars=self.config.max_token_chars, now=now)
        until = keep_until(
            actor,
            now=now,
            subject_expires_at=None,
            refresh_before=self.config.refresh_before_seconds,
            max_ttl=self.config.max_ttl_seconds,
        )
        self._actor = (actor.token, until) if until > now else None
        return actor.token

    def _observe(self, started: float, outcome: str, reason: str | None) -> None:
        self.metrics.seconds.labels(self.key).observe(time.perf_counter() - started)
        self.metrics.exchanges.labels(self.key, outcome).inc()
        if reason is not None:
            self.metrics.failures.labels(self.key, reason).inc()

    def _failed(self, reason: str) -> None:
        self.metrics.failures.labels(self.key, reason).inc()

    # ------------------------------------------------------------------ the shared store

    async def _shared_get(self, slot: Slot) -> Exchanged | None:
        assert self.vault is not None
        try:
            raw = await self.vault.get(slot)
        except VaultUnavailable as exc:
            self._store_error("get", exc)
            return None
        return Exchanged.from_json(raw) if raw is not None else None

    async def _shared_put(self, slot: Slot, exchanged: Exchanged, ttl: float) -> None:
        assert self.vault is not None
        try:
            await self.vault.put(slot, exchanged.to_json(), ttl)
        except VaultUnavailable as exc:
            self._store_error("put", exc)

    def _store_error(self, op: str, exc: Exception) -> None:
        self.metrics.vault_errors.labels(op).inc()
        now = time.monotonic()
        if now - self._last_store_warning >= 60.0:
            self._last_store_warning = now
            event(
                logging.WARNING,
                "token exchange: shared store unavailable, exchanging without it",
                route=self.key,
                op=op,
                error=str(exc),
            )

    async def aclose(self) -> None:
        await self.flights.aclose()
        await self._actor_flight.aclose()
        self.memory.clear()
        await self.server.aclose()
