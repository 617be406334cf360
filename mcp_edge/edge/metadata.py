"""The OAuth 2.0 Protected Resource Metadata endpoints (RFC 9728): the documents
(mcp_edge.auth.metadata) served under ``/.well-known/oauth-protected-resource``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.routing import Route

from mcp_edge.auth.metadata import (
    WELL_KNOWN,
    canonical_resource_url,
    join_path,
    protected_resource_metadata,
    split_public_url,
)
from mcp_edge.edge.asgi import Receive, Scope, Send, send_body, start_response


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
    await start_response(send, status, headers)
    await send_body(send, body)


def build_metadata_app(
    auth: Any, *, public_url: str, routes: Sequence[Any]
) -> ProtectedResourceMetadataApp | None:
    """The metadata app for the configured routes, or None when nothing is published (no
    authorization server: anonymous mode, or trusted-header mode without one).

    ``auth`` is an :class:`mcp_edge.auth.config.AuthConfig`; ``routes`` have ``path`` and ``auth``
    (a RouteAuthConfig). The first route's document is also served at the bare well-known path.
    """
    if not routes or not auth.publishes_metadata():
        return None
    servers = auth.effective_authorization_servers()
    documents: dict[str, dict[str, Any]] = {}
    _, _, prefix = split_public_url(public_url)
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
        documents[join_path(prefix, route.path)] = doc
        first = first or doc
    if prefix:
        # A front proxy that strips the public path prefix may pass the bare route path on.
        for route in routes:
            documents.setdefault(
                join_path("", route.path), documents[join_path(prefix, route.path)]
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
