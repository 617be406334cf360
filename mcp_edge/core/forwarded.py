"""What the upstream receives for one request, described once.

The HTTP upstream adapter sends exactly this description, and the edge cache keys its entries on
it (``mcp_edge.cache.rules``), so nothing can reach the upstream that the key does not see. Every
part of a :class:`Forwarded` either counts in the cache key or is listed there as left out, with
the reason (``mcp_edge.cache.rules.KEY_PARTS``); a test holds the two lists together.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mcp_edge.core import headers as h

#: Asked of every upstream: answers must be readable by the gateway (it inspects them).
_IDENTITY = (b"accept-encoding", b"identity")


class Forwarded:
    """One upstream request: what the gateway sends, apart from the endpoint it picks.

    - ``method``: the HTTP method;
    - ``query``: the client's query string as the upstream gets it (after the endpoint's path),
      without any ``access_token``; empty when there is none;
    - ``headers``: the request headers as the upstream gets them, after the drops (hop-by-hop,
      the gateway's own, the route's) and the additions (the route's credential and the caller's
      identity, ``Accept-Encoding: identity``); ``Host`` only when built for one endpoint;
    - ``body``: the bytes the upstream gets;
    - ``message``: ``body`` parsed, as the edge read it (every parser reads it the same: the
      edge refuses bodies they could read differently), or None without a body.

    Built by :func:`describe` only; nobody changes it after."""

    __slots__ = ("body", "headers", "message", "method", "query")

    def __init__(
        self,
        method: str,
        query: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        message: Any,
    ) -> None:
        self.method = method
        self.query = query
        self.headers = headers
        self.body = body
        self.message = message

    def url(self, endpoint: str) -> str:
        """The URL of this request at one of the route's endpoints."""
        return f"{endpoint}?{self.query}" if self.query else endpoint


def describe(
    method: str,
    query_string: bytes,
    client_headers: h.RawHeaders,
    body: bytes,
    message: Any,
    drop: Iterable[str] = (),
    extra: Iterable[tuple[str, str]] = (),
    modern: bool = True,
    host: str | None = None,
) -> Forwarded:
    """The upstream request for a client request: its HTTP ``method``, raw ``query_string`` and
    headers, the ``body`` the upstream gets and its parse ``message``. ``drop``, ``extra``: the
    route's dropped and added headers (:func:`mcp_edge.core.headers.upstream_request_headers`);
    ``host``: the chosen endpoint's ``Host`` (None: left out, as for the cache key)."""
    headers = h.upstream_request_headers(
        client_headers, upstream_host=host, drop=drop, extra=extra, modern=modern
    )
    headers.append(_IDENTITY)
    return Forwarded(method, forwarded_query(query_string), headers, body, message)


def forwarded_query(query: bytes) -> str:
    """The query string minus any ``access_token`` (tokens never travel in URLs, and a client's
    token is never passed upstream by accident)."""
    if not query:
        return ""
    text = query.decode("latin-1")
    if "access_token" not in text:
        return text
    return "&".join(p for p in text.split("&") if p.split("=", 1)[0] != "access_token")
