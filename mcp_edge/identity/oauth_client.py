"""The authorization-code side of the gateway as an OAuth client (RFC 6749 §4.1 with PKCE,
RFC 7636, and the OAuth 2.0 security BCP, RFC 9700): the authorization request URL, the code
redeemed, the ID token of an OpenID Connect sign-in checked, refresh tokens used, and tokens
revoked (RFC 7009) when a person withdraws a grant.

The token requests themselves (client authentication, bounds, errors) are
:class:`mcp_edge.identity.asclient.AuthorizationServer`'s; this module only says what they carry
and what their answers must hold.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import jwt

from mcp_edge.auth.base import Principal
from mcp_edge.auth.jwt_bearer import principal_from_claims
from mcp_edge.auth.keys import KeyMismatch, KeyNotFound, KeySource, KeysUnavailable
from mcp_edge.identity.asclient import ASUnavailable, AuthorizationServer, ServerMetadata
from mcp_edge.identity.config import check_named_url
from mcp_edge.identity.consent_seals import ConsentRefused, Transaction

#: Most characters of an authorization code or a state the gateway reads.
MAX_CODE_CHARS = 2048
MAX_ID_TOKEN_CHARS = 16 * 1024


def authorization_endpoint(meta: ServerMetadata, *, allow_http: bool) -> str:
    """The server's ``authorization_endpoint``, checked like its other endpoints."""
    endpoint = meta.document.get("authorization_endpoint")
    if not isinstance(endpoint, str):
        raise ASUnavailable("the metadata has no authorization_endpoint")
    try:
        check_named_url(
            endpoint,
            "authorization_endpoint",
            named_by=meta.source or meta.issuer,
            allow_http=allow_http,
        )
    except ValueError as exc:
        raise ASUnavailable(f"the metadata's {exc}") from None
    methods = meta.document.get("code_challenge_methods_supported")
    if isinstance(methods, list) and "S256" not in methods:
        raise ASUnavailable("the server does not support PKCE with S256")
    return endpoint


def authorization_url(endpoint: str, params: Sequence[tuple[str, str]]) -> str:
    """``endpoint`` with the request's parameters added to its own query (RFC 6749 §3.1: the
    endpoint's query is kept)."""
    parts = urlsplit(endpoint)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


def code_request(
    tx: Transaction,
    *,
    client_id: str,
    redirect_uri: str,
    scope: Sequence[str],
    resources: Sequence[str] = (),
    nonce: bool = True,
) -> list[tuple[str, str]]:
    """The authorization request's parameters for one leg."""
    params = [
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", redirect_uri),
        ("state", tx.state),
        ("code_challenge", tx.challenge),
        ("code_challenge_method", "S256"),
    ]
    if scope:
        params.append(("scope", " ".join(scope)))
    if nonce:
        params.append(("nonce", tx.nonce))
    params.extend(("resource", uri) for uri in resources)
    return params


def check_issuer_parameter(meta: ServerMetadata, issuer: str | None, presented: str | None) -> None:
    """RFC 9207: a server that says it sends ``iss`` must send its own; one that sends it must
    send its own (mix-up defence). Refuses ``state_mismatch`` otherwise."""
    required = meta.document.get("authorization_response_iss_parameter_supported") is True
    if presented is None:
        if required:
            raise ConsentRefused("state_mismatch", "the callback lacks the server's iss")
        return
    if issuer is None or not hmac.compare_digest(presented.encode(), issuer.encode()):
        raise ConsentRefused("state_mismatch", "the callback's iss is another server's")


async def redeem(
    server: AuthorizationServer,
    code: str,
    tx: Transaction,
    *,
    redirect_uri: str,
    resources: Sequence[str] = (),
) -> dict[str, Any]:
    """The token endpoint's answer for an authorization code (ASRefused / ASUnavailable). The
    client's authentication names it (``client_id`` is only sent by its method, RFC 6749 §4.1.3)."""
    form = [
        ("grant_type", "authorization_code"),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("code_verifier", tx.verifier),
    ]
    form.extend(("resource", uri) for uri in resources)
    return await server.token_request(form)


async def refresh(
    server: AuthorizationServer,
    refresh_token: str,
    *,
    resources: Sequence[str] = (),
) -> dict[str, Any]:
    form = [
        ("grant_type", "refresh_token"),
        ("refresh_token", refresh_token),
    ]
    form.extend(("resource", uri) for uri in resources)
    return await server.token_request(form)


async def verify_id_token(
    token: Any,
    *,
    keys: KeySource,
    issuer: str,
    client_id: str,
    nonce: str,
    algorithms: Sequence[str],
    leeway: float = 30.0,
) -> Principal:
    """The principal an ID token names (OpenID Connect Core §3.1.3.7: signature by the
    provider's key, ``iss``, ``aud`` holding the client, ``azp`` when there are several,
    ``exp``, the request's ``nonce``), as the callers' tokens of that issuer name it.
    :class:`ConsentRefused` (``failed``; ``unavailable`` when the keys cannot be had)."""
    if not isinstance(token, str) or not token or len(token) > MAX_ID_TOKEN_CHARS:
        raise ConsentRefused("failed", "the sign-in gave no ID token")
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError:
        raise ConsentRefused("failed", "the ID token is malformed") from None
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in algorithms:
        raise ConsentRefused("failed", "the ID token's algorithm is not accepted")
    try:
        key = await keys.get_key(header.get("kid"), alg)
    except KeysUnavailable:
        raise ConsentRefused("unavailable", "the identity provider's keys") from None
    except (KeyNotFound, KeyMismatch):
        raise ConsentRefused("failed", "the ID token's signing key is unknown") from None
    try:
        claims = jwt.decode(
            token,
            key.key,
            algorithms=[alg],
            audience=client_id,
            issuer=issuer,
            leeway=leeway,
            options={"require": ["exp", "iat", "iss", "aud", "sub"], "verify_signature": True},
        )
    except jwt.InvalidTokenError as exc:
        raise ConsentRefused("failed", f"the ID token is invalid ({type(exc).__name__})") from None
    audience = claims.get("aud")
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise ConsentRefused("failed", "the ID token's azp is not this client")
    presented = claims.get("nonce")
    if not isinstance(presented, str) or not hmac.compare_digest(
        presented.encode(), nonce.encode()
    ):
        raise ConsentRefused("failed", "the ID token's nonce is not this sign-in's")
    # Only what names the person: the scopes of an ID token are none of the caller's.
    principal = principal_from_claims({"iss": claims["iss"], "sub": claims["sub"]})
    if principal is None:
        raise ConsentRefused("failed", "the ID token's subject is not usable")
    return principal


async def revoke(server: AuthorizationServer, token: str, hint: str) -> bool:
    """RFC 7009 at the server's ``revocation_endpoint``, when it has one; False when it has
    none or did not answer 200 (the grant is deleted here anyway)."""
    try:
        meta = await server.metadata()
    except ASUnavailable:
        return False
    endpoint = meta.document.get("revocation_endpoint")
    if not isinstance(endpoint, str):
        return False
    try:
        check_named_url(
            endpoint,
            "revocation_endpoint",
            named_by=meta.source or meta.issuer,
            allow_http=server.section.allow_http,
        )
    except ValueError:
        return False
    return await server.post_form(endpoint, [("token", token), ("token_type_hint", hint)])
