"""Header rules: reading the mirrored MCP headers, and what crosses the gateway in each direction."""

from __future__ import annotations

import base64
import binascii
import fnmatch
import functools
import re
from collections.abc import Iterable, Sequence

from mcp_edge.core.memo import BoundedMemo

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
    {
        b"host",
        b"content-length",
        b"origin",
        b"authorization",
        b"accept-encoding",
        b"cookie",
        b"expect",
    }
)

#: End-to-end headers a ``Connection`` nomination never removes: what the edge checked against
#: the body (``Mcp-*``, ``MCP-Protocol-Version``), what says how to read the body, and trace
#: context. Nominating them would hand the upstream a request other than the one verified.
_END_TO_END = frozenset(
    {b"content-type", b"accept", b"last-event-id", b"traceparent", b"tracestate", b"baggage"}
)

#: Headers a 2026-07-28 request never carries upstream: that revision has no sessions and no
#: resumable streams, and a raw session id would reach a dual-era upstream's legacy sessions
#: without the sealed session token the edge checks for legacy-era traffic.
_MODERN_DROP = frozenset({b"mcp-session-id", b"last-event-id"})

#: Headers the edge reads or maps itself: a client header that an upstream could read as one of
#: these (``Mcp_Session_Id``) is dropped like the gateway's own (see :func:`_alias`).
_VERIFIED = frozenset(
    {b"mcp-protocol-version", b"mcp-method", b"mcp-name", b"mcp-session-id", b"content-type"}
)

#: Host names that are this machine: a gateway listening on one accepts them (and only them) in
#: ``Host`` and ``Origin`` by default; plain-http key URLs may point only at them.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

_B64_PREFIX = "=?base64?"
_B64_SUFFIX = "?="


class HeaderIndex:
    """One request's headers, indexed once: the first value of each name, and whether any name
    came more than once. The request path reads a dozen headers; each read is then one dict
    lookup instead of a scan of the list. Names are the lowercased bytes ASGI gives."""

    __slots__ = ("_first", "_repeated", "raw")

    def __init__(self, raw: RawHeaders) -> None:
        self.raw = raw
        # Later entries overwrite earlier ones: reversed, the first value of each name wins.
        first: dict[bytes, bytes] = dict(reversed(raw))
        self._first = first
        self._repeated = len(first) != len(raw)

    def get(self, name: bytes) -> str | None:
        """The first value of a header, or None."""
        value = self._first.get(name)
        return None if value is None else value.decode("latin-1")

    def all(self, name: bytes) -> list[str]:
        """Every value of a header, in order."""
        if not self._repeated:
            value = self._first.get(name)
            return [] if value is None else [value.decode("latin-1")]
        return [v.decode("latin-1") for k, v in self.raw if k == name]

    def once(self, name: bytes) -> str | None:
        """The value of a header that may come at most once, or None; ValueError when it came
        more than once."""
        if self._repeated:
            found = self.all(name)
            if len(found) > 1:
                raise ValueError(name)
            return found[0] if found else None
        return self.get(name)

    def __contains__(self, name: bytes) -> bool:
        return name in self._first


def index(headers: RawHeaders | HeaderIndex) -> HeaderIndex:
    """``headers`` indexed (an index is returned as it is)."""
    return headers if isinstance(headers, HeaderIndex) else HeaderIndex(headers)


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
    if value.isascii():
        return value.strip(" \t")
    try:
        value.encode("ascii")
    except UnicodeEncodeError:
        return None
    return value.strip(" \t")


def is_loopback(host: str) -> bool:
    """A listening address on this machine only (the whole 127/8 block counts)."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class AllowList:
    """Host or Origin values allowed, from patterns such as ``localhost:*``, ``mcp.example.com`` or
    ``https://*.example.com`` (case-insensitive, ``*`` wildcards), compiled once."""

    __slots__ = ("_bare", "_exact", "_globs", "_seen", "_star")

    #: Host values whose answer is kept (a client sends the same few); past it the memo starts over,
    #: so values a client invents cannot grow it.
    MEMO_SIZE = 64

    def __init__(self, patterns: Iterable[str], *, origins: bool = False) -> None:
        cleaned = [p.lower().rstrip("/") if origins else p.lower() for p in patterns]
        self._star = "*" in cleaned
        self._exact = frozenset(cleaned)
        self._globs = [
            re.compile(fnmatch.translate(p)) for p in cleaned if any(c in p for c in "*?[")
        ]
        #: A bare host name also matches that host on any port (Host values only).
        self._bare = frozenset() if origins else frozenset(p for p in cleaned if ":" not in p)
        self._seen: BoundedMemo[str, bool] = BoundedMemo(self.MEMO_SIZE)

    def allows_host(self, host: str | None) -> bool:
        if not host:
            return False
        seen = self._seen.get(host)
        if seen is None:
            seen = self._seen.put(host, self._allows_host(host.lower()))
        return seen

    def _allows_host(self, host: str) -> bool:
        if self._star or host in self._exact or any(g.match(host) for g in self._globs):
            return True
        return bool(self._bare) and host.rsplit(":", 1)[0] in self._bare

    def allows_origin(self, origin: str) -> bool:
        origin = origin.lower().rstrip("/")
        return self._star or origin in self._exact or any(g.match(origin) for g in self._globs)


def host_allowed(host: str | None, patterns: Iterable[str]) -> bool:
    """Match a Host header against patterns such as ``localhost:*`` or ``mcp.example.com``."""
    return AllowList(patterns).allows_host(host)


def origin_allowed(origin: str, patterns: Iterable[str]) -> bool:
    """Match an Origin against an allow-list (exact, or with ``*`` wildcards, e.g. port)."""
    return AllowList(patterns, origins=True).allows_origin(origin)


@functools.lru_cache(maxsize=128)
def _always_dropped(
    drop: tuple[str, ...], modern: bool
) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """Hop-by-hop, gateway-owned and the route's own dropped headers (one set per route and era),
    and the names a client header may not pass for (those plus what the edge verifies)."""
    dropped = HOP_BY_HOP | _REQUEST_DROP | {_canonical(d.encode("latin-1")) for d in drop}
    if modern:
        dropped |= _MODERN_DROP
    return dropped, dropped | _VERIFIED


def _canonical(name: bytes) -> bytes:
    """A header name as CGI/WSGI-style servers read it: case-insensitive, ``_`` the same as ``-``."""
    return name.strip(b" \t").lower().replace(b"_", b"-")


def _alias(name: bytes, guarded: frozenset[bytes]) -> bool:
    """Whether a client header name is another spelling of a guarded one (``X_Forwarded_User``,
    ``Mcp_Session_Id``): many upstream frameworks map ``_`` and ``-`` to one variable, so it could
    stand in for the header the gateway checked, dropped or sets. ASGI names arrive lowercased,
    and the HTTP parser refuses blanks around a name (400), so ``_`` is the one spelling left."""
    return b"_" in name and _canonical(name) in guarded


def _nominated(connection: list[str]) -> set[bytes]:
    """Headers ``Connection`` names as hop-by-hop, minus those that are end-to-end by nature."""
    out = set()
    for value in connection:
        for token in value.split(","):
            name = token.strip().lower().encode("latin-1")
            if name and not name.startswith(b"mcp-") and name not in _END_TO_END:
                out.add(name)
    return out


def upstream_request_headers(
    headers: RawHeaders,
    *,
    upstream_host: str | None,
    drop: Iterable[str] = (),
    extra: Iterable[tuple[str, str]] = (),
    modern: bool = False,
) -> list[tuple[bytes, bytes]]:
    """Headers for the upstream request: hop-by-hop and gateway-owned headers removed (also under
    another spelling, see :func:`_alias`), on 2026-07-28 requests the session headers too,
    ``Host`` rewritten to the upstream's (left out when ``upstream_host`` is None), everything
    else (``Mcp-*`` included) unchanged. A ``Connection`` nomination removes a header only if it
    is not end-to-end (``Mcp-*``, ``Content-Type``, ``Accept``, trace context: see
    ``_END_TO_END``)."""
    dropped, guarded = _always_dropped(tuple(drop), modern)
    connection = values(headers, "connection")
    if connection:
        dropped = dropped | _nominated(connection)
    # Optional whitespace around a value is not part of it (RFC 9110 5.5); some HTTP parsers
    # leave trailing blanks in, which the upstream client would refuse to send.
    out = [(k, v.strip(b" \t")) for k, v in headers if k not in dropped]
    if b"_" in b"".join([k for k, _ in out]):  # one scan; names with "_" are rare
        out = [(k, v) for k, v in out if not _alias(k, guarded)]
    if upstream_host is not None:
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
