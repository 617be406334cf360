"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for the gateway's routes.

Each route is its own protected resource, named by the gateway's **public** URL plus the route
path (clients compare that with the URL they connected to, so an upstream's URL must never
appear here). The document is served at the path-suffixed well-known URI
``/.well-known/oauth-protected-resource/<route path>`` and, for the first route, also at the bare
``/.well-known/oauth-protected-resource``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from gateway.auth.challenge import UNADVERTISED_SCOPES

WELL_KNOWN = "/.well-known/oauth-protected-resource"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _split_public_url(public_url: str) -> tuple[str, str, str]:
    """(scheme, netloc, path prefix) of the public URL in canonical form."""
    parts = urlsplit(public_url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"public URL must be an absolute http(s) URL, got {public_url!r}")
    if parts.query or parts.fragment:
        raise ValueError("public URL must not have a query or fragment")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if parts.port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{parts.port}"
    return scheme, netloc, parts.path.rstrip("/")


def _join_path(prefix: str, route_path: str) -> str:
    route_path = route_path if route_path.startswith("/") else "/" + route_path
    return (prefix + route_path).rstrip("/")


def canonical_resource_url(public_url: str, route_path: str) -> str:
    """The route's canonical URI (RFC 8707 / MCP): lowercase scheme and host, no default port,
    no trailing slash, no fragment. E.g. ``https://mcp.example.com/mcp``."""
    scheme, netloc, prefix = _split_public_url(public_url)
    return urlunsplit((scheme, netloc, _join_path(prefix, route_path), "", ""))


def resource_metadata_path(public_url: str, route_path: str) -> str:
    """Path of the route's metadata document: the well-known prefix goes between the host and
    the resource's path (RFC 9728 §3.1)."""
    _, _, prefix = _split_public_url(public_url)
    return WELL_KNOWN + _join_path(prefix, route_path)


def resource_metadata_url(public_url: str, route_path: str) -> str:
    """Absolute URL of the route's metadata document (the ``resource_metadata`` challenge value)."""
    scheme, netloc, _ = _split_public_url(public_url)
    return urlunsplit((scheme, netloc, resource_metadata_path(public_url, route_path), "", ""))


def protected_resource_metadata(
    *,
    resource: str,
    authorization_servers: Sequence[str],
    scopes_supported: Iterable[str] = (),
    resource_name: str | None = None,
    resource_documentation: str | None = None,
) -> dict[str, Any]:
    """The RFC 9728 document for one resource. MCP requires at least one authorization server."""
    if not authorization_servers:
        raise ValueError("protected resource metadata needs at least one authorization server")
    doc: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": list(dict.fromkeys(authorization_servers)),
    }
    scopes = [s for s in dict.fromkeys(scopes_supported) if s and s not in UNADVERTISED_SCOPES]
    if scopes:
        doc["scopes_supported"] = scopes
    doc["bearer_methods_supported"] = ["header"]
    if resource_name:
        doc["resource_name"] = resource_name
    if resource_documentation:
        doc["resource_documentation"] = resource_documentation
    return doc


class ProtectedResourceMetadataApp:
    """ASGI app serving metadata documents under ``/.well-known/oauth-protected-resource``.

    ``documents`` maps the resource path that follows the well-known prefix (``"/mcp"``) to its
    document; ``default`` is served at the bare well-known path. Mount it for both
    ``/.well-known/oauth-protected-resource`` and everything below it (see :func:`metadata_routes`).
    Unknown paths get 404; methods other than GET, HEAD and OPTIONS get 405. The documents are
    public, so any origin may read them (browser-based clients discover through them).
    """

    def __init__(
        self,
        documents: Mapping[str, Mapping[str, Any]],
        *,
        default: Mapping[str, Any] | None = None,
        max_age: int = 300,
    ) -> None:
        self._bodies = {
            path.rstrip("/"): json.dumps(doc, separators=(",", ":")).encode()
            for path, doc in documents.items()
        }
        if default is not None:
            self._bodies[""] = json.dumps(default, separators=(",", ":")).encode()
        self._max_age = max_age

    def paths(self) -> list[str]:
        """The request paths answered (for logging and tests)."""
        return [WELL_KNOWN + suffix for suffix in self._bodies]

    def _suffix(self, scope: Scope) -> str | None:
        """The part of the request path after the well-known prefix ("" for the bare prefix)."""
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        # Behind an application root path (uvicorn --root-path) the path starts with it. Under a
        # Starlette Mount the mount prefix is appended to root_path but the path stays whole.
        if root and not path.startswith(WELL_KNOWN) and path.startswith(root):
            path = path[len(root) :]
        if not path.startswith(WELL_KNOWN):
            return None
        suffix = path[len(WELL_KNOWN) :]
        if suffix and not suffix.startswith("/"):
            return None  # e.g. /.well-known/oauth-protected-resourcex
        return suffix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method = scope["method"]
        suffix = self._suffix(scope)
        body = self._bodies.get(suffix) if suffix is not None else None
        cors = [(b"access-control-allow-origin", b"*")]
        if method == "OPTIONS":
            headers = cors + [
                (b"access-control-allow-methods", b"GET, HEAD, OPTIONS"),
                (b"access-control-allow-headers", b"mcp-protocol-version"),
                (b"access-control-max-age", b"86400"),
                (b"content-length", b"0"),
            ]
            await _respond(send, 204, headers, b"")
            return
        if method not in ("GET", "HEAD"):
            headers = cors + [(b"allow", b"GET, HEAD, OPTIONS"), (b"content-length", b"0")]
            await _respond(send, 405, headers, b"")
            return
        if body is None:
            message = b'{"error":"not_found"}'
            headers = cors + [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(message)).encode()),
            ]
            await _respond(send, 404, headers, message if method == "GET" else b"")
            return
        headers = cors + [
            (b"content-type", b"application/json"),
            (b"cache-control", f"public, max-age={self._max_age}".encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await _respond(send, 200, headers, body if method == "GET" else b"")


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_metadata_app(
    auth: Any, *, public_url: str, routes: Sequence[Any]
) -> ProtectedResourceMetadataApp | None:
    """The metadata app for the configured routes, or None when nothing is published (no
    authorization server: anonymous mode, or trusted-header mode without one).

    ``auth`` is an :class:`gateway.auth.config.AuthConfig`; ``routes`` have ``path`` and ``auth``
    (a RouteAuthConfig). The first route's document is also served at the bare well-known path.
    """
    if not routes or not auth.publishes_metadata():
        return None
    servers = auth.effective_authorization_servers()
    documents: dict[str, dict[str, Any]] = {}
    _, _, prefix = _split_public_url(public_url)
    first: dict[str, Any] | None = None
    for route in routes:
        route_auth = getattr(route, "auth", None)
        doc = protected_resource_metadata(
            resource=canonical_resource_url(public_url, route.path),
            authorization_servers=servers,
            scopes_supported=[
                *auth.scopes_supported,
                *(route_auth.required_scopes if route_auth else ()),
            ],
            resource_name=auth.resource_name,
            resource_documentation=auth.resource_documentation,
        )
        documents[_join_path(prefix, route.path)] = doc
        first = first or doc
    if prefix:
        # A front proxy that strips the public path prefix may pass the bare route path on.
        for route in routes:
            documents.setdefault(
                _join_path("", route.path), documents[_join_path(prefix, route.path)]
            )
    return ProtectedResourceMetadataApp(documents, default=first)


def metadata_routes(source: Any) -> list[Route]:
    """Starlette routes serving protected resource metadata: the bare well-known path and
    everything below it.

    ``source`` is a :class:`ProtectedResourceMetadataApp`, or the gateway configuration (with
    ``auth``, ``routes`` and ``public_base()``), from which the app is built. Returns ``[]`` when
    nothing is published.
    """
    if isinstance(source, ProtectedResourceMetadataApp):
        app: ProtectedResourceMetadataApp | None = source
    else:
        app = build_metadata_app(source.auth, public_url=source.public_base(), routes=source.routes)
    if app is None:
        return []
    # An ASGI app as endpoint: Starlette hands it every method; the app answers 405 itself.
    return [
        Route(WELL_KNOWN, app, name="oauth-protected-resource"),
        Route(WELL_KNOWN + "/{resource:path}", app, name="oauth-protected-resource-path"),
    ]
