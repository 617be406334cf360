"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for the gateway's routes.

Each route is its own protected resource, named by the gateway's **public** URL plus the route
path (clients compare that with the URL they connected to, so an upstream's URL must never
appear here). The endpoints serving them are mcp_edge.edge.metadata. The document is served at the path-suffixed well-known URI
``/.well-known/oauth-protected-resource/<route path>`` and, for the first route, also at the bare
``/.well-known/oauth-protected-resource``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcp_edge.auth.challenge import UNADVERTISED_SCOPES

WELL_KNOWN = "/.well-known/oauth-protected-resource"

_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_public_url(public_url: str) -> tuple[str, str, str]:
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


def join_path(prefix: str, route_path: str) -> str:
    route_path = route_path if route_path.startswith("/") else "/" + route_path
    return (prefix + route_path).rstrip("/")


def canonical_resource_url(public_url: str, route_path: str) -> str:
    """The route's canonical URI (RFC 8707 / MCP): lowercase scheme and host, no default port,
    no trailing slash, no fragment. E.g. ``https://mcp.example.com/mcp``."""
    scheme, netloc, prefix = split_public_url(public_url)
    return urlunsplit((scheme, netloc, join_path(prefix, route_path), "", ""))


def resource_metadata_path(public_url: str, route_path: str) -> str:
    """Path of the route's metadata document: the well-known prefix goes between the host and
    the resource's path (RFC 9728 §3.1)."""
    _, _, prefix = split_public_url(public_url)
    return WELL_KNOWN + join_path(prefix, route_path)


def resource_metadata_url(public_url: str, route_path: str) -> str:
    """Absolute URL of the route's metadata document (the ``resource_metadata`` challenge value)."""
    scheme, netloc, _ = split_public_url(public_url)
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
