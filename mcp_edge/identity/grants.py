"""Users' grants (their own tokens at an upstream's authorization server), kept in the secret
vault, and what a consent's browser side ended with.

A grant lives in the vault (mcp_edge.identity.vault: sealed, under keyed-hash names, in the
store's Redis when the store is Redis) as kind ``grant``, for one principal and one member:
the access token, the refresh token if the server gave one, when the access token expires, the
scope granted, when it was granted and last used. Its entry expires ``grant_idle_seconds``
after its last use (a use writes it back at most every ``touch_seconds``), or when its access
token does and there is no refresh token to renew it. Listing a principal's grants gives what
and when, never a token.

The outcome of a consent's browser side (granted, denied, signed in as someone else, failed) is
kept as kind ``consent`` under the consent's random id for a few minutes, so a retry waiting
for the person learns at once that they will not finish.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from mcp_edge.identity.vault import SecretVault, Slot

GRANT, OUTCOME = "grant", "consent"
#: What a consent's browser side can end with.
GRANTED, DENIED, OTHER_USER, FAILED = "granted", "denied", "other_user", "failed"
OUTCOMES = (GRANTED, DENIED, OTHER_USER, FAILED)
#: The longest an access token is taken to live, whatever its server says (ten years).
MAX_EXPIRES_IN = 10 * 365 * 86400.0


@dataclass(frozen=True, slots=True)
class Grant:
    """One user's grant at one member's upstream."""

    member: str
    access_token: str
    refresh_token: str | None
    #: When the access token expires (unix seconds), if the server said.
    expires_at: float | None
    scope: str
    granted_at: float
    last_used: float

    def __repr__(self) -> str:  # never a token
        return (
            f"Grant(member={self.member!r}, scope={self.scope!r}, expires_at={self.expires_at}, "
            f"refreshable={self.refresh_token is not None})"
        )

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "v": 1,
            "m": self.member,
            "at": self.access_token,
            "sc": self.scope,
            "ga": self.granted_at,
            "lu": self.last_used,
        }
        if self.refresh_token is not None:
            doc["rt"] = self.refresh_token
        if self.expires_at is not None:
            doc["exp"] = self.expires_at
        return orjson.dumps(doc)

    @classmethod
    def decode(cls, raw: bytes) -> Grant | None:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict) or doc.get("v") != 1:
            return None
        member, token, refresh = doc.get("m"), doc.get("at"), doc.get("rt")
        expires, scope, granted, used = doc.get("exp"), doc.get("sc"), doc.get("ga"), doc.get("lu")
        if not (isinstance(member, str) and isinstance(token, str) and isinstance(scope, str)):
            return None
        if refresh is not None and not isinstance(refresh, str):
            return None
        if expires is not None and not isinstance(expires, int | float):
            return None
        if not isinstance(granted, int | float) or not isinstance(used, int | float):
            return None
        return cls(member, token, refresh, expires, scope, float(granted), float(used))

    def usable(self, now: float, margin: float) -> bool:
        """The access token can be sent now (it does not expire within ``margin`` seconds)."""
        return self.expires_at is None or self.expires_at - margin > now

    def describe(self) -> dict[str, Any]:
        """What a listing shows: what and when, never a token."""
        return {
            "member": self.member,
            "scope": self.scope,
            "granted_at": int(self.granted_at),
            "last_used": int(self.last_used),
            "access_expires_at": None if self.expires_at is None else int(self.expires_at),
            "refreshable": self.refresh_token is not None,
        }


def grant_from_token_answer(
    member: str, doc: dict[str, Any], *, now: float, asked_scope: str, previous: Grant | None = None
) -> Grant | None:
    """A grant from a token endpoint's answer (RFC 6749 §5.1), or None when it holds no usable
    bearer token: a printable token of bounded length, ``Bearer``, and an ``expires_in`` that,
    when given, is a positive number, or its digits as a string (one that is not would have the
    token used as if it never expired; a huge one is taken as ten years). A refresh answer without a new refresh token
    keeps the old one (§6)."""
    token = doc.get("access_token")
    kind = doc.get("token_type")
    if not isinstance(token, str) or not token or len(token) > 16 * 1024:
        return None
    if not all(0x21 <= ord(ch) < 0x7F for ch in token):  # it goes in a header
        return None
    if not isinstance(kind, str) or kind.lower() != "bearer":
        return None
    refresh = doc.get("refresh_token")
    if not isinstance(refresh, str) or not refresh or len(refresh) > 16 * 1024:
        refresh = previous.refresh_token if previous is not None else None
    expires_in = doc.get("expires_in")
    expires_at = None
    if isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit():
        expires_in = int(expires_in[:12])  # some servers send the number as a string
    if expires_in is not None:
        if not isinstance(expires_in, int | float) or isinstance(expires_in, bool):
            return None
        if not expires_in > 0:  # negative, zero, NaN
            return None
        expires_at = now + min(float(expires_in), MAX_EXPIRES_IN)
    scope = doc.get("scope")
    if not isinstance(scope, str):
        scope = previous.scope if previous is not None else asked_scope
    granted_at = previous.granted_at if previous is not None else now
    return Grant(member, token, refresh, expires_at, scope[:1024], granted_at, now)


class GrantBook:
    """The grants and consent outcomes in the vault (raises VaultUnavailable when the store
    cannot answer: the caller fails closed).

    A grant read from the store is kept in this process's memory for ``local_seconds`` (at most
    ``max_local`` of them), so a caller's calls do not each read the store: a grant withdrawn
    or refused through this process is forgotten here at once, one withdrawn through another
    replica at most ``local_seconds`` later. Only grants are kept, never their absence (a
    grant just given is found at once)."""

    def __init__(
        self,
        vault: SecretVault,
        *,
        idle_seconds: float,
        touch_seconds: float,
        outcome_seconds: float,
        clock: Callable[[], float] = time.time,
        local_seconds: float = 0.0,
        max_local: int = 10_000,
    ) -> None:
        self.vault = vault
        self.idle_seconds = idle_seconds
        self.touch_seconds = touch_seconds
        self.outcome_seconds = outcome_seconds
        self.clock = clock
        self.local_seconds = local_seconds
        self.max_local = max_local
        self._local: OrderedDict[tuple[str, str], tuple[float, Grant]] = OrderedDict()

    def _remember(self, principal_id: str, grant: Grant) -> None:
        if self.local_seconds <= 0:
            return
        key = (principal_id, grant.member)
        self._local[key] = (self.clock(), grant)
        self._local.move_to_end(key)
        while len(self._local) > self.max_local:
            self._local.popitem(last=False)

    def _forget(self, principal_id: str, member: str | None = None) -> None:
        if member is not None:
            self._local.pop((principal_id, member), None)
            return
        for key in [k for k in self._local if k[0] == principal_id]:
            del self._local[key]

    def _ttl(self, grant: Grant, now: float) -> float:
        ttl = self.idle_seconds
        if grant.refresh_token is None and grant.expires_at is not None:
            ttl = min(ttl, grant.expires_at - now)  # nothing can renew it
        return ttl

    async def get(self, principal_id: str, member: str, *, fresh: bool = False) -> Grant | None:
        """The principal's grant for the member (``fresh``: from the store, not this process's
        memory)."""
        if not fresh and self.local_seconds > 0:
            kept = self._local.get((principal_id, member))
            if kept is not None and self.clock() - kept[0] < self.local_seconds:
                return kept[1]
        raw = await self.vault.get(Slot(GRANT, principal_id, member))
        grant = Grant.decode(raw) if raw is not None else None
        if grant is None or grant.member != member:
            self._forget(principal_id, member)
            return None
        self._remember(principal_id, grant)
        return grant

    async def put(self, principal_id: str, grant: Grant, *, replacing: bool = False) -> bool:
        """Store the grant (True). ``replacing``: a renewal or a use of a grant read before,
        written only while it is still stored (False: withdrawn meanwhile, nothing written; a
        withdrawal is never undone by a write of what was read before it)."""
        now = self.clock()
        stored = await self.vault.put(
            Slot(GRANT, principal_id, grant.member),
            grant.encode(),
            self._ttl(grant, now),
            only_if_present=replacing,
        )
        if stored:
            self._remember(principal_id, grant)
        else:
            self._forget(principal_id, grant.member)
        return stored

    async def used(self, principal_id: str, grant: Grant) -> Grant | None:
        """Record a use (written back at most every ``touch_seconds``: each write extends the
        grant's life to ``idle_seconds`` from now). None when it was withdrawn meanwhile."""
        now = self.clock()
        if now - grant.last_used < self.touch_seconds:
            return grant
        touched = replace(grant, last_used=now)
        return touched if await self.put(principal_id, touched, replacing=True) else None

    async def drop(self, principal_id: str, member: str) -> bool:
        self._forget(principal_id, member)
        return await self.vault.delete(Slot(GRANT, principal_id, member))

    async def listing(self, principal_id: str) -> list[tuple[str, Grant, float]]:
        """``(ref, grant, entry expires at)`` for each of the principal's grants."""
        out = []
        for item in await self.vault.list(GRANT, principal_id):
            grant = Grant.decode(item.value)
            if grant is not None:
                out.append((item.ref, grant, item.expires_at))
        return sorted(out, key=lambda row: row[1].member)

    async def drop_all(self, principal_id: str) -> int:
        self._forget(principal_id)
        return await self.vault.delete_all(GRANT, principal_id)

    # ------------------------------------------------------------------ outcomes

    async def record_outcome(self, consent_id: str, member: str, outcome: str) -> None:
        assert outcome in OUTCOMES, outcome
        await self.vault.put(
            Slot(OUTCOME, consent_id, member), outcome.encode(), self.outcome_seconds
        )

    async def outcome(self, consent_id: str, member: str) -> str | None:
        raw = await self.vault.get(Slot(OUTCOME, consent_id, member))
        if raw is None:
            return None
        text = raw.decode("ascii", "replace")
        return text if text in OUTCOMES else None
