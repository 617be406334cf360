"""An upstream's protected-resource metadata (RFC 9728), as the MCP authorization spec has a
client find the authorization server of a server it calls: ``upstream_auth.oauth`` without an
``issuer`` takes the first of the document's ``authorization_servers`` (and its ``resource``,
when none is configured), read once, bounded in size and time.

The well-known URLs are tried in the spec's order: the path-suffixed
``/.well-known/oauth-protected-resource/<path>``, then the root one. The document's
``resource`` must be the upstream's own URL (a server naming another resource is not trusted:
RFC 9728 §3.3), and the authorization server an https URL (http only for loopback hosts).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from mcp_edge.identity.asclient import MISSING_EXTRA, ASUnavailable, media_type, printable
from mcp_edge.identity.config import check_named_url

WELL_KNOWN = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    resource: str
    authorization_server: str
    source: str


def metadata_urls(upstream: str) -> list[str]:
    parts = urlsplit(upstream)
    path = parts.path.rstrip("/")
    urls = [urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN + path, "", ""))] if path else []
    urls.append(urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN, "", "")))
    return urls


def _same_resource(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (
        pa.scheme.lower() == pb.scheme.lower()
        and (pa.hostname or "").lower() == (pb.hostname or "").lower()
        and pa.port == pb.port
        and pa.path.rstrip("/") == pb.path.rstrip("/")
    )


def parse(doc: Any, *, upstream: str, source: str, allow_http: bool) -> ProtectedResource:
    if not isinstance(doc, dict):
        raise ASUnavailable("the protected-resource metadata is not a JSON object")
    resource = doc.get("resource")
    if not isinstance(resource, str) or not _same_resource(resource, upstream):
        raise ASUnavailable(
            f"the protected-resource metadata names resource {printable(resource, 120)!r}, not "
            "the upstream's URL"
        )
    servers = doc.get("authorization_servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
        raise ASUnavailable("the protected-resource metadata names no authorization server")
    try:
        check_named_url(
            servers[0], "authorization_servers[0]", named_by=upstream, allow_http=allow_http
        )
    except ValueError as exc:
        raise ASUnavailable(f"the protected-resource metadata's {exc}") from None
    return ProtectedResource(resource, servers[0], source)


async def discover(
    upstream: str, *, timeout: float, max_bytes: int, allow_http: bool
) -> ProtectedResource:
    """The upstream's metadata (ASUnavailable when none of its well-known URLs gives one)."""
    try:
        import httpx2
    except ImportError:  # pragma: no cover - the extra is in the dev group
        raise ASUnavailable(MISSING_EXTRA) from None
    problems = []
    async with httpx2.AsyncClient(
        timeout=httpx2.Timeout(timeout), follow_redirects=False, trust_env=False
    ) as http:
        for url in metadata_urls(upstream):
            try:
                async with asyncio.timeout(timeout):
                    async with http.stream("GET", url, headers={"Accept": "application/json"}) as r:
                        chunks, size = [], 0
                        async for chunk in r.aiter_raw():
                            size += len(chunk)
                            if size > max_bytes:
                                raise ASUnavailable(f"larger than {max_bytes} bytes", "too_large")
                            chunks.append(chunk)
                        if r.status_code != 200:
                            raise ASUnavailable(f"HTTP {r.status_code}", "status")
                        if media_type(r.headers.get("content-type")) != "application/json":
                            raise ASUnavailable("not application/json")
                try:
                    doc = orjson.loads(b"".join(chunks))
                except orjson.JSONDecodeError:
                    raise ASUnavailable("not JSON") from None
                return parse(doc, upstream=upstream, source=url, allow_http=allow_http)
            except ASUnavailable as exc:
                problems.append(f"{url}: {exc.detail}")
            except (TimeoutError, httpx2.HTTPError, OSError) as exc:
                problems.append(f"{url}: {type(exc).__name__}")
    raise ASUnavailable("no protected-resource metadata (" + "; ".join(problems) + ")")
