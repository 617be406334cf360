"""Sealed legacy session ids.

A 2025-era client keeps an ``Mcp-Session-Id`` for its whole session, and the session lives in one
upstream process. The gateway never shows the upstream's id: the client gets a token sealed with
the key ring holding the endpoint that owns the session, the upstream's id, the route and the
caller, so any replica can send every later request (POST, GET stream, DELETE) back to that
endpoint with the upstream's own id, and a token presented by another caller, for another route,
or tampered with, never reaches an upstream.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import orjson

from mcp_edge.core.seal import KeyRing, open_json_blob, seal_blob

PURPOSE = "mcpes1"
#: Longest session token accepted (upstream ids are short; this bounds the work on garbage).
MAX_TOKEN_CHARS = 2048


@dataclass(frozen=True, slots=True)
class UpstreamSession:
    endpoint: str
    session_id: str


def _who(principal_id: str) -> str:
    # The payload is encrypted; the hash only keeps the principal's id out of the plaintext.
    return hashlib.sha256(principal_id.encode()).hexdigest()[:32]


def seal_session(
    ring: KeyRing, *, audience: str, principal_id: str, endpoint: str, session_id: str
) -> str:
    payload = {"a": audience, "p": _who(principal_id), "e": endpoint, "s": session_id}
    return seal_blob(ring, PURPOSE, orjson.dumps(payload))


def open_session(
    ring: KeyRing, token: str, *, audience: str, principal_id: str
) -> UpstreamSession | None:
    """The upstream session behind ``token``, or None if it is not a token this route issued
    to this caller."""
    doc = open_json_blob(ring, PURPOSE, token.strip(), max_chars=MAX_TOKEN_CHARS)
    if doc is None:
        return None
    a, p, e, s = doc.get("a"), doc.get("p"), doc.get("e"), doc.get("s")
    if not (
        isinstance(a, str) and isinstance(p, str) and isinstance(e, str) and isinstance(s, str)
    ):
        return None
    if not hmac.compare_digest(a.encode(), audience.encode()):
        return None
    if not hmac.compare_digest(p.encode(), _who(principal_id).encode()):
        return None
    return UpstreamSession(endpoint=e, session_id=s)
