"""Configuration models, their messages, the example files, and the builders."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from starlette.datastructures import Headers

from mcp_edge.auth.base import AnonymousAuthenticator, AuthError
from mcp_edge.auth.challenge import parse_bearer_challenge
from mcp_edge.auth.config import (
    AuthConfig,
    AuthSetupError,
    JwtConfig,
    RouteAuthConfig,
    TrustedHeaderConfig,
)
from mcp_edge.auth.factory import (
    build_authenticator,
    build_route_authenticator,
    build_route_upstream_credentials,
    route_audience,
)
from mcp_edge.auth.jwks import JwksKeySource
from mcp_edge.auth.jwt_bearer import JwtBearerAuthenticator
from mcp_edge.auth.trusted_header import TrustedHeaderAuthenticator
from mcp_edge.server.config import ConfigError, GatewayConfig, load_config
from tests.auth.support import ISSUER, JwksServer, SigningKey, claims

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def jwt_section(**extra) -> dict:
    return {"issuer": ISSUER, "jwks_url": "https://as.example.test/jwks", **extra}


def error_text(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value)


# ---------------------------------------------------------------------- validation messages


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"issuer": ISSUER}, "exactly one key source"),
        (jwt_section(public_keys=[{"pem": "x"}]), "exactly one key source"),
        (jwt_section(algorithms=["none"]), "'none' is never accepted"),
        (jwt_section(algorithms=["RS256", "None"]), "'none' is never accepted"),
        (jwt_section(algorithms=[]), "at least one algorithm"),
        (jwt_section(algorithms=["RS257"]), "unknown algorithm"),
        (jwt_section(algorithms=["RS256", "HS256"]), "need a shared secret"),
        (
            {"issuer": ISSUER, "shared_secret_env": "S", "algorithms": ["HS256", "RS256"]},
            "may only be HS256",
        ),
        (
            {
                "issuer": ISSUER,
                "shared_secret_env": "S",
                "shared_secret_file": "f",
                "algorithms": ["HS256"],
            },
            "only one",
        ),
        (jwt_section(jwks_url="http://as.example.test/jwks"), "must use https"),
        (jwt_section(jwks_url="/jwks"), "absolute https URL"),
        (jwt_section(leeway_seconds=-1), "greater than or equal"),
        (jwt_section(unknown=1), "Extra inputs are not permitted"),
        (
            {"issuer": ISSUER, "public_keys": [{"pem": "a", "file": "b"}]},
            "exactly one of pem or file",
        ),
        (
            {"issuer": ISSUER, "public_keys": [{"pem": "a", "algorithm": "HS256"}]},
            "algorithm must be one of",
        ),
        (
            {"issuer": ISSUER, "public_keys": [{"pem": "a", "algorithm": "PS256"}]},
            "not in algorithms",
        ),
        (
            {"issuer": ISSUER, "public_keys": [{"pem": "a", "kid": "k"}, {"pem": "b", "kid": "k"}]},
            "unique",
        ),
    ],
)
def test_jwt_validation_messages(section, message):
    with pytest.raises(ValidationError) as info:
        JwtConfig.model_validate(section)
    assert message in error_text(info)


def test_http_jwks_allowed_for_loopback_or_explicitly():
    JwtConfig.model_validate(jwt_section(jwks_url="http://127.0.0.1:8080/jwks"))
    JwtConfig.model_validate(
        jwt_section(jwks_url="http://keycloak:8080/jwks", allow_http_jwks=True)
    )


def test_single_string_audience():
    assert JwtConfig.model_validate(jwt_section(audience="api://mcp")).audience == ["api://mcp"]
    assert RouteAuthConfig.model_validate({"audience": "x"}).audience == ["x"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"mode": "jwt"}, "mode jwt needs a 'jwt' section"),
        ({"mode": "trusted_header"}, "needs a 'trusted_header' section"),
        (
            {"mode": "anonymous", "jwt": jwt_section()},
            "a 'jwt' section is set but mode is 'anonymous'",
        ),
        ({"mode": "oauth"}, "Input should be"),
        ({"mode": "anonymous", "scopes_supported": ["offline_access"]}, "should not be advertised"),
        ({"mode": "anonymous", "scopes_supported": ["a b"]}, "not a valid scope token"),
        (
            {"mode": "anonymous", "authorization_servers": ["http://as.example.com"]},
            "must use https",
        ),
    ],
)
def test_auth_validation_messages(doc, message):
    with pytest.raises(ValidationError) as info:
        AuthConfig.model_validate(doc)
    assert message in error_text(info)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({}, "set trusted_cidrs, or secret_header"),
        ({"trusted_cidrs": ["0.0.0.0/0"]}, "trusts every address"),
        ({"trusted_cidrs": ["::/0"]}, "trusts every address"),
        ({"trusted_cidrs": ["not-a-net"]}, "not an IP network"),
        ({"secret_header": "X-S"}, "secret_header needs secret_env or secret_file"),
        ({"secret_env": "S"}, "secret_header needs"),
        ({"trusted_cidrs": ["127.0.0.1/32"], "require_both": True}, "require_both needs both"),
        (
            {"trusted_cidrs": ["127.0.0.1/32"], "header": "Authorization"},
            "cannot be used as a trusted header",
        ),
        ({"trusted_cidrs": ["127.0.0.1/32"], "header": "Host"}, "managed by the gateway"),
        (
            {"trusted_cidrs": ["127.0.0.1/32"], "header": "X-A", "scopes_header": "x-a"},
            "must be different",
        ),
    ],
)
def test_trusted_header_validation_messages(section, message):
    with pytest.raises(ValidationError) as info:
        TrustedHeaderConfig.model_validate(section)
    assert message in error_text(info)


def test_trusted_cidrs_accepts_hosts_and_single_string():
    cfg = TrustedHeaderConfig.model_validate({"trusted_cidrs": "10.0.0.1"})
    assert [str(n) for n in cfg.trusted_cidrs] == ["10.0.0.1/32"]


# ---------------------------------------------------------------------- example files


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("auth-jwt.yaml", "jwt"),
        ("auth-trusted-header.yaml", "trusted_header"),
        ("auth-anonymous.yaml", "anonymous"),
    ],
)
def test_example_files_validate(name, mode):
    config = load_config(str(CONFIG_DIR / name), env={})
    assert config.auth.mode == mode
    for route in config.routes:
        authenticator = build_route_authenticator(config, route)
        build_route_upstream_credentials(config, route, authenticator)


def test_example_jwt_audience_is_the_public_route_url():
    config = load_config(str(CONFIG_DIR / "auth-jwt.yaml"), env={})
    assert route_audience(config, config.routes[0]) == ["https://mcp.example.com/mcp"]


# ---------------------------------------------------------------------- builders


def gateway_config(
    auth: dict, routes: list[dict] | None = None, public_url: str = "https://gw.example.test"
) -> GatewayConfig:
    return GatewayConfig.model_validate(
        {
            "gateway": {"public_url": public_url},
            "auth": auth,
            "routes": routes
            or [{"name": "default", "path": "/mcp", "upstream": "http://127.0.0.1:9/mcp"}],
        }
    )


def test_mode_none_refuses_to_build():
    config = gateway_config({})
    with pytest.raises(ConfigError, match="no authentication configured"):
        build_route_authenticator(config, config.routes[0])


def test_anonymous():
    config = gateway_config({"mode": "anonymous"})
    assert isinstance(build_route_authenticator(config, config.routes[0]), AnonymousAuthenticator)


def test_cross_checks_name_the_route():
    config = gateway_config(
        {"mode": "anonymous"},
        [
            {
                "name": "tools",
                "path": "/mcp",
                "upstream": "http://127.0.0.1:9/mcp",
                "auth": {"required_scopes": ["x"]},
            }
        ],
    )
    with pytest.raises(ConfigError, match=r"routes\[tools\].*anonymous"):
        build_route_authenticator(config, config.routes[0])
    config = gateway_config(
        {"mode": "trusted_header", "trusted_header": {"trusted_cidrs": ["127.0.0.1/32"]}},
        [
            {
                "name": "t",
                "path": "/mcp",
                "upstream": "http://127.0.0.1:9/mcp",
                "upstream_auth": {"forward_client_token": True},
            }
        ],
    )
    with pytest.raises(ConfigError, match="forward_client_token needs auth.mode jwt"):
        build_route_authenticator(config, config.routes[0])


async def test_jwt_routes_share_one_key_source_and_get_their_own_audience(
    jwks_server: JwksServer, rsa_key: SigningKey
):
    jwks_server.state.keys = [rsa_key.jwk()]
    config = gateway_config(
        {"mode": "jwt", "jwt": {"issuer": ISSUER, "jwks_url": jwks_server.url}},
        [
            {"name": "a", "path": "/a/mcp", "upstream": "http://127.0.0.1:9/mcp"},
            {
                "name": "b",
                "path": "/b/mcp",
                "upstream": "http://127.0.0.1:9/mcp",
                "auth": {"required_scopes": ["b:use"]},
            },
        ],
    )
    try:
        a = build_route_authenticator(config, config.routes[0])
        b = build_route_authenticator(config, config.routes[1])
        assert isinstance(a, JwtBearerAuthenticator) and isinstance(b, JwtBearerAuthenticator)
        assert a._keys is b._keys and isinstance(a._keys, JwksKeySource)

        token_a = rsa_key.sign(claims(aud="https://gw.example.test/a/mcp"))
        headers = Headers(raw=[(b"authorization", f"Bearer {token_a}".encode())])
        assert (await a.authenticate(headers, None)).display == "alice"
        with pytest.raises(AuthError) as info:  # a token for route a is not valid on route b
            await b.authenticate(headers, None)
        assert info.value.status == 401
        params = parse_bearer_challenge(info.value.www_authenticate)
        assert (
            params["resource_metadata"]
            == "https://gw.example.test/.well-known/oauth-protected-resource/b/mcp"
        )
        assert params["scope"] == "b:use"
        assert jwks_server.state.hits == 1
    finally:
        await config.auth.aclose()


def test_static_keys_and_shared_secret(tmp_path, rsa_key: SigningKey):
    pem = tmp_path / "key.pem"
    pem.write_bytes(rsa_key.public_pem())
    auth = AuthConfig.model_validate(
        {"mode": "jwt", "jwt": {"issuer": ISSUER, "public_keys": [{"file": str(pem), "kid": "k"}]}}
    )
    assert isinstance(build_authenticator(auth, audience=["x"]), JwtBearerAuthenticator)

    missing = AuthConfig.model_validate(
        {
            "mode": "jwt",
            "jwt": {"issuer": ISSUER, "public_keys": [{"file": str(tmp_path / "nope.pem")}]},
        }
    )
    with pytest.raises(AuthSetupError, match="cannot read"):
        build_authenticator(missing, audience=["x"])

    private = tmp_path / "private.pem"
    from cryptography.hazmat.primitives import serialization

    private.write_bytes(
        rsa_key.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with_private = AuthConfig.model_validate(
        {"mode": "jwt", "jwt": {"issuer": ISSUER, "public_keys": [{"file": str(private)}]}}
    )
    with pytest.raises(AuthSetupError, match="is a private key"):
        build_authenticator(with_private, audience=["x"])

    hs = AuthConfig.model_validate(
        {
            "mode": "jwt",
            "jwt": {"issuer": ISSUER, "shared_secret_env": "S", "algorithms": ["HS256"]},
        }
    )
    with pytest.raises(AuthSetupError, match="not set"):
        build_authenticator(hs, audience=["x"], environ={})
    with pytest.raises(AuthSetupError, match="at least 32 bytes"):
        build_authenticator(hs, audience=["x"], environ={"S": "short"})


async def test_shared_secret_mode_end_to_end():
    import jwt as pyjwt

    secret = "0123456789abcdef0123456789abcdef"
    auth = AuthConfig.model_validate(
        {
            "mode": "jwt",
            "jwt": {"issuer": ISSUER, "shared_secret_env": "S", "algorithms": ["HS256"]},
        }
    )
    authenticator = build_authenticator(auth, audience=["https://gw/mcp"], environ={"S": secret})
    token = pyjwt.encode(claims(aud="https://gw/mcp"), secret, algorithm="HS256")
    principal = await authenticator.authenticate(
        Headers(raw=[(b"authorization", f"Bearer {token}".encode())]), None
    )
    assert principal.display == "alice"


def test_trusted_header_builder_reads_secret(tmp_path):
    secret = tmp_path / "s"
    secret.write_text("edge-secret\n")
    auth = AuthConfig.model_validate(
        {
            "mode": "trusted_header",
            "trusted_header": {"secret_header": "X-Edge-Secret", "secret_file": str(secret)},
        }
    )
    built = build_authenticator(auth, audience=[])
    assert isinstance(built, TrustedHeaderAuthenticator)
    assert built.consumed_headers == {"x-forwarded-user", "x-edge-secret"}
