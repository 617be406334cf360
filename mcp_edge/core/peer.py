"""Sealed replica-to-replica messages: what a peer request must carry to be acted on.

Two kinds of requests travel between replicas (``mcp_edge.cluster.forward``: a retry for a call
parked on another replica; ``mcp_edge.upstream.stdio.front``: a 2025-era request for a virtual
session held by another replica). Each carries, in one header, a token sealed with the key ring
(:func:`mcp_edge.core.seal.seal_blob`, a purpose of its own per kind) whose claims say:

* ``m``, ``u``: the HTTP method and path it was made for;
* ``d``: the SHA-256 of the exact body it carries (base64url), so a captured header authorizes
  that body and no other;
* ``exp``: a short expiry (:data:`TTL_SECONDS`);
* ``j``: a random id, so the receiving replica acts on each message once (:class:`SeenIds`);
* whatever the kind needs (route, caller, session id).

The header is small and is opened before a byte of the body is read: anything that is not a
message from a holder of the ring, for this method and path, unexpired, is refused without
reading its body. The body is then read within the usual bounds and checked against ``d``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

import orjson

from mcp_edge.core.seal import KeyRing, b64u_encode, open_json_blob, seal_blob

#: The header that carries the sealed message.
HEADER = "x-mcp-edge-peer"
#: Purposes (the seal's associated data): one per kind, so a token made for one never opens as another.
FORWARD = "mcpef2"
RELAY = "mcper2"
#: How long a sealed message stays valid.
TTL_SECONDS = 30
#: Longest header token opened (the claims are a few short fields).
MAX_TOKEN_CHARS = 4096


def body_digest(body: bytes) -> str:
    return b64u_encode(hashlib.sha256(body).digest())


def new_id() -> str:
    return b64u_encode(os.urandom(12))


def seal_message(
    ring: KeyRing,
    purpose: str,
    claims: dict[str, Any],
    *,
    method: str,
    path: str,
    body: bytes,
    now: float,
    jid: str | None = None,
) -> str:
    """The header token for a request ``method path`` carrying ``body`` (``jid``: its id, else a
    new one)."""
    doc = {
        **claims,
        "m": method,
        "u": path,
        "d": body_digest(body),
        "exp": int(now) + TTL_SECONDS,
        "j": jid or new_id(),
    }
    return seal_blob(ring, purpose, orjson.dumps(doc))


def open_message(
    ring: KeyRing, purpose: str, token: str | None, *, method: str, path: str, now: float
) -> dict[str, Any] | None:
    """The claims of a header token made for ``method path`` and not expired; None otherwise.
    The body is checked afterwards, once read (:func:`body_matches`)."""
    if token is None:
        return None
    doc = open_json_blob(ring, purpose, token, max_chars=MAX_TOKEN_CHARS)
    if doc is None:
        return None
    exp, digest, jid = doc.get("exp"), doc.get("d"), doc.get("j")
    if type(exp) is not int or not isinstance(digest, str) or not isinstance(jid, str):
        return None
    if now > exp or doc.get("m") != method or doc.get("u") != path:
        return None
    return doc


def body_matches(claims: dict[str, Any], body: bytes) -> bool:
    return hmac.compare_digest(str(claims["d"]).encode(), body_digest(body).encode())


class SeenIds:
    """The ids of the messages acted on in this process, until they expire: a message is acted
    on once. Full (more unexpired messages than ``max_entries``): refuse, fail closed."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._expiry: dict[str, int] = {}

    def first_time(self, claims: dict[str, Any], now: float) -> bool:
        jid, exp = str(claims["j"]), int(claims["exp"])
        self._forget_expired(now)
        if jid in self._expiry or len(self._expiry) >= self.max_entries:
            return False
        self._expiry[jid] = exp
        return True

    def _forget_expired(self, now: float) -> None:
        # Oldest first (insertion order follows expiry, up to the replicas' clock skew).
        while self._expiry:
            jid, exp = next(iter(self._expiry.items()))
            if exp >= now:
                return
            del self._expiry[jid]

    def __len__(self) -> int:
        return len(self._expiry)
