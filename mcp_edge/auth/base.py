"""The contract between the edge (the transport middleware) and the authentication modes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

import orjson
from starlette.datastructures import Headers


def principal_id(kind: str, *parts: str) -> str:
    """A principal id that names its kind and keeps its parts apart: the JSON array
    ``[kind, *parts]`` (``["jwt-sub","https://idp.example","alice"]``). JSON strings are quoted
    and escaped, so two different (kind, parts) never give the same id, whatever the parts hold:
    a user whose subject reads ``client:svc`` is not the client ``svc``."""
    return orjson.dumps([kind, *parts]).decode()


#: Longest bearer token read (``auth.jwt.max_token_bytes``' default): a longer one is refused
#: before it is parsed.
DEFAULT_MAX_TOKEN_BYTES = 16 * 1024

#: Kinds of principal ids (the first element of :func:`principal_id`).
JWT_SUBJECT, JWT_CLIENT, TRUSTED_HEADER, ANONYMOUS_KIND = (
    "jwt-sub",
    "jwt-client",
    "trusted-header",
    "anonymous",
)


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``id`` is the stable identity that sealed request state, session tokens, rate-limit budgets
    and private cache entries are bound to: :func:`principal_id` of the mode's kind and what
    identifies the caller in it (for JWTs the issuer plus the subject, or the client id of a
    client-credentials token). It is never logged in clear by the gateway.
    """

    id: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    #: Value for an optional identity header sent upstream (e.g. ``X-MCP-Principal``).
    display: str = ""
    #: What the authentication mode verified about the caller, read-only: a JWT's claims, or
    #: ``sub`` (and ``scope``) in trusted-header mode. Policy rules read it (``mcp_edge.policy``).
    claims: Mapping[str, Any] = field(default_factory=lambda: NO_CLAIMS, compare=False, hash=False)


NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})


ANONYMOUS = Principal(id=principal_id(ANONYMOUS_KIND), display="anonymous")


class AuthError(Exception):
    """Authentication failed: the client gets ``status`` and ``www_authenticate``."""

    def __init__(self, status: int, message: str, www_authenticate: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.www_authenticate = www_authenticate


class Authenticator(Protocol):
    """Turns a request's headers (and peer address) into a Principal, or raises AuthError.

    ``query_string`` (the raw ASGI ``scope["query_string"]``) is optional: the bearer mode uses it
    only to refuse tokens sent in the URL (``access_token=``), which MCP forbids.
    """

    async def authenticate(
        self, headers: Headers, client_host: str | None, *, query_string: bytes = b""
    ) -> Principal: ...

    #: Request headers this mode consumes; they are never forwarded upstream.
    consumed_headers: frozenset[str]


class AnonymousAuthenticator:
    """Every caller is the same principal. Only used when configured explicitly."""

    consumed_headers: frozenset[str] = frozenset()

    async def authenticate(
        self, headers: Headers, client_host: str | None, *, query_string: bytes = b""
    ) -> Principal:
        return ANONYMOUS
