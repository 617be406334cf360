"""JWT bearer tokens: the gateway as an OAuth 2.1 resource server.

The token is taken only from ``Authorization: Bearer``; a token in the query string is refused
(400), never read. Checks, in order: header syntax, algorithm in the allow-list, a key that
may verify that algorithm (see :mod:`mcp_edge.auth.keys`), the signature, then ``exp``, ``nbf``,
``iat`` (with leeway), ``iss``, ``aud`` (this route's canonical URL or configured audiences),
optional ``typ``, the subject, and finally the route's required scopes (403 if missing).

The token is never logged, and no part of it is echoed back to the client.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from types import MappingProxyType
from urllib.parse import parse_qsl

import jwt
from starlette.datastructures import Headers

from mcp_edge.auth.base import (
    DEFAULT_MAX_TOKEN_BYTES,
    JWT_CLIENT,
    JWT_SUBJECT,
    Principal,
    principal_id,
)
from mcp_edge.auth.challenge import Challenger, unavailable
from mcp_edge.auth.keys import (
    HMAC_ALGORITHMS,
    SUPPORTED_ALGORITHMS,
    KeyMismatch,
    KeyNotFound,
    KeySource,
    KeysUnavailable,
)

log = logging.getLogger("mcp_edge.auth.jwt")

#: RFC 6750 §2.1 b64token.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
#: Longest subject / client id accepted (it becomes part of the principal and maybe a header).
MAX_SUBJECT_CHARS = 512


def token_in_query(query_string: bytes | str) -> bool:
    """Whether the query string carries ``access_token`` (RFC 6750 §2.3), which MCP forbids."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    if "access_token" not in query_string:
        return False
    return any(
        name == "access_token" for name, _ in parse_qsl(query_string, keep_blank_values=True)
    )


def extract_bearer_token(headers: Headers, challenger: Challenger) -> str | None:
    """The token from ``Authorization: Bearer``; None if the request has no Bearer credentials.

    Raises a 400 AuthError for a malformed Authorization header (several headers, a Bearer
    scheme without a well-formed token).
    """
    values = headers.getlist("authorization")
    if not values:
        return None
    if len(values) > 1:
        raise challenger.invalid_request("more than one Authorization header")
    scheme, _, rest = values[0].strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    token = rest.strip(" ")
    if not token or not _B64TOKEN.fullmatch(token):
        raise challenger.invalid_request("malformed Bearer credentials")
    return token


def scopes_of(claims: dict) -> frozenset[str] | None:
    """Granted scopes from ``scope`` (space-separated string, RFC 9068/8693) and/or ``scp``
    (list or string, as some providers issue). None if a claim has the wrong type."""
    scopes: set[str] = set()
    scope = claims.get("scope")
    if scope is not None:
        if not isinstance(scope, str):
            return None
        scopes.update(scope.split())
    scp = claims.get("scp")
    if scp is not None:
        if isinstance(scp, str):
            scopes.update(scp.split())
        elif isinstance(scp, list) and all(isinstance(s, str) for s in scp):
            scopes.update(s for s in scp if s)
        else:
            return None
    return frozenset(scopes)


def _clean_identifier(value: object) -> str | None:
    if not isinstance(value, str) or not value or len(value) > MAX_SUBJECT_CHARS:
        return None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return None
    return value


def principal_from_claims(claims: dict) -> Principal | None:
    """``id`` = ``principal_id("jwt-sub", iss, sub)``; display = ``sub``. A client-credentials
    token without ``sub`` is identified by ``client_id`` (or ``azp``) as
    ``principal_id("jwt-client", iss, client_id)``: a client never shares an identity with a
    user, whatever their subject reads (``client:svc`` included)."""
    issuer = claims["iss"]
    scopes = scopes_of(claims)
    if scopes is None:
        return None
    if "sub" in claims:
        subject = _clean_identifier(claims["sub"])
        if subject is None:
            return None
        return Principal(
            id=principal_id(JWT_SUBJECT, issuer, subject),
            scopes=scopes,
            display=subject,
            claims=MappingProxyType(claims),
        )
    client = _clean_identifier(claims.get("client_id")) or _clean_identifier(claims.get("azp"))
    if client is None:
        return None
    return Principal(
        id=principal_id(JWT_CLIENT, issuer, client),
        scopes=scopes,
        display=client,
        claims=MappingProxyType(claims),
    )


_DECODE_FAILURES: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not yet valid"),
    (jwt.InvalidAudienceError, "the token was not issued for this resource"),
    (jwt.InvalidIssuerError, "the token issuer is not accepted"),
    (jwt.MissingRequiredClaimError, "the token lacks a required claim"),
    (jwt.InvalidSignatureError, "the token signature is invalid"),
    (jwt.InvalidAlgorithmError, "the token algorithm is not accepted"),
    (jwt.InvalidIssuedAtError, "the token iat claim is invalid"),
)


class JwtBearerAuthenticator:
    """Validates a JWT access token for one route."""

    consumed_headers: frozenset[str] = frozenset({"authorization"})

    def __init__(
        self,
        *,
        key_source: KeySource,
        issuer: str | Sequence[str],
        audience: Sequence[str],
        algorithms: Iterable[str],
        leeway: float = 30.0,
        required_scopes: Iterable[str] = (),
        resource_metadata_url: str | None = None,
        scope_hint: Iterable[str] = (),
        token_types: Iterable[str] = (),
        max_token_bytes: int = DEFAULT_MAX_TOKEN_BYTES,
    ) -> None:
        self._algorithms = frozenset(algorithms)
        unknown = self._algorithms - SUPPORTED_ALGORITHMS
        if not self._algorithms or unknown:
            raise ValueError(f"unsupported or empty algorithm list: {sorted(unknown) or '[]'}")
        if not audience:
            raise ValueError("an audience is required")
        self._keys = key_source
        self._issuer = issuer if isinstance(issuer, str) else list(issuer)
        self._audience = list(audience)
        self._leeway = leeway
        self._required = tuple(dict.fromkeys(required_scopes))
        self._token_types = frozenset(t.lower() for t in token_types)
        self._max_token_bytes = max_token_bytes
        hint = tuple(scope_hint) or self._required
        self.challenger = Challenger(resource_metadata=resource_metadata_url, scope_hint=hint)

    @property
    def required_scopes(self) -> tuple[str, ...]:
        return self._required

    async def authenticate(
        self, headers: Headers, client_host: str | None, *, query_string: bytes = b""
    ) -> Principal:
        challenger = self.challenger
        if query_string and token_in_query(query_string):
            raise challenger.invalid_request(
                "access tokens are accepted only in the Authorization header"
            )
        token = extract_bearer_token(headers, challenger)
        if token is None:
            raise challenger.missing()
        if len(token) > self._max_token_bytes:
            raise challenger.invalid_token("the token is too large")

        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise challenger.invalid_token("the token is malformed") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._algorithms:
            self._reject("algorithm not allowed")
            raise challenger.invalid_token("the token algorithm is not accepted")
        if self._token_types:
            typ = header.get("typ")
            if (
                not isinstance(typ, str)
                or typ.lower().removeprefix("application/") not in self._token_types
            ):
                raise challenger.invalid_token("the token type is not accepted")
        kid = header.get("kid")

        try:
            key = await self._keys.get_key(kid, alg)
        except KeysUnavailable:
            raise unavailable() from None
        except KeyNotFound:
            self._reject("unknown key id")
            raise challenger.invalid_token("the token signing key is unknown") from None
        except KeyMismatch:
            self._reject("key does not match algorithm")
            raise challenger.invalid_token(
                "the token signing key does not match its algorithm"
            ) from None
        if (
            key.kty == "oct" and alg not in HMAC_ALGORITHMS
        ):  # defence in depth; select_key ensures it
            raise challenger.invalid_token("the token algorithm is not accepted")

        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self._audience,
                issuer=self._issuer,
                leeway=self._leeway,
                options={"require": ["exp", "iss", "aud"], "verify_signature": True},
            )
        except jwt.InvalidTokenError as exc:
            description = next(
                (text for kind, text in _DECODE_FAILURES if isinstance(exc, kind)),
                "the token is invalid",
            )
            self._reject(type(exc).__name__)
            raise challenger.invalid_token(description) from None

        principal = principal_from_claims(claims)
        if principal is None:
            self._reject("bad subject or scope claims")
            raise challenger.invalid_token("the token subject or scope claims are invalid")
        missing = [s for s in self._required if s not in principal.scopes]
        if missing:
            raise challenger.insufficient_scope(self._required)
        return principal

    @staticmethod
    def _reject(reason: str) -> None:
        # Reason only: never the token, never the principal.
        log.debug("jwt rejected: %s", reason)
