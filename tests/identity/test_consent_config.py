"""Per-user consent's configuration: what check-config refuses, with the message naming why;
and the upstream's protected-resource metadata, as the gateway reads it to find the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from mcp_edge.cluster.listeners import CONSENT_PREFIX, PUBLIC, path_role
from mcp_edge.identity import consent_config, prm
from mcp_edge.identity.asclient import ASUnavailable
from mcp_edge.identity.config import OAuthConfig
from mcp_edge.server.config import GatewayConfig

ISSUER = "https://idp.example"
CLIENT = {"client_id": "gw", "secret_env": "X"}


def doc(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gateway": {"public_url": "https://edge.example"},
        "auth": {"mode": "jwt", "jwt": {"issuer": ISSUER, "jwks_url": f"{ISSUER}/jwks"}},
        "consent": {"sign_in": {"issuer": ISSUER, "client": CLIENT}},
        "routes": [
            {
                "name": "drive",
                "path": "/drive",
                "upstream": "https://drive.example/mcp",
                "era": "modern",
                "upstream_auth": {"oauth": {"issuer": "https://as.example", "client": CLIENT}},
            }
        ],
    }
    for key, value in changes.items():
        if value is None:
            base.pop(key)
        else:
            base[key] = value
    return base


def refused(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        GatewayConfig.model_validate(data)
    return str(info.value)


def test_a_valid_configuration():
    config = GatewayConfig.model_validate(doc())
    assert config.consent.link_seconds == 300 and config.consent.wait_seconds == 20


def test_consent_needs_jwt_callers_a_sign_in_of_their_issuer_and_a_public_url():
    assert "needs auth.mode jwt" in refused(doc(auth={"mode": "anonymous"}))
    assert "needs consent.sign_in" in refused(doc(consent={}))
    other = {"sign_in": {"issuer": "https://other.example", "client": CLIENT}}
    assert "must be auth.jwt.issuer" in refused(doc(consent=other))
    assert "needs gateway.public_url" in refused(doc(gateway={}))
    assert "store.type: redis" in refused(doc(listen={"workers": 2}))


def test_the_sign_in_asks_for_an_id_token():
    section = {"sign_in": {"issuer": ISSUER, "client": CLIENT, "scope": ["profile"]}}
    assert "must include openid" in refused(doc(consent=section))


def test_oauth_finds_its_server_or_names_its_issuer():
    assert OAuthConfig.model_validate({"client": CLIENT}).issuer is None  # from the upstream
    with pytest.raises(ValidationError, match="give issuer"):
        OAuthConfig.model_validate({"client": CLIENT, "token_endpoint": "https://as.example/t"})
    with pytest.raises(ValidationError, match="https"):
        OAuthConfig.model_validate({"client": CLIENT, "issuer": "http://as.example"})


def test_the_pages_are_public_though_under_the_replicas_prefix():
    assert consent_config.CONSENT_PREFIX == CONSENT_PREFIX
    for path in ("start", "callback", "", "revoke", "connect"):
        assert path_role(CONSENT_PREFIX + path) == PUBLIC
    assert path_role("/.mcp-edge/forward") != PUBLIC


UPSTREAM = "https://drive.example/mcp"


def test_protected_resource_metadata_names_the_server():
    found = prm.parse(
        {"resource": UPSTREAM, "authorization_servers": ["https://as.example"]},
        upstream=UPSTREAM,
        source="s",
        allow_http=False,
    )
    assert found.authorization_server == "https://as.example" and found.resource == UPSTREAM
    assert prm.metadata_urls(UPSTREAM) == [
        "https://drive.example/.well-known/oauth-protected-resource/mcp",
        "https://drive.example/.well-known/oauth-protected-resource",
    ]


@pytest.mark.parametrize(
    "document",
    [
        [],
        {"resource": "https://other.example/mcp", "authorization_servers": ["https://as.example"]},
        {"resource": UPSTREAM},
        {"resource": UPSTREAM, "authorization_servers": []},
        {"resource": UPSTREAM, "authorization_servers": ["http://as.example"]},
        {"resource": UPSTREAM, "authorization_servers": [7]},
        # An https upstream naming a plain-http server, a loopback one included (whatever
        # listens there would get the client's credentials and the users' codes).
        {"resource": UPSTREAM, "authorization_servers": ["http://127.0.0.1:6379"]},
    ],
)
def test_metadata_that_cannot_be_trusted_is_refused(document: Any):
    with pytest.raises(ASUnavailable):
        prm.parse(document, upstream=UPSTREAM, source="s", allow_http=False)


def test_the_example_configuration_is_valid(monkeypatch: pytest.MonkeyPatch):
    from mcp_edge.server.config import load_config

    path = Path(__file__).resolve().parents[2] / "config" / "identity.yaml"
    config = load_config(str(path))
    assert any(
        u.upstream_auth.oauth is not None for r in config.routes for _, u in r.upstreams()
    ), "config/identity.yaml shows upstream_auth.oauth"


def test_the_grants_command_names_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    import yaml

    from mcp_edge import exits
    from mcp_edge.core.seal import generate_key
    from mcp_edge.server.cli import main
    from tests.support.processes import write_private

    path = write_private(tmp_path / "c.yaml", yaml.safe_dump(doc()))
    monkeypatch.setenv("MCP_EDGE_STATE_KEYS", generate_key())
    assert main(["grants"]) == exits.USAGE
    assert "an action is required: list, revoke" in capsys.readouterr().err
    code = main(["grants", "list", "--config", str(path), "--issuer", ISSUER, "--subject", "a"])
    assert code == exits.USAGE
    assert "per process with store.type: memory" in capsys.readouterr().err
    redis = doc(store={"type": "redis", "url": "redis://127.0.0.1:1/0"})
    write_private(path, yaml.safe_dump(redis))
    assert main(["grants", "list", "--config", str(path), "--subject", "a"]) == exits.USAGE
    assert "name the principal: issuer and subject" in capsys.readouterr().err
    code = main(["grants", "list", "--config", str(path), "--issuer", ISSUER, "--subject", "a"])
    assert code == exits.UNREACHABLE
    assert "cannot reach the store's Redis at redis://127.0.0.1:1/0" in capsys.readouterr().err
