"""WWW-Authenticate challenges and RFC 9728 protected resource metadata."""

from __future__ import annotations

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from mcp_edge.auth.challenge import (
    Challenger,
    bearer_challenge,
    parse_bearer_challenge,
    scope_string,
)
from mcp_edge.auth.config import AuthConfig, RouteAuthConfig
from mcp_edge.auth.metadata import (
    WELL_KNOWN,
    canonical_resource_url,
    protected_resource_metadata,
    resource_metadata_url,
)
from mcp_edge.edge.metadata import ProtectedResourceMetadataApp, build_metadata_app, metadata_routes

MD = "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"


# ---------------------------------------------------------------------- challenges


def test_401_without_token():
    value = bearer_challenge(resource_metadata=MD, scope=["files:read"])
    assert value == f'Bearer resource_metadata="{MD}", scope="files:read"'


def test_401_invalid_token():
    value = bearer_challenge(
        resource_metadata=MD, scope=["a", "b"], error="invalid_token", error_description="expired"
    )
    assert (
        value
        == f'Bearer error="invalid_token", scope="a b", resource_metadata="{MD}", error_description="expired"'
    )
    assert parse_bearer_challenge(value) == {
        "error": "invalid_token",
        "scope": "a b",
        "resource_metadata": MD,
        "error_description": "expired",
    }


def test_403_insufficient_scope():
    err = Challenger(resource_metadata=MD).insufficient_scope(["files:read", "files:write"])
    assert err.status == 403
    params = parse_bearer_challenge(err.www_authenticate)
    assert params["error"] == "insufficient_scope"
    assert params["scope"] == "files:read files:write"
    assert params["resource_metadata"] == MD
    assert err.www_authenticate.startswith(
        'Bearer error="insufficient_scope", scope="files:read files:write", '
    )


def test_400_invalid_request():
    err = Challenger(resource_metadata=MD, scope_hint=["x"]).invalid_request("bad")
    assert err.status == 400
    assert parse_bearer_challenge(err.www_authenticate)["error"] == "invalid_request"


def test_offline_access_never_in_challenge():
    assert scope_string(["offline_access", "a", "a", "b"]) == "a b"
    assert "offline_access" not in bearer_challenge(resource_metadata=MD, scope=["offline_access"])


def test_quoting_is_safe():
    value = bearer_challenge(
        error="invalid_token", error_description='say "hi"\r\nSet-Cookie: x=1 \\'
    )
    assert "\r" not in value and "\n" not in value
    assert parse_bearer_challenge(value)["error_description"] == 'say "hi"Set-Cookie: x=1 \\'


def test_bare_challenge_without_metadata():
    assert bearer_challenge() == "Bearer"
    assert Challenger(resource_metadata=None).missing().www_authenticate == "Bearer"


def test_parse_rejects_other_schemes():
    with pytest.raises(ValueError):
        parse_bearer_challenge('Basic realm="x"')


# ---------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    ("public", "path", "resource", "metadata"),
    [
        ("https://MCP.Example.com", "/mcp", "https://mcp.example.com/mcp", MD),
        ("https://mcp.example.com/", "/mcp", "https://mcp.example.com/mcp", MD),
        ("https://mcp.example.com:443", "/mcp", "https://mcp.example.com/mcp", MD),
        (
            "http://localhost:8080",
            "/tools/mcp",
            "http://localhost:8080/tools/mcp",
            "http://localhost:8080/.well-known/oauth-protected-resource/tools/mcp",
        ),
        (
            "https://example.com/gw",
            "/mcp",
            "https://example.com/gw/mcp",
            "https://example.com/.well-known/oauth-protected-resource/gw/mcp",
        ),
        (
            "https://example.com",
            "/",
            "https://example.com",
            "https://example.com/.well-known/oauth-protected-resource",
        ),
    ],
)
def test_resource_and_metadata_urls(public, path, resource, metadata):
    assert canonical_resource_url(public, path) == resource
    assert resource_metadata_url(public, path) == metadata


def test_bad_public_url():
    with pytest.raises(ValueError):
        canonical_resource_url("mcp.example.com", "/mcp")
    with pytest.raises(ValueError):
        canonical_resource_url("https://mcp.example.com/#x", "/mcp")


# ---------------------------------------------------------------------- documents


def test_document_contents():
    doc = protected_resource_metadata(
        resource="https://mcp.example.com/mcp",
        authorization_servers=["https://as.example.com"],
        scopes_supported=["mcp:tools", "offline_access", "mcp:tools"],
    )
    assert doc == {
        "resource": "https://mcp.example.com/mcp",
        "authorization_servers": ["https://as.example.com"],
        "scopes_supported": ["mcp:tools"],
        "bearer_methods_supported": ["header"],
    }
    with pytest.raises(ValueError):
        protected_resource_metadata(resource="https://x/mcp", authorization_servers=[])


class _Route:
    def __init__(self, path: str, scopes: list[str] | None = None) -> None:
        self.name = path.strip("/").replace("/", "-") or "root"
        self.path = path
        self.auth = RouteAuthConfig(required_scopes=scopes or [])


def _jwt_auth(**extra) -> AuthConfig:
    return AuthConfig.model_validate(
        {
            "mode": "jwt",
            "jwt": {"issuer": "https://as.example.com", "jwks_url": "https://as.example.com/jwks"},
            "scopes_supported": ["mcp:read"],
            **extra,
        }
    )


def test_build_metadata_app_documents():
    app = build_metadata_app(
        _jwt_auth(),
        public_url="https://mcp.example.com",
        routes=[_Route("/mcp"), _Route("/admin", ["mcp:admin"])],
    )
    assert app is not None
    assert set(app.paths()) == {WELL_KNOWN, WELL_KNOWN + "/mcp", WELL_KNOWN + "/admin"}


def test_no_metadata_without_authorization_server():
    assert (
        build_metadata_app(
            AuthConfig(mode="anonymous"), public_url="https://x", routes=[_Route("/mcp")]
        )
        is None
    )


async def _client(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://mcp.example.com"
    )


async def test_endpoint_serves_documents():
    app = Starlette(
        routes=metadata_routes(
            build_metadata_app(
                _jwt_auth(),
                public_url="https://mcp.example.com",
                routes=[_Route("/mcp"), _Route("/admin", ["mcp:admin"])],
            )
        )
    )
    async with await _client(app) as client:
        r = await client.get(WELL_KNOWN + "/mcp")
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        assert r.headers["access-control-allow-origin"] == "*"
        assert r.json() == {
            "resource": "https://mcp.example.com/mcp",
            "authorization_servers": ["https://as.example.com"],
            "scopes_supported": ["mcp:read"],
            "bearer_methods_supported": ["header"],
        }
        admin = (await client.get(WELL_KNOWN + "/admin")).json()
        assert admin["resource"] == "https://mcp.example.com/admin"
        assert admin["scopes_supported"] == ["mcp:read", "mcp:admin"]
        # The bare well-known path serves the first route's document.
        assert (await client.get(WELL_KNOWN)).json()["resource"] == "https://mcp.example.com/mcp"
        assert (await client.get(WELL_KNOWN + "/mcp/")).status_code == 200
        assert (await client.get(WELL_KNOWN + "/nope")).status_code == 404
        head = await client.head(WELL_KNOWN + "/mcp")
        assert head.status_code == 200 and head.content == b""
        assert (await client.post(WELL_KNOWN + "/mcp")).status_code == 405
        assert (await client.options(WELL_KNOWN + "/mcp")).status_code == 204


async def test_endpoint_under_a_mount():
    md = ProtectedResourceMetadataApp({"/mcp": {"resource": "r"}}, default={"resource": "d"})
    app = Starlette(routes=[Mount(WELL_KNOWN, app=md)])
    async with await _client(app) as client:
        assert (await client.get(WELL_KNOWN + "/mcp")).json() == {"resource": "r"}


async def test_metadata_routes_from_gateway_config():
    from mcp_edge.server.config import GatewayConfig

    config = GatewayConfig.model_validate(
        {
            "gateway": {"public_url": "https://gw.example.com/base"},
            "auth": {
                "mode": "jwt",
                "authorization_servers": ["https://login.example.com"],
                "jwt": {
                    "issuer": "https://login.example.com",
                    "jwks_url": "https://login.example.com/jwks",
                },
            },
            "routes": [{"name": "a", "path": "/mcp", "upstream": "http://127.0.0.1:9/mcp"}],
        }
    )
    app = Starlette(routes=metadata_routes(config))
    async with await _client(app) as client:
        doc = (await client.get(WELL_KNOWN + "/base/mcp")).json()
        assert doc["resource"] == "https://gw.example.com/base/mcp"
        assert doc["authorization_servers"] == ["https://login.example.com"]
        # Also reachable when a front proxy strips the public path prefix.
        assert (await client.get(WELL_KNOWN + "/mcp")).json() == doc
