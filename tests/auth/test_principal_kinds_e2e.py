"""A client-credentials token and a user token that spells the client's name are two callers, end
to end: a real gateway in jwt mode (real JWKS server) in front of real ``mcp`` 2.x upstreams.

``svc`` holds a client-credentials token (``client_id: svc``, no ``sub``); ``mallory`` a user token
whose subject is ``client:svc``. Neither may finish the other's MRTR flow, spend the other's rate
limit, or read the other's private cache entries. Routes: ``/mcp`` (``tests/servers/edge_probe.py``,
whose ``ask`` tool asks a question first), ``/limited`` (one request per caller per hour) and
``/cache`` (``tests/servers/cache_hints.py``, private entries kept per caller).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.auth.support import JwksServer, claims, jwt_auth, new_ec
from tests.conftest import start_gateway, start_upstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
MODERN = "2026-07-28"
ISSUER = "https://idp.kinds.test"
CAPS = {"elicitation": {"form": {}}}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("kinds")
    key = new_ec("kinds-key")
    jwks = JwksServer()
    jwks.start()
    jwks.state.keys = [key.jwk()]
    log = tmp / "probe.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        stack.callback(jwks.stop)
        probe = start_upstream(stack, "edge_probe.py", tmp, "--log", str(log))
        hints = start_upstream(stack, "cache_hints.py", tmp, "--ttl-ms", "60000")
        who = {"principal_header": "X-MCP-Principal"}
        config = {
            "auth": jwt_auth(ISSUER, jwks.url),
            "routes": [
                {"name": "mcp", "path": "/mcp", "upstream": probe.url},
                {
                    "name": "limited",
                    "path": "/limited",
                    "upstream": probe.url,
                    "rate_limits": {"per_principal": "1/hour"},
                },
                {
                    "name": "cache",
                    "path": "/cache",
                    "upstream": hints.url,
                    "upstream_auth": who,
                    "cache": {"enabled": True, "private": True},
                },
            ],
        }
        gateway = start_gateway(stack, tmp, config=config, keys=generate_key(), anonymous=False)
        base = claims(iss=ISSUER, aud="mcp-edge-tests")
        svc = key.sign({**{k: v for k, v in base.items() if k != "sub"}, "client_id": "svc"})
        mallory = key.sign({**base, "sub": "client:svc"})
        yield {"gateway": gateway, "log": log, "svc": svc, "mallory": mallory}


def arrived(env: dict[str, Any], mark: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in env["log"].read_text().splitlines() if mark in line]


def rpc(request_id: int, method: str, **params: Any) -> dict[str, Any]:
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": CAPS,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def post(env: dict[str, Any], who: str, path: str, doc: dict[str, Any]) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {env[who]}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": doc["method"],
    }
    name = doc["params"].get("name") or doc["params"].get("uri")
    if name is not None:
        headers["Mcp-Name"] = name
    async with httpx.AsyncClient(timeout=15) as http:
        return await http.post(env["gateway"].base + path, headers=headers, json=doc)


async def test_a_state_sealed_for_the_client_is_refused_for_the_look_alike_user(env):
    mark = f"m-{uuid.uuid4().hex}"
    first = await post(
        env, "svc", "/mcp", rpc(1, "tools/call", name="ask", arguments={"marker": mark})
    )
    assert first.status_code == 200, first.text
    state = first.json()["result"]["requestState"]
    answers = {"confirm": {"action": "accept", "content": {"ok": True}}}
    retry = rpc(
        2,
        "tools/call",
        name="ask",
        arguments={"marker": mark},
        inputResponses=answers,
        requestState=state,
    )
    refused = await post(env, "mallory", "/mcp", retry)
    assert refused.status_code == 400
    assert refused.json() == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {
            "code": -32602,
            "message": "Invalid or expired requestState",
            "data": {"reason": "principal"},
        },
    }
    assert len(arrived(env, mark)) == 1  # the first round only
    retry["id"] = 3
    done = await post(env, "svc", "/mcp", retry)
    assert (
        done.status_code == 200 and done.json()["result"]["content"][0]["text"] == f"asked {mark}"
    )


async def test_the_look_alikes_do_not_share_a_rate_limit(env):
    mark = f"m-{uuid.uuid4().hex}"
    for rid, who in enumerate(("svc", "mallory"), start=1):
        r = await post(
            env, who, "/limited", rpc(rid, "tools/call", name="work", arguments={"marker": mark})
        )
        assert r.status_code == 200, (who, r.text)
    for rid, who in enumerate(("svc", "mallory"), start=3):
        r = await post(
            env, who, "/limited", rpc(rid, "tools/call", name="work", arguments={"marker": mark})
        )
        assert r.status_code == 429 and r.json()["error"]["data"]["budget"] == "principal", (
            who,
            r.text,
        )
    assert len(arrived(env, mark)) == 2


async def test_the_look_alikes_do_not_share_private_cache_entries(env):
    r1 = await post(env, "svc", "/cache", rpc(1, "prompts/list"))
    r2 = await post(env, "mallory", "/cache", rpc(2, "prompts/list"))
    assert (r1.headers["x-mcp-edge-cache"], r2.headers["x-mcp-edge-cache"]) == ("miss", "miss")
    # The upstream is told the display name: the client id, or the user's subject.
    assert r1.json()["result"]["prompts"][0]["name"] == "for-svc"
    assert r2.json()["result"]["prompts"][0]["name"] == "for-client:svc"
    r3 = await post(env, "mallory", "/cache", rpc(3, "prompts/list"))
    assert (
        r3.headers["x-mcp-edge-cache"] == "hit"
        and r3.json()["result"]["prompts"][0]["name"] == "for-client:svc"
    )
