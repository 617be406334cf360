"""The contract between the edge guard and the authentication modes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from starlette.datastructures import Headers


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    ``id`` is the stable identity that sealed request state is bound to (for JWTs the issuer
    plus the subject). It is never logged in clear by the gateway.
    """

    id: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    #: Value for an optional identity header sent upstream (e.g. ``X-MCP-Principal``).
    display: str = ""
    #: What the authentication mode verified about the caller, read-only: a JWT's claims, or
    #: ``sub`` (and ``scope``) in trusted-header mode. Policy rules read it (``gateway.policy``).
    claims: Mapping[str, Any] = field(default_factory=lambda: NO_CLAIMS, compare=False, hash=False)


NO_CLAIMS: Mapping[str, Any] = MappingProxyType({})


ANONYMOUS = Principal(id="anonymous", display="anonymous")


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
