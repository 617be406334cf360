"""Upstream credentials and identity headers."""

from __future__ import annotations

import pytest
from starlette.datastructures import Headers

from mcp_edge.auth.base import ANONYMOUS, Principal, principal_id
from mcp_edge.auth.config import AuthSetupError, UpstreamCredentialConfig
from mcp_edge.auth.factory import build_upstream_credentials
from mcp_edge.auth.upstream import (
    UpstreamCredentials,
    client_bearer_token,
    header_safe,
    read_secret,
)

ALICE = Principal(
    id=principal_id("jwt-sub", "https://as.example", "alice"),
    scopes=frozenset({"x"}),
    display="alice",
)
CLIENT_HEADERS = [
    (b"authorization", b"Bearer client-token"),
    (b"x-mcp-principal", b"admin"),  # spoofing attempt
    (b"x-api-key", b"client-supplied"),
    (b"x-forwarded-user", b"mallory"),
    (b"mcp-protocol-version", b"2026-07-28"),
    (b"content-type", b"application/json"),
]


def build(cfg: dict, *, consumed=("x-forwarded-user",), environ=None) -> UpstreamCredentials:
    return build_upstream_credentials(
        UpstreamCredentialConfig.model_validate(cfg),
        consumed_headers=consumed,
        environ=environ or {},
    )


def test_default_sends_nothing_and_drops_authorization():
    creds = build({})
    plan = creds.plan(ALICE, "client-token")
    assert plan.extra == ()
    assert {"authorization", "proxy-authorization", "x-forwarded-user"} <= plan.drop
    out = dict(plan.apply(CLIENT_HEADERS))
    assert b"authorization" not in out
    assert b"x-forwarded-user" not in out
    assert out[b"mcp-protocol-version"] == b"2026-07-28"


def test_static_bearer_from_env():
    creds = build({"value_env": "UPSTREAM_TOKEN"}, environ={"UPSTREAM_TOKEN": "svc-token-123"})
    assert creds.extra_headers(ALICE) == [("authorization", "Bearer svc-token-123")]
    out = creds.plan(ALICE).apply(CLIENT_HEADERS)
    assert [v for k, v in out if k == b"authorization"] == [b"Bearer svc-token-123"]
    assert "svc-token-123" not in repr(creds)
    assert "svc-token-123" not in repr(creds.plan(ALICE))


def test_static_header_from_file(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("k-456\n")
    creds = build({"header": "X-Api-Key", "value_file": str(secret)})
    assert creds.extra_headers(None) == [("x-api-key", "k-456")]
    out = creds.plan(ALICE).apply(CLIENT_HEADERS)
    assert [v for k, v in out if k == b"x-api-key"] == [b"k-456"]  # the client's value is gone
    assert not [v for k, v in out if k == b"authorization"]


def test_static_value_read_once(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("first")
    creds = build({"header": "X-Api-Key", "value_file": str(secret)})
    secret.write_text("second")
    assert creds.extra_headers(ALICE) == [("x-api-key", "first")]


def test_scheme_options():
    env = {"T": "abc"}
    assert build({"value_env": "T", "scheme": ""}, environ=env).extra_headers(None) == [
        ("authorization", "abc")
    ]
    assert build({"value_env": "T", "scheme": "Token"}, environ=env).extra_headers(None) == [
        ("authorization", "Token abc")
    ]
    assert build(
        {"value_env": "T", "header": "X-K", "scheme": "Bearer"}, environ=env
    ).extra_headers(None) == [("x-k", "Bearer abc")]


def test_missing_secret_is_a_clear_start_error(tmp_path):
    with pytest.raises(AuthSetupError, match="UPSTREAM_TOKEN is not set"):
        build({"value_env": "UPSTREAM_TOKEN"}, environ={})
    with pytest.raises(AuthSetupError, match="cannot read"):
        build({"value_file": str(tmp_path / "missing")})
    bad = tmp_path / "bad"
    bad.write_text("two\nlines")
    with pytest.raises(AuthSetupError, match="one line"):
        build({"value_file": str(bad)})


def test_forward_client_token():
    creds = build({"forward_client_token": True})
    assert creds.forwards_client_token
    plan = creds.plan(ALICE, "client-token")
    assert plan.extra == (("authorization", "Bearer client-token"),)
    out = plan.apply(CLIENT_HEADERS)
    assert [v for k, v in out if k == b"authorization"] == [b"Bearer client-token"]
    assert creds.plan(ALICE, None).extra == ()


def test_principal_header_overrides_spoofing():
    creds = build({"principal_header": "X-MCP-Principal"})
    plan = creds.plan(ALICE)
    assert "x-mcp-principal" in plan.drop
    out = plan.apply(CLIENT_HEADERS)
    assert [v for k, v in out if k == b"x-mcp-principal"] == [b"alice"]
    by_id = build({"principal_header": "X-MCP-Principal", "principal_value": "id"})
    assert by_id.extra_headers(ALICE) == [
        ("x-mcp-principal", '["jwt-sub","https://as.example","alice"]')
    ]
    assert build({"principal_header": "X-User"}).extra_headers(ANONYMOUS) == [
        ("x-user", "anonymous")
    ]
    # No principal (should not happen after authentication): nothing added, spoofed value still dropped.
    assert build({"principal_header": "X-User"}).extra_headers(None) == []


def test_principal_header_non_ascii():
    p = Principal(id="iss zoë", display="zoë")
    value = build({"principal_header": "X-MCP-Principal"}).extra_headers(p)[0][1]
    assert value == "=?base64?em/Dqw==?="
    from mcp_edge.core.headers import decode_header_value

    assert decode_header_value(value) == "zoë"
    assert header_safe("plain") == "plain"


def test_combined():
    creds = build(
        {"value_env": "T", "header": "X-Api-Key", "principal_header": "X-MCP-Principal"},
        environ={"T": "k"},
    )
    assert creds.extra_headers(ALICE) == [("x-api-key", "k"), ("x-mcp-principal", "alice")]


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"forward_client_token": True, "value_env": "T"}, "exclude each other"),
        ({"header": "X-Api-Key"}, "need value_env or value_file"),
        ({"value_env": "A", "value_file": "/b"}, "only one"),
        ({"principal_header": "Host"}, "managed by the gateway"),
        ({"principal_header": "Mcp-Method"}, "managed by the gateway"),
        ({"principal_header": "Mcp-Param-X"}, "managed by the gateway"),
        ({"principal_header": "bad header"}, "not a valid header name"),
        ({"value_env": "T", "scheme": "Bear er"}, "one word"),
    ],
)
def test_config_errors(cfg, message):
    with pytest.raises(ValueError, match=message):
        UpstreamCredentialConfig.model_validate(cfg)


def test_principal_header_cannot_be_authorization():
    with pytest.raises(ValueError):
        UpstreamCredentials(principal_header="Authorization")
    with pytest.raises(ValueError):
        UpstreamCredentials(static_header=("X-K", "v"), principal_header="x-k")


def test_client_bearer_token():
    assert client_bearer_token(Headers(raw=[(b"authorization", b"Bearer abc")])) == "abc"
    assert client_bearer_token(Headers(raw=[(b"authorization", b"Basic abc")])) is None
    assert client_bearer_token(Headers()) is None


def test_read_secret_requires_exactly_one_source():
    with pytest.raises(ValueError):
        read_secret(env=None, file=None, what="x")
