"""Sealed state is bound to the authenticated caller, end to end: a real gateway in jwt mode (real
JWKS server) in front of a real ``mcp`` 2.x upstream that keeps plaintext state and would accept
anything. Also the trusted-header mode through a running gateway."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from mcp_edge.core.seal import generate_key
from tests.auth.support import JwksServer, claims, jwt_auth, new_ec
from tests.conftest import start_gateway, start_upstream
from tests.support.processes import free_port, serving

pytestmark = pytest.mark.integration
MODERN = "2026-07-28"
ISSUER = "https://idp.binding.test"


def call(request_id: int, **params) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": "whoami_state",
            "arguments": {"state": "alice-upstream-state"},
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
            },
        },
    }


def headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "whoami_state",
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("binding")
    key = new_ec("binding-key")
    jwks = JwksServer()
    jwks.start()
    jwks.state.keys = [key.jwk()]
    log = tmp / "upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        stack.callback(jwks.stop)
        upstream = start_upstream(
            stack, "plaintext_state.py", tmp, "--log", str(log), "--json-response"
        )
        port_holder = {}
        config = {
            "auth": jwt_auth(ISSUER, jwks.url),
            "routes": [{"name": "default", "path": "/mcp", "upstream": upstream.url}],
        }
        gateway = start_gateway(stack, tmp, config=config, keys=generate_key(), anonymous=False)
        port_holder["gw"] = gateway

        def token(sub: str) -> str:
            return key.sign(claims(iss=ISSUER, sub=sub, aud="mcp-edge-tests"))

        yield {"gateway": gateway, "token": token, "log": log}


def upstream_calls(env) -> int:
    return sum(
        1
        for line in env["log"].read_text().splitlines()
        if '"whoami_state"' in line and '"method"' in line
    )


async def test_bobs_retry_of_alices_flow_is_refused(env):
    url, token = env["gateway"].url, env["token"]
    async with httpx.AsyncClient(timeout=10) as http:
        r1 = await http.post(url, headers=headers(token("alice")), json=call(1))
        assert r1.status_code == 200, r1.text
        state = r1.json()["result"]["requestState"]
        answers = {"confirm": {"action": "accept", "content": {"ok": True}}}
        before = upstream_calls(env)
        bob = await http.post(
            url,
            headers=headers(token("bob")),
            json=call(2, inputResponses=answers, requestState=state),
        )
        assert bob.status_code == 400
        assert bob.json() == {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {
                "code": -32602,
                "message": "Invalid or expired requestState",
                "data": {"reason": "principal"},
            },
        }
        assert upstream_calls(env) == before  # Bob's retry never reached the upstream
        alice = await http.post(
            url,
            headers=headers(token("alice")),
            json=call(3, inputResponses=answers, requestState=state),
        )
        seen = alice.json()["result"]["structuredContent"]
        assert seen["requestState"] == "alice-upstream-state"
        assert upstream_calls(env) == before + 1


async def test_sdk_client_with_bearer_token_completes_mrtr(env):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {env['token']('carol')}"})

    async def on_elicit(ctx, params):
        return ElicitResult(action="accept", content={"name": "Carol", "answer": "x"})

    async with (
        http,
        Client(
            streamable_http_client(env["gateway"].url, http_client=http),
            mode=MODERN,
            elicitation_callback=on_elicit,
        ) as client,
    ):
        assert (await client.call_tool("ask_name", {})).content[0].text == "Hello, Carol!"
        rounds = await client.call_tool("three_rounds", {})
        assert rounds.structured_content["rounds"] == 3


# ---------------------------------------------------------------- trusted header


@pytest.mark.parametrize("cidrs,accepted", [(["127.0.0.1/32"], True), (["10.0.0.0/8"], False)])
async def test_trusted_header_through_the_gateway(tmp_path: Path, cidrs, accepted):
    with ExitStack() as stack:
        port = free_port()
        stack.enter_context(
            serving(
                "whoami",
                [
                    sys.executable,
                    str(Path(__file__).with_name("whoami_server.py")),
                    "--port",
                    str(port),
                ],
                port=port,
                log_path=tmp_path / "w.log",
            )
        )
        config = {
            "auth": {
                "mode": "trusted_header",
                "trusted_header": {"header": "X-Forwarded-User", "trusted_cidrs": cidrs},
            },
            "routes": [
                {
                    "name": "default",
                    "path": "/mcp",
                    "upstream": f"http://127.0.0.1:{port}/mcp",
                    "upstream_auth": {"principal_header": "X-MCP-Principal"},
                }
            ],
        }
        gateway = start_gateway(
            stack, tmp_path, config=config, keys=generate_key(), anonymous=False
        )
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "whoami",
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        hdrs = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "whoami",
            "X-Forwarded-User": "dave",
        }
        async with httpx.AsyncClient(timeout=10) as http:
            r = await http.post(gateway.url, headers=hdrs, json=body)
        if not accepted:
            assert r.status_code == 401 and r.json()["id"] == 1
            return
        text = r.json()["result"]["content"][0]["text"] if "result" in r.json() else None
        if text is None:  # SSE framing
            text = json.loads(
                [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ")][-1]
            )["result"]["content"][0]["text"]
        seen = json.loads(text)
        assert seen["x-forwarded-user"] is None  # the identity header never reaches the upstream
        assert seen["x-mcp-principal"] == "dave"
