"""The gateway's sealed ``requestState`` envelope.

Wire form: ``mcpe1.<kid>.<base64url(nonce || AES-256-GCM ciphertext+tag)>``. The prefix and key id
are the associated data, so they are authenticated too. The plaintext is a compact JSON claims
object (see :class:`Claims`). Keys are derived once, when the ring is built, never per request.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

FORMAT = "mcpe1"
FORMAT_VERSION = 1
MIN_SECRET_BYTES = 32
NONCE_BYTES = 12
#: Tokens longer than this are rejected before any decoding work.
MAX_TOKEN_CHARS = 256 * 1024

#: Every reason a presented state can be refused for (``error.data.reason``).
REASONS = (
    "malformed",  # not a gateway envelope, or undecodable
    "integrity",  # unknown key id or failed AEAD tag
    "expired",  # past its expiry (or issued in the future)
    "principal",  # presented by another caller
    "binding",  # another gateway/route, method, target or arguments
    "rounds",  # too many rounds in one flow
    "replayed",  # a single-use state presented twice
    "missing",  # inputResponses without requestState on a strict route
)


class StateRejected(Exception):
    def __init__(self, reason: str) -> None:
        assert reason in REASONS, reason
        super().__init__(reason)
        self.reason = reason


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def b64u_encode(data: bytes) -> str:
    """base64url without padding (binascii directly: this is on every sealed round)."""
    return (
        binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode("ascii")
    )


def b64u_decode(text: str) -> bytes:
    """Strict base64url: characters outside the url-safe alphabet are an error."""
    raw = text.strip().encode("ascii")
    if b"+" in raw or b"/" in raw:
        raise ValueError("not base64url")
    return binascii.a2b_base64(
        raw.translate(_FROM_URLSAFE) + b"=" * (-len(raw) % 4), strict_mode=True
    )


def _hkdf(secret: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret)


def derive_kid(secret: bytes) -> str:
    """A short, stable key id derived from the secret, so replicas agree without configuring ids."""
    return b64u_encode(hashlib.sha256(b"mcp-edge/kid\x00" + secret).digest()[:6])


@dataclass(frozen=True, slots=True)
class StateKey:
    kid: str
    aead: AESGCM = field(repr=False)
    principal_key: bytes = field(repr=False)
    #: Keys the names of entries in the secret vault (mcp_edge.identity.vault): principal,
    #: member and target appear in a store only as keyed hashes under it.
    name_key: bytes = field(repr=False, default=b"")

    @classmethod
    def from_secret(cls, secret: bytes, kid: str | None = None) -> StateKey:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(
                f"a state key needs at least {MIN_SECRET_BYTES} bytes, got {len(secret)}"
            )
        kid = kid or derive_kid(secret)
        if not kid or "." in kid or len(kid) > 32:
            raise ValueError("a key id must be 1-32 characters without '.'")
        return cls(
            kid=kid,
            aead=AESGCM(_hkdf(secret, b"mcp-edge/state/v1/aes-256-gcm")),
            principal_key=_hkdf(secret, b"mcp-edge/state/v1/principal"),
            name_key=_hkdf(secret, b"mcp-edge/vault/v1/names"),
        )


def parse_key_spec(spec: str) -> StateKey:
    """``<base64url secret>`` or ``<kid>:<base64url secret>``."""
    spec = spec.strip()
    kid = None
    if ":" in spec:
        kid, spec = spec.split(":", 1)
    try:
        secret = b64u_decode(spec)
    except (binascii.Error, ValueError):
        raise ValueError("a state key must be base64url") from None
    return StateKey.from_secret(secret, kid or None)


def generate_key() -> str:
    return b64u_encode(os.urandom(32))


class KeyRing:
    """The first key seals; every key opens (rotation without downtime)."""

    def __init__(self, keys: list[StateKey]) -> None:
        if not keys:
            raise ValueError("the key ring is empty")
        ids = [k.kid for k in keys]
        if len(set(ids)) != len(ids):
            raise ValueError("duplicate key id in the key ring")
        self.keys = keys
        self.by_id = {k.kid: k for k in keys}

    @property
    def current(self) -> StateKey:
        return self.keys[0]


@dataclass(slots=True)
class Claims:
    """What a sealed state says. Short field names keep tokens small."""

    iat: int  # issued at (unix seconds)
    exp: int  # expires at
    aud: str  # gateway id + route
    p: str  # keyed hash of the principal (never the principal itself)
    m: str  # method
    t: str | None  # tool/prompt name or resource uri
    d: str  # digest of the salient params
    k: list[str]  # inputRequests keys issued
    r: int  # round number, 1 for the first InputRequiredResult of a flow
    j: str  # random id (single-use stores key on it)
    e: str | None = None  # upstream endpoint that answered (affinity)
    s: str | None = None  # the upstream's own requestState, if it sent one
    a: bool = False  # the gateway's policy approval was granted in this flow (see mcp_edge.policy)
    g: bool = False  # this round was asked by the gateway itself (its approval question), not the upstream
    v: int = FORMAT_VERSION

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "v": self.v,
            "iat": self.iat,
            "exp": self.exp,
            "aud": self.aud,
            "p": self.p,
            "m": self.m,
            "t": self.t,
            "d": self.d,
            "k": self.k,
            "r": self.r,
            "j": self.j,
        }
        if self.e is not None:
            doc["e"] = self.e
        if self.s is not None:
            doc["s"] = self.s
        if self.a:
            doc["a"] = 1
        if self.g:
            doc["g"] = 1
        return orjson.dumps(doc)

    @classmethod
    def from_json(cls, data: bytes) -> Claims:
        doc = orjson.loads(data)
        if type(doc) is not dict or doc.get("v") != FORMAT_VERSION:
            raise ValueError("unknown claims version")
        iat, exp, r, k = doc["iat"], doc["exp"], doc["r"], doc["k"]
        aud, p, m, d, j = doc["aud"], doc["p"], doc["m"], doc["d"], doc["j"]
        if not (
            type(iat) is int
            and type(exp) is int
            and type(r) is int
            and type(k) is list
            and type(aud) is str
            and type(p) is str
            and type(m) is str
            and type(d) is str
            and type(j) is str
        ):
            raise ValueError("bad claim types")
        return cls(
            iat=iat,
            exp=exp,
            aud=aud,
            p=p,
            m=m,
            t=doc.get("t"),
            d=d,
            k=k,
            r=r,
            j=j,
            e=doc.get("e"),
            s=doc.get("s"),
            a=doc.get("a") == 1,
            g=doc.get("g") == 1,
        )


def principal_tag(key: StateKey, principal_id: str) -> str:
    """A keyed hash of the principal: binds the state without revealing who the caller is."""
    return _principal_tag(key.principal_key, principal_id)


@functools.lru_cache(maxsize=8192)
def _principal_tag(principal_key: bytes, principal_id: str) -> str:
    # Cached: the same callers come back round after round, and an HMAC costs more than a lookup.
    return b64u_encode(hmac.new(principal_key, principal_id.encode(), hashlib.sha256).digest()[:16])


def _aad(kid: str) -> bytes:
    return f"{FORMAT}.{kid}".encode("ascii")


def seal(ring: KeyRing, claims: Claims, *, nonce: bytes | None = None) -> str:
    key = ring.current
    nonce = nonce or os.urandom(NONCE_BYTES)
    ciphertext = key.aead.encrypt(nonce, claims.to_json(), _aad(key.kid))
    return f"{FORMAT}.{key.kid}.{b64u_encode(nonce + ciphertext)}"


def open_state(
    ring: KeyRing, token: Any, *, now: float, leeway: int = 5
) -> tuple[Claims, StateKey]:
    """Check integrity, format and expiry; return the claims and the key that sealed them.

    The bindings (audience, principal, method, target, arguments, rounds) are checked by
    :func:`verify_binding`, since they need the request.
    """
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        raise StateRejected("malformed")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != FORMAT:
        raise StateRejected("malformed")
    _, kid, body = parts
    key = ring.by_id.get(kid)
    if key is None:
        raise StateRejected("integrity")
    try:
        blob = b64u_decode(body)
    except (binascii.Error, ValueError):
        raise StateRejected("malformed") from None
    # Only the canonical encoding of the blob is accepted (no padding games, no re-encoding).
    if b64u_encode(blob) != body or len(blob) < NONCE_BYTES + 16:
        raise StateRejected("malformed")
    try:
        plaintext = key.aead.decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:], _aad(kid))
    except InvalidTag:
        raise StateRejected("integrity") from None
    try:
        claims = Claims.from_json(plaintext)
    except (ValueError, KeyError, TypeError, orjson.JSONDecodeError):
        raise StateRejected("malformed") from None
    if now > claims.exp + leeway or now + leeway < claims.iat:
        raise StateRejected("expired")
    return claims, key


@dataclass(frozen=True, slots=True)
class Binding:
    """What a retry must match: who asks, through which route, for what."""

    audience: str
    principal_id: str
    method: str
    target: str | None
    digest: str


def verify_binding(claims: Claims, key: StateKey, binding: Binding, *, max_rounds: int) -> None:
    if not hmac.compare_digest(claims.aud.encode(), binding.audience.encode()):
        raise StateRejected("binding")
    if not hmac.compare_digest(
        claims.p.encode(), principal_tag(key, binding.principal_id).encode()
    ):
        raise StateRejected("principal")
    if claims.m != binding.method or claims.t != binding.target:
        raise StateRejected("binding")
    if not hmac.compare_digest(claims.d.encode(), binding.digest.encode()):
        raise StateRejected("binding")
    if claims.r < 1 or claims.r > max_rounds:
        raise StateRejected("rounds")


def new_claims(
    ring: KeyRing,
    binding: Binding,
    *,
    now: float,
    ttl: int,
    input_keys: list[str],
    round_number: int,
    upstream_state: str | None,
    endpoint: str | None = None,
    approved: bool = False,
    gateway_round: bool = False,
) -> Claims:
    iat = int(now)
    return Claims(
        iat=iat,
        exp=iat + ttl,
        aud=binding.audience,
        p=principal_tag(ring.current, binding.principal_id),
        m=binding.method,
        t=binding.target,
        d=binding.digest,
        k=input_keys,
        r=round_number,
        j=b64u_encode(os.urandom(16)),
        e=endpoint,
        s=upstream_state,
        a=approved,
        g=gateway_round,
    )


# ---------------------------------------------------------------- other sealed payloads

#: Prefixes of the gateway's other sealed payloads; each is the AEAD's associated data (with the
#: key id), so a payload sealed for one purpose never opens as another.
PURPOSES = frozenset(
    {
        "mcpes1",  # legacy session tokens (mcp_edge.core.session_token)
        # Replica-to-replica messages (mcp_edge.core.peer): a forwarded retry's header, its body and
        # the owner's answer; a relayed 2025-era request's header. Version 1 of the forward (one
        # sealed body, not bound to a header) is no longer accepted.
        "mcpef2",
        "mcpefb2",
        "mcpefa2",
        "mcper2",
        "mcpec1",  # federated list cursors (mcp_edge.core.federation.cursor)
        "mcpev1",  # secret vault entries (mcp_edge.identity.vault), bound to their entry's name
        # Per-user consent (mcp_edge.identity.consent_seals): the start link's ticket, the
        # browser's sign-in transaction cookie, the consent round's continuation, the signed-in
        # browser's session cookie.
        "mcpecs1",
        "mcpecb1",
        "mcpecc1",
        "mcpecu1",
    }
)


def _blob_aad(purpose: str, kid: str, bind: bytes) -> bytes:
    aad = f"{purpose}.{kid}".encode("ascii")
    return aad + b"\x00" + bind if bind else aad


def seal_blob(ring: KeyRing, purpose: str, payload: bytes, *, bind: bytes = b"") -> str:
    """``<purpose>.<kid>.<base64url(nonce || ciphertext)>`` under the ring's current key.

    ``bind``: what the payload belongs to (e.g. the name it is stored under), authenticated with
    it but not carried: it opens only with the same ``bind``."""
    assert purpose in PURPOSES, purpose
    key = ring.current
    nonce = os.urandom(NONCE_BYTES)
    aad = _blob_aad(purpose, key.kid, bind)
    return f"{purpose}.{key.kid}.{b64u_encode(nonce + key.aead.encrypt(nonce, payload, aad))}"


def open_blob(
    ring: KeyRing,
    purpose: str,
    token: Any,
    *,
    max_chars: int = MAX_TOKEN_CHARS,
    bind: bytes = b"",
) -> bytes | None:
    """The payload of a token sealed by :func:`seal_blob` for ``purpose`` (and ``bind``); None
    for anything else (wrong purpose or binding, unknown key, tampered, malformed, too long)."""
    if not isinstance(token, str) or len(token) > max_chars:
        return None
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != purpose:
        return None
    key = ring.by_id.get(parts[1])
    if key is None:
        return None
    try:
        blob = b64u_decode(parts[2])
    except (binascii.Error, ValueError):
        return None
    if b64u_encode(blob) != parts[2] or len(blob) < NONCE_BYTES + 16:
        return None
    try:
        return key.aead.decrypt(
            blob[:NONCE_BYTES], blob[NONCE_BYTES:], _blob_aad(purpose, parts[1], bind)
        )
    except InvalidTag:
        return None


def open_json_blob(
    ring: KeyRing, purpose: str, token: Any, *, max_chars: int = MAX_TOKEN_CHARS
) -> dict[str, Any] | None:
    """:func:`open_blob` for a payload that is a JSON object; None for anything else."""
    raw = open_blob(ring, purpose, token, max_chars=max_chars)
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
