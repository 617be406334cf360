"""Authentication through the running gateway: a real gateway process with jwt mode against a
real JWKS server, a real ``mcp`` 2.x upstream, and the real ``mcp`` 2.x client."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_edge.auth.challenge import parse_bearer_challenge
from mcp_edge.core.seal import generate_key
from tests.auth.support import JwksServer, SigningKey, claims, new_rsa
from tests.support.processes import free_port, serving, venv_command, write_private

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"
ISSUER = "https://as.e2e.test"
UPSTREAM_KEY = "upstream-service-key-1"


class Env:
    def __init__(self, gateway_port: int, key: SigningKey, jwks: JwksServer) -> None:
        self.base = f"http://127.0.0.1:{gateway_port}"
        self.url = f"{self.base}/mcp"
        self.key = key
        self.jwks = jwks

    def token(self, **overrides) -> str:
        values = {"iss": ISSUER, "aud": self.url, "scope": "mcp:tools"}
        values.update(overrides)
        return self.key.sign(claims(**values))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("auth-e2e")
    key = new_rsa("e2e-key")
    jwks = JwksServer()
    jwks.start()
    jwks.state.keys = [key.jwk()]
    with ExitStack() as stack:
        stack.callback(jwks.stop)
        upstream_port = free_port()
        stack.enter_context(
            serving(
                "whoami",
                [
                    sys.executable,
                    str(Path(__file__).with_name("whoami_server.py")),
                    "--port",
                    str(upstream_port),
                ],
                port=upstream_port,
                log_path=tmp / "whoami.log",
            )
        )
        port = free_port()
        config = {
            "gateway": {"public_url": f"http://127.0.0.1:{port}"},
            "auth": {
                "mode": "jwt",
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp:tools"],
                "jwt": {"issuer": ISSUER, "jwks_url": jwks.url, "algorithms": ["RS256"]},
            },
            "routes": [
                {
                    "name": "default",
                    "path": "/mcp",
                    "upstream": f"http://127.0.0.1:{upstream_port}/mcp",
                    "auth": {"required_scopes": ["mcp:tools"]},
                    "upstream_auth": {
                        "principal_header": "X-MCP-Principal",
                        "header": "X-Upstream-Key",
                        "value_env": "E2E_UPSTREAM_KEY",
                    },
                }
            ],
        }
        path = tmp / "gateway.yaml"
        write_private(path, yaml.safe_dump(config))
        argv = [*venv_command("mcp-edge"), "serve", "--port", str(port), "--config", str(path)]
        stack.enter_context(
            serving(
                "gateway",
                argv,
                port=port,
                log_path=tmp / "gateway.log",
                env={"MCP_EDGE_STATE_KEYS": generate_key(), "E2E_UPSTREAM_KEY": UPSTREAM_KEY},
            )
        )
        yield Env(port, key, jwks)


def rpc_headers(**extra: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/list",
        **extra,
    }


LIST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/list",
    "params": {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
}


async def test_sdk_client_with_bearer_token(env: Env):
    # The client sends a spoofed identity header too: the upstream must never see it.
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {env.token(sub='alice')}", "X-MCP-Principal": "root"}
    )
    async with (
        http,
        Client(streamable_http_client(env.url, http_client=http), mode=MODERN) as client,
    ):
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["whoami"]
        result = await client.call_tool("whoami", {})
    seen = json.loads(result.content[0].text)
    assert seen == {
        "authorization": None,  # the client's token is not passed through
        "x-edge-secret": None,
        "x-forwarded-user": None,
        "x-mcp-principal": "alice",
        "x-upstream-key": UPSTREAM_KEY,
    }


async def test_no_token_gets_challenge_and_metadata(env: Env):
    async with httpx.AsyncClient() as http:
        r = await http.post(env.url, json=LIST, headers=rpc_headers())
        assert r.status_code == 401
        params = parse_bearer_challenge(r.headers["www-authenticate"])
        assert params == {
            "resource_metadata": f"{env.base}/.well-known/oauth-protected-resource/mcp",
            "scope": "mcp:tools",
        }
        body = r.json()
        assert body["id"] == 1 and "error" in body

        for url in (
            params["resource_metadata"],
            f"{env.base}/.well-known/oauth-protected-resource",
        ):
            doc = (await http.get(url)).json()
            assert doc == {
                "resource": env.url,
                "authorization_servers": [ISSUER],
                "scopes_supported": ["mcp:tools"],
                "bearer_methods_supported": ["header"],
            }


async def test_rejections_through_the_gateway(env: Env):
    async with httpx.AsyncClient() as http:
        ok = await http.post(
            env.url, json=LIST, headers=rpc_headers(Authorization=f"Bearer {env.token()}")
        )
        assert ok.status_code == 200, ok.text

        expired = env.token(exp=int(time.time()) - 600, iat=int(time.time()) - 900, nbf=None)
        r = await http.post(
            env.url, json=LIST, headers=rpc_headers(Authorization=f"Bearer {expired}")
        )
        assert r.status_code == 401
        assert parse_bearer_challenge(r.headers["www-authenticate"])["error"] == "invalid_token"

        wrong_aud = env.token(aud="http://127.0.0.1:1/mcp")
        r = await http.post(
            env.url, json=LIST, headers=rpc_headers(Authorization=f"Bearer {wrong_aud}")
        )
        assert r.status_code == 401

        no_scope = env.token(scope="other")
        r = await http.post(
            env.url, json=LIST, headers=rpc_headers(Authorization=f"Bearer {no_scope}")
        )
        assert r.status_code == 403
        params = parse_bearer_challenge(r.headers["www-authenticate"])
        assert params["error"] == "insufficient_scope"
        assert params["scope"] == "mcp:tools"

        r = await http.post(
            f"{env.url}?access_token={env.token()}", json=LIST, headers=rpc_headers()
        )
        assert r.status_code == 400
        assert parse_bearer_challenge(r.headers["www-authenticate"])["error"] == "invalid_request"

        forged = new_rsa("e2e-key").sign(claims(iss=ISSUER, aud=env.url, scope="mcp:tools"))
        r = await http.post(
            env.url, json=LIST, headers=rpc_headers(Authorization=f"Bearer {forged}")
        )
        assert r.status_code == 401
