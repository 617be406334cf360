"""The sealed cross-member list cursor.

The first page of a federated list asks every member; each member that answers a
``nextCursor`` still has pages. The gateway's own ``nextCursor`` carries those members, in
configuration order, each with its own cursor, sealed (``seal_blob`` purpose ``mcpec1``: AES-GCM
under the route's key ring, so any replica opens it and nobody can read or change it) with:

- ``a``: the route's audience (gateway id and route): a cursor is only good where it was issued;
- ``m``: the list method: a ``tools/list`` cursor does not page prompts;
- ``p``: the principal tag (keyed hash of the caller): another caller's cursor is refused;
- ``iat`` / ``exp``: issued and expires (unix seconds);
- ``c``: ``[[member, its cursor], ...]``, only the members still to page;
- ``s``: 1 when an earlier page was ``cacheScope: "private"`` (every page of a listing keeps it).

A presented cursor is refused (:class:`CursorRejected`) with a reason: ``too_long`` (over
:data:`MAX_CURSOR_CHARS`, before any decoding), ``malformed`` (not such a token, or a payload of
the wrong shape), ``integrity`` (unknown key or tampered), ``expired``, ``route``, ``method``,
``principal`` (issued for another route, list method or caller), ``member`` (names a member the
route no longer has). The client is answered ``-32602`` "Invalid cursor".

Size: a member's own cursor is at most :data:`MAX_MEMBER_CURSOR_BYTES` of UTF-8 without control
characters (a member answering a longer one is missing, reason ``invalid``), a route has at most
``MAX_MEMBERS`` members, so every cursor the gateway seals fits in :data:`MAX_CURSOR_CHARS`.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from mcp_edge.core.federation.names import FORBIDDEN, MAX_MEMBERS
from mcp_edge.core.seal import KeyRing, open_blob, principal_tag, seal_blob

PURPOSE: Final = "mcpec1"
VERSION: Final = 1
MAX_MEMBER_CURSOR_BYTES: Final = 2048
MAX_CURSOR_CHARS: Final = 256 * 1024
DEFAULT_TTL_S: Final = 600
#: Seconds of clock difference between replicas tolerated on ``iat`` and ``exp``.
LEEWAY_S: Final = 5

CursorReason = Literal[
    "too_long", "malformed", "integrity", "expired", "route", "method", "principal", "member"
]


class CursorRejected(Exception):
    def __init__(self, reason: CursorReason) -> None:
        super().__init__(reason)
        self.reason: CursorReason = reason


@dataclass(frozen=True, slots=True)
class PageCursor:
    """An opened cursor: who is still to page, with which cursor, and the listing's scope."""

    pending: tuple[tuple[str, str], ...]
    private: bool


def member_cursor_ok(cursor: object) -> bool:
    """A member's own ``nextCursor`` the gateway will carry (a non-empty string, at most
    :data:`MAX_MEMBER_CURSOR_BYTES` of UTF-8, no control characters)."""
    if type(cursor) is not str or not 0 < len(cursor) <= MAX_MEMBER_CURSOR_BYTES:
        return False
    try:
        size = len(cursor.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: not text JSON can carry
        return False
    return size <= MAX_MEMBER_CURSOR_BYTES and FORBIDDEN.search(cursor) is None


def seal_cursor(
    ring: KeyRing,
    *,
    audience: str,
    method: str,
    principal_id: str,
    pending: Sequence[tuple[str, str]],
    private: bool,
    now: float,
    ttl_s: int = DEFAULT_TTL_S,
) -> str:
    """The gateway's ``nextCursor`` for the members still to page.

    ``pending`` comes from a merge (:attr:`MergedList.pending`), whose cursors already passed
    :func:`member_cursor_ok`; anything else (no member, too many, a cursor that does not pass) is
    a ``ValueError``, as is an audience so long the token would not fit :data:`MAX_CURSOR_CHARS`.
    """
    if not 0 < len(pending) <= MAX_MEMBERS:
        raise ValueError(f"a cursor carries 1 to {MAX_MEMBERS} members")
    if not all(member_cursor_ok(c) for _, c in pending):
        raise ValueError("a member cursor the gateway does not carry")
    iat = int(now)
    doc: dict[str, Any] = {
        "v": VERSION,
        "a": audience,
        "m": method,
        "p": principal_tag(ring.current, principal_id),
        "iat": iat,
        "exp": iat + ttl_s,
        "c": [[member, cursor] for member, cursor in pending],
    }
    if private:
        doc["s"] = 1
    token = seal_blob(ring, PURPOSE, orjson.dumps(doc))
    if len(token) > MAX_CURSOR_CHARS:
        raise ValueError("the cursor would be too long (is the audience this long?)")
    return token


def open_cursor(
    ring: KeyRing,
    token: object,
    *,
    audience: str,
    method: str,
    principal_id: str,
    members: Collection[str],
    now: float,
) -> PageCursor:
    """The cursor behind ``token`` if this route issued it for this method and caller and it has
    not expired; else :class:`CursorRejected`. ``members``: the route's member names."""
    if type(token) is not str:
        raise CursorRejected("malformed")
    if len(token) > MAX_CURSOR_CHARS:
        raise CursorRejected("too_long")
    fields = token.split(".")
    if len(fields) != 3 or fields[0] != PURPOSE or not fields[1] or not fields[2]:
        raise CursorRejected("malformed")
    key = ring.by_id.get(fields[1])
    raw = open_blob(ring, PURPOSE, token, max_chars=MAX_CURSOR_CHARS)
    if raw is None or key is None:
        raise CursorRejected("integrity")
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise CursorRejected("malformed") from None
    if type(doc) is not dict or doc.get("v") != VERSION:
        raise CursorRejected("malformed")
    a, m, p, iat, exp, c = (doc.get(k) for k in ("a", "m", "p", "iat", "exp", "c"))
    if not (
        type(a) is str
        and type(m) is str
        and type(p) is str
        and type(iat) is int
        and type(exp) is int
        and type(c) is list
        and 0 < len(c) <= MAX_MEMBERS
    ):
        raise CursorRejected("malformed")
    pending: list[tuple[str, str]] = []
    for entry in c:
        if type(entry) is not list or len(entry) != 2:
            raise CursorRejected("malformed")
        member, cursor = entry
        if type(member) is not str or not member_cursor_ok(cursor):
            raise CursorRejected("malformed")
        pending.append((member, cursor))
    if now > exp + LEEWAY_S or now + LEEWAY_S < iat:
        raise CursorRejected("expired")
    if not hmac.compare_digest(a.encode(), audience.encode()):
        raise CursorRejected("route")
    if m != method:
        raise CursorRejected("method")
    if not hmac.compare_digest(p.encode(), principal_tag(key, principal_id).encode()):
        raise CursorRejected("principal")
    if len({member for member, _ in pending}) != len(pending):
        raise CursorRejected("malformed")
    if any(member not in members for member, _ in pending):
        raise CursorRejected("member")
    return PageCursor(pending=tuple(pending), private=doc.get("s") == 1)
