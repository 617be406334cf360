"""Header rules: reading the mirrored MCP headers, and what crosses the gateway in each direction."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import functools
from collections.abc import Iterable, Sequence

RawHeaders = Sequence[tuple[bytes, bytes]]

PROTOCOL_VERSION = "mcp-protocol-version"
MCP_METHOD = "mcp-method"
MCP_NAME = "mcp-name"
ROUTING_HEADERS = (PROTOCOL_VERSION, MCP_METHOD, MCP_NAME)

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)

#: Request headers never forwarded as they came: the gateway sets or checks them itself.
#: ``accept-encoding`` is dropped so the upstream answers uncompressed, which the gateway must
#: be able to inspect for the MRTR methods. ``expect`` is answered at the edge (the gateway has
#: the whole body before it calls the upstream, which must not be made to wait for a 100).
_REQUEST_DROP = frozenset(
    {b"host", b"content-length", b"origin", b"authorization", b"accept-encoding", b"cookie", b"expect"}
)

_B64_PREFIX = "=?base64?"
_B64_SUFFIX = "?="


def values(headers: RawHeaders, name: str) -> list[str]:
    """All values of one header (names are case-insensitive; ASGI gives them lowercased)."""
    key = name.encode("latin-1")
    return [v.decode("latin-1") for k, v in headers if k == key]


def first(headers: RawHeaders, name: str) -> str | None:
    key = name.encode("latin-1")
    for k, v in headers:
        if k == key:
            return v.decode("latin-1")
    return None


def decode_header_value(value: str) -> str | None:
    """Decode the ``=?base64?...?=`` form used for non-ASCII values; None if it is malformed."""
    if value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX) and len(value) >= 11:
        encoded = value[len(_B64_PREFIX) : -len(_B64_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
    # Header values arrive as latin-1 over ASGI; plain ones must be ASCII.
    try:
        value.encode("ascii")
    except UnicodeEncodeError:
        return None
    return value.strip(" \t")


def host_allowed(host: str | None, patterns: Iterable[str]) -> bool:
    """Match a Host header against patterns such as ``localhost:*`` or ``mcp.example.com``."""
    if not host:
        return False
    host = host.lower()
    for pattern in patterns:
        pattern = pattern.lower()
        if pattern == "*" or host == pattern or fnmatch.fnmatchcase(host, pattern):
            return True
        # A bare host name also matches that host on any port.
        if ":" not in pattern and host.rsplit(":", 1)[0] == pattern:
            return True
    return False


def origin_allowed(origin: str, patterns: Iterable[str]) -> bool:
    """Match an Origin against an allow-list (exact, or with ``*`` wildcards, e.g. port)."""
    origin = origin.lower().rstrip("/")
    for pattern in patterns:
        pattern = pattern.lower().rstrip("/")
        if pattern == "*" or origin == pattern or fnmatch.fnmatchcase(origin, pattern):
            return True
    return False


@functools.lru_cache(maxsize=64)
def _always_dropped(drop: tuple[str, ...]) -> frozenset[bytes]:
    """Hop-by-hop, gateway-owned and the route's own dropped headers (one set per route)."""
    return HOP_BY_HOP | _REQUEST_DROP | {d.lower().encode() for d in drop}


def upstream_request_headers(
    headers: RawHeaders,
    *,
    upstream_host: str,
    drop: Iterable[str] = (),
    extra: Iterable[tuple[str, str]] = (),
) -> list[tuple[bytes, bytes]]:
    """Headers for the upstream request: hop-by-hop and gateway-owned headers removed,
    ``Host`` rewritten to the upstream's, everything else (``Mcp-*`` included) unchanged."""
    dropped = _always_dropped(tuple(drop))
    connection = values(headers, "connection")
    if connection:
        dropped = dropped | {
            token.strip().lower().encode("latin-1") for value in connection for token in value.split(",") if token.strip()
        }
    # Optional whitespace around a value is not part of it (RFC 9110 5.5); some HTTP parsers
    # leave trailing blanks in, which the upstream client would refuse to send.
    out = [(k, v.strip(b" \t")) for k, v in headers if k not in dropped]
    out.append((b"host", upstream_host.encode("latin-1")))
    out.extend((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra)
    return out


def client_response_headers(
    headers: Iterable[tuple[bytes, bytes]], *, keep_length: bool
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers for the client: hop-by-hop removed; the length only when the
    body passes unchanged (otherwise the server frames it again)."""
    out: list[tuple[bytes, bytes]] = []
    for k, v in headers:
        k = k.lower()
        if k in HOP_BY_HOP or (k == b"content-length" and not keep_length):
            continue
        out.append((k, v))
    return out
