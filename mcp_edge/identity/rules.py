"""The token exchange's rules, without I/O: the request's form (RFC 8693 §2.1), what of the
server's answer the gateway accepts (§2.2), how long an exchanged token is kept, and the errors
a client gets.

An answer is used only when it is an access token the gateway can send as a bearer token:
``access_token`` a printable token of bounded length, ``token_type`` ``Bearer`` (any case, RFC
6749 §5.1) or ``N_A`` (RFC 8693: the issued token is not an access token, e.g. a JWT asked for
with ``requested_token_type``), ``issued_token_type`` (when given) one the gateway may ask for,
``expires_in`` (when given) a non-negative number. Anything else is refused as
``token_exchange_failed``: a DPoP or MAC token sent as a bearer token would either fail at the
upstream or weaken what the server meant it for.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.identity.config import (
    ACCESS_TOKEN_TYPE,
    REQUESTABLE_TOKEN_TYPES,
    TOKEN_EXCHANGE_GRANT,
    TokenExchangeConfig,
)

FAILED = "token_exchange_failed"
UNAVAILABLE = "token_exchange_unavailable"

#: OAuth error codes counted by name in the failure metric (others count as ``other``).
KNOWN_ERRORS = frozenset(
    {
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "invalid_scope",
        "invalid_target",
        "access_denied",
    }
)


class UnusableAnswer(Exception):
    """The server's 200 answer is no token the gateway may send (``detail`` is safe to log)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Exchanged:
    """A token the server issued for the upstream."""

    token: str
    #: When it expires (unix seconds): from ``expires_in``, else the JWT's own ``exp``; None
    #: when neither says (then it is used for the call it was asked for only).
    expires_at: float | None
    issued_token_type: str

    def __repr__(self) -> str:  # the token never shows
        return (
            f"Exchanged(expires_at={self.expires_at}, issued_token_type={self.issued_token_type!r})"
        )

    def to_json(self) -> bytes:
        return orjson.dumps({"t": self.token, "e": self.expires_at, "i": self.issued_token_type})

    @classmethod
    def from_json(cls, raw: bytes) -> Exchanged | None:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(doc, dict) or not isinstance(doc.get("t"), str):
            return None
        expires = doc.get("e")
        if expires is not None and not isinstance(expires, int | float):
            return None
        return cls(doc["t"], expires, str(doc.get("i") or ACCESS_TOKEN_TYPE))


def exchange_form(
    config: TokenExchangeConfig, subject_token: str, actor_token: str | None = None
) -> list[tuple[str, str]]:
    """The token request's parameters (RFC 8693 §2.1); ``audience`` and ``resource`` repeat."""
    form = [
        ("grant_type", TOKEN_EXCHANGE_GRANT),
        ("subject_token", subject_token),
        ("subject_token_type", config.subject_token_type),
        ("requested_token_type", config.requested_token_type),
    ]
    form += [("audience", aud) for aud in config.audience]
    form += [("resource", uri) for uri in config.resource]
    if config.scope:
        form.append(("scope", " ".join(config.scope)))
    if actor_token is not None:
        form += [("actor_token", actor_token), ("actor_token_type", ACCESS_TOKEN_TYPE)]
    return form


def target_digest(config: TokenExchangeConfig, token_endpoint: str) -> str:
    """What an exchanged token is for (server, audience, resource, scope, type), as one digest:
    a change of any of them is another cache entry."""
    material = orjson.dumps(
        [
            token_endpoint,
            config.client.client_id,
            config.audience,
            config.resource,
            config.scope,
            config.requested_token_type,
            config.actor,
        ]
    )
    return hashlib.sha256(material).hexdigest()


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _printable_token(value: str, limit: int) -> bool:
    return 0 < len(value) <= limit and all(0x21 <= ord(ch) <= 0x7E for ch in value)


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` of a token that is a JWT, read without verifying it (the upstream verifies
    it; the gateway only needs to know how long to keep it). None for anything else."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > 16 * 1024:
        return None
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def parse_exchange_answer(doc: Mapping[str, Any], *, max_token_chars: int, now: float) -> Exchanged:
    """The token in a 200 answer, or UnusableAnswer (see the module's docstring)."""
    token = doc.get("access_token")
    if not isinstance(token, str):
        raise UnusableAnswer("the answer has no access_token")
    if not _printable_token(token, max_token_chars):
        raise UnusableAnswer(
            f"the access_token is not a printable token of at most {max_token_chars} characters"
        )
    token_type = doc.get("token_type")
    if not isinstance(token_type, str) or token_type.lower() not in ("bearer", "n_a"):
        shown = token_type[:32] if isinstance(token_type, str) else type(token_type).__name__
        raise UnusableAnswer(
            f"token_type {''.join(c if c.isprintable() else '?' for c in shown)!r} "
            "is neither Bearer nor N_A"
        )
    issued = doc.get("issued_token_type", ACCESS_TOKEN_TYPE)
    if issued not in REQUESTABLE_TOKEN_TYPES:
        raise UnusableAnswer("issued_token_type is not an access token or a JWT")
    expires_in = doc.get("expires_in")
    expires_at: float | None
    if expires_in is None:
        expires_at = jwt_expiry(token)
    elif isinstance(expires_in, int | float) and not isinstance(expires_in, bool):
        if expires_in < 0 or expires_in != expires_in:
            raise UnusableAnswer("expires_in is negative")
        expires_at = now + min(float(expires_in), 10 * 365 * 86400.0)
    else:
        raise UnusableAnswer("expires_in is not a number")
    return Exchanged(token, expires_at, issued)


def keep_until(
    exchanged: Exchanged,
    *,
    now: float,
    subject_expires_at: float | None,
    refresh_before: float,
    max_ttl: float,
) -> float:
    """Until when an exchanged token is used again (``<= now``: for this call only): shortly
    (``refresh_before``) before it expires, at most ``max_ttl``, never past the caller's own
    token, and not at all when nothing says when it expires."""
    if exchanged.expires_at is None:
        return now
    until = min(now + max_ttl, exchanged.expires_at - refresh_before)
    if subject_expires_at is not None:
        until = min(until, subject_expires_at)
    return until


def subject_expiry(claims: Mapping[str, Any]) -> float | None:
    """The caller's token's ``exp`` (validated by the edge), if it has one."""
    exp = claims.get("exp")
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def failure_label(error: str) -> str:
    return error if error in KNOWN_ERRORS else "other"


def exchange_failed(member: str, *, error: str | None = None) -> RpcError:
    """The server refused (or answered nothing usable): HTTP 502, nothing went upstream."""
    data: dict[str, Any] = {"reason": FAILED, "member": member}
    if error is not None:
        data["error"] = error
    return RpcError(
        INTERNAL_ERROR,
        "Token exchange failed: the authorization server issued no usable token for this upstream",
        data,
        status=502,
    )


def exchange_unavailable(member: str) -> RpcError:
    """No answer from the server (unreachable, too slow, unusable): HTTP 503, retry later."""
    return RpcError(
        INTERNAL_ERROR,
        "Token exchange unavailable: the authorization server did not answer; retry shortly",
        {"reason": UNAVAILABLE, "member": member},
        status=503,
        headers={"Retry-After": "1"},
    )


def no_subject_token(member: str) -> RpcError:
    """A request without a validated caller token (the gateway's own probes): not sent."""
    return RpcError(
        INTERNAL_ERROR,
        "Token exchange failed: the request carries no validated caller token to exchange",
        {"reason": FAILED, "member": member},
        status=502,
    )
