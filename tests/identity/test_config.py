"""``upstream_auth.token_exchange`` / ``oauth``: validated at start with clear messages."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from mcp_edge.core.seal import KeyRing, generate_key, open_blob, parse_key_spec, seal_blob
from mcp_edge.identity.config import UpstreamAuthConfig
from mcp_edge.server.config import GatewayConfig

CLIENT = {"client_id": "mcp-edge", "secret_env": "EXCHANGE_SECRET"}
EXCHANGE = {"issuer": "https://as.example", "client": CLIENT, "audience": "https://up.example"}


def upstream_auth(**section: Any) -> UpstreamAuthConfig:
    return UpstreamAuthConfig.model_validate(section)


def error_of(**section: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        upstream_auth(**section)
    return str(caught.value)


def test_a_token_exchange_section():
    cfg = upstream_auth(token_exchange={**EXCHANGE, "scope": "tickets:read"})
    te = cfg.token_exchange
    assert te is not None and te.audience == ["https://up.example"] and te.scope == ["tickets:read"]
    assert cfg.needs_client_token() and cfg.identity is te


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"forward_client_token": True}, "exclude each other"),
        ({"value_env": "X"}, "exclude each other"),
        ({"oauth": {"issuer": "https://as.example", "client": CLIENT}}, "exclude each other"),
    ],
)
def test_one_credential_in_authorization(section, message):
    assert message in error_of(token_exchange=EXCHANGE, **section)


def test_a_static_credential_in_another_header_goes_along():
    cfg = upstream_auth(token_exchange=EXCHANGE, header="X-Api-Key", value_env="KEY")
    assert cfg.token_exchange is not None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"audience": [], "resource": []}, "give audience and/or resource"),
        ({"issuer": None}, "give issuer"),
        ({"issuer": "http://as.example"}, "must use https"),
        ({"issuer": "https://user:pw@as.example"}, "must not hold credentials"),
        ({"token_endpoint": "https://as.example/token#x"}, "fragment"),
        ({"resource": ["not a uri"]}, "absolute URI"),
        ({"scope": ["two words"]}, "not a valid scope token"),
        (
            {"requested_token_type": "urn:ietf:params:oauth:token-type:refresh_token"},
            "must be one of",
        ),
        ({"client": {"client_id": "c"}}, "exactly one of secret_env or secret_file"),
        (
            {"client": {"client_id": "c", "method": "private_key_jwt", "secret_env": "S"}},
            "private_key_env or private_key_file",
        ),
        (
            {
                "client": {
                    "client_id": "c",
                    "method": "private_key_jwt",
                    "private_key_file": "k",
                    "algorithm": "HS256",
                }
            },
            "algorithm must be one of",
        ),
        ({"actor_scope": ["a"]}, "actor_scope needs actor"),
        ({"unknown": 1}, "Extra inputs are not permitted"),
    ],
)
def test_mistakes_are_named(change, message):
    assert message in error_of(token_exchange={**EXCHANGE, **change})


def test_loopback_http_is_allowed_and_allow_http_opens_the_rest():
    upstream_auth(token_exchange={**EXCHANGE, "issuer": "http://127.0.0.1:9000"})
    upstream_auth(token_exchange={**EXCHANGE, "issuer": "http://as.svc", "allow_http": True})


def route(**upstream: Any) -> dict[str, Any]:
    return {"name": "r", "upstream": "http://127.0.0.1:1/mcp", "era": "modern", **upstream}


def gateway(**route_keys: Any) -> GatewayConfig:
    return GatewayConfig.model_validate({"routes": [route(**route_keys)]})


def test_on_a_route_and_on_a_member():
    config = gateway(upstream_auth={"token_exchange": EXCHANGE})
    assert config.routes[0].upstream_auth.token_exchange is not None
    assert config.routes[0].forwards_client_token()  # the edge keeps the subject token
    fed = GatewayConfig.model_validate(
        {
            "routes": [
                {
                    "name": "f",
                    "members": [
                        {
                            "name": "a",
                            "upstream": "http://127.0.0.1:1/mcp",
                            "era": "legacy",
                            "upstream_auth": {"token_exchange": EXCHANGE},
                        },
                        {"name": "b", "upstream": "http://127.0.0.1:2/mcp"},
                    ],
                }
            ]
        }
    )
    assert fed.routes[0].members is not None
    assert fed.routes[0].members[0].upstream_auth.token_exchange is not None


def test_era_auto_and_stdio_are_refused():
    with pytest.raises(ValidationError, match="set era: modern or legacy"):
        GatewayConfig.model_validate(
            {"routes": [{**route(upstream_auth={"token_exchange": EXCHANGE}), "era": "auto"}]}
        )
    with pytest.raises(ValidationError, match="no HTTP credential"):
        GatewayConfig.model_validate(
            {
                "routes": [
                    {
                        "name": "s",
                        "upstream": {"command": ["x"]},
                        "era": "legacy",
                        "upstream_auth": {"token_exchange": EXCHANGE},
                    }
                ]
            }
        )


def test_a_sealed_blob_opens_only_with_its_binding():
    keys = KeyRing([parse_key_spec(generate_key())])
    sealed = seal_blob(keys, "mcpev1", b"payload", bind=b"grant:{p}:e1")
    assert open_blob(keys, "mcpev1", sealed, bind=b"grant:{p}:e1") == b"payload"
    assert open_blob(keys, "mcpev1", sealed, bind=b"grant:{p}:e2") is None
    assert open_blob(keys, "mcpev1", sealed) is None
    assert open_blob(keys, "mcpec1", sealed, bind=b"grant:{p}:e1") is None
