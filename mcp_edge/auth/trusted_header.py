"""Identity asserted by a trusted component in front of the gateway (a mesh sidecar, an
authenticating reverse proxy) in a request header such as ``X-Forwarded-User``.

The header is believed only when the request provably comes from that component: the TCP peer
is inside one of the configured networks, or the request carries a shared secret in another
header (compared in constant time). Anything else is 401. Both headers are consumed: they are
never forwarded upstream, so neither the identity nor the secret leaks past the gateway.

Note that the peer address is the one the ASGI server reports. If the server rewrites it from
``X-Forwarded-For`` (uvicorn's ``--proxy-headers``), the networks must describe that rewritten
address, and the server must only trust forwarding headers from the real proxy.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from types import MappingProxyType

from starlette.datastructures import Headers

from mcp_edge.auth.base import TRUSTED_HEADER, AuthError, Principal, principal_id
from mcp_edge.auth.challenge import Challenger

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_IDENTITY_CHARS = 512


def peer_in_networks(client_host: str | None, networks: Iterable[IPNetwork]) -> bool:
    """Whether the peer address lies in one of the networks. IPv4-mapped IPv6 addresses
    (``::ffff:10.0.0.1``) are compared as IPv4; anything that is not an IP address (a Unix socket
    path, None) is never trusted."""
    if not client_host:
        return False
    try:
        address = ipaddress.ip_address(client_host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address.version == net.version and address in net for net in networks)


def _single(headers: Headers, name: str) -> str | None | bool:
    """The header's only value, None if absent, False if repeated."""
    values = headers.getlist(name)
    if not values:
        return None
    if len(values) > 1:
        return False
    return values[0]


def clean_identity(value: str) -> str | None:
    """The asserted identity, or None if it is empty, too long or holds control characters."""
    value = value.strip(" \t")
    if not value or len(value) > MAX_IDENTITY_CHARS:
        return None
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        return None
    return value


class TrustedHeaderAuthenticator:
    """Principal from a header set by a trusted front component."""

    def __init__(
        self,
        *,
        header: str,
        trusted_networks: Iterable[IPNetwork] = (),
        secret_header: str | None = None,
        secret: bytes | None = None,
        require_both: bool = False,
        scopes_header: str | None = None,
        id_prefix: str = "",
        required_scopes: Iterable[str] = (),
        challenger: Challenger | None = None,
    ) -> None:
        self._header = header.lower()
        self._networks = tuple(trusted_networks)
        if (secret_header is None) != (secret is None):
            raise ValueError("secret_header and secret go together")
        self._secret_header = secret_header.lower() if secret_header else None
        self._secret = secret
        if not self._networks and self._secret is None:
            raise ValueError("trusted header mode needs trusted networks or a shared secret")
        if require_both and (not self._networks or self._secret is None):
            raise ValueError("require_both needs both trusted networks and a shared secret")
        self._require_both = require_both
        self._scopes_header = scopes_header.lower() if scopes_header else None
        self._id_prefix = id_prefix
        self._required = tuple(dict.fromkeys(required_scopes))
        if self._required and self._scopes_header is None:
            raise ValueError("required scopes need a scopes header in trusted header mode")
        self.challenger = challenger or Challenger(resource_metadata=None)
        consumed = {self._header}
        if self._secret_header:
            consumed.add(self._secret_header)
        if self._scopes_header:
            consumed.add(self._scopes_header)
        self.consumed_headers: frozenset[str] = frozenset(consumed)

    def _secret_ok(self, headers: Headers) -> bool:
        if self._secret_header is None or self._secret is None:
            return False
        presented = _single(headers, self._secret_header)
        if not isinstance(presented, str):
            return False
        return hmac.compare_digest(presented.encode("latin-1"), self._secret)

    def _unauthenticated(self, message: str) -> AuthError:
        return self.challenger.missing(message)

    async def authenticate(
        self, headers: Headers, client_host: str | None, *, query_string: bytes = b""
    ) -> Principal:
        from_network = peer_in_networks(client_host, self._networks)
        with_secret = self._secret_ok(headers)
        trusted = (
            (from_network and with_secret) if self._require_both else (from_network or with_secret)
        )
        if not trusted:
            raise self._unauthenticated("request did not come through the trusted proxy")
        raw = _single(headers, self._header)
        if raw is None:
            raise self._unauthenticated("no authenticated identity on the request")
        identity = clean_identity(raw) if isinstance(raw, str) else None
        if identity is None:
            raise self._unauthenticated("the identity header is malformed")
        scopes: frozenset[str] = frozenset()
        if self._scopes_header:
            raw_scopes = _single(headers, self._scopes_header)
            if raw_scopes is False:
                raise self._unauthenticated("the scopes header is repeated")
            if isinstance(raw_scopes, str):
                scopes = frozenset(s for s in raw_scopes.replace(",", " ").split() if s)
        if any(s not in scopes for s in self._required):
            raise self.challenger.insufficient_scope(self._required)
        claims: dict[str, str] = {"sub": identity}
        if self._scopes_header:
            claims["scope"] = " ".join(sorted(scopes))
        return Principal(
            id=principal_id(TRUSTED_HEADER, self._id_prefix, identity),
            scopes=scopes,
            display=identity,
            claims=MappingProxyType(claims),
        )
