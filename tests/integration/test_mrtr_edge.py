"""Edge protection of MRTR in front of a real ``mcp`` 2.x low-level server that sends plaintext
state and accepts any state it is given. Through the gateway, every forged, tampered, expired or
re-bound retry is refused before it reaches the upstream; honest flows complete with the real
``mcp`` client."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

from tests.conftest import Running, start_gateway, start_upstream

pytestmark = pytest.mark.integration
MODERN = "2026-07-28"
CAPS = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    log = module_tmp / "upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(
            stack, "plaintext_state.py", module_tmp, "--log", str(log), "--json-response"
        )
        gateway = start_gateway(stack, module_tmp, upstream=upstream.url, keys=state_key)
        short = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "routes": [{"name": "default", "path": "/mcp", "upstream": upstream.url}],
                "state": {"ttl_seconds": 1, "leeway_seconds": 0},
            },
        )
        yield {"upstream": upstream, "gateway": gateway, "short": short, "log": log}


def upstream_log(env) -> list[dict]:
    return [json.loads(line) for line in env["log"].read_text().splitlines() if line.strip()]


def seen_states(env) -> list:
    return [e.get("request_state") for e in upstream_log(env) if e.get("has_request_state")]


def call(request_id, name, arguments=None, caps=CAPS, **params):
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments or {},
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": caps,
            },
        },
    }


def headers(name, method="tools/call"):
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        "Mcp-Name": name,
    }


async def round_one(http, gateway: Running, name="whoami_state", arguments=None):
    r = await http.post(gateway.url, headers=headers(name), json=call(1, name, arguments))
    result = r.json()["result"]
    assert result["resultType"] == "input_required", r.text
    return result


ANSWER = {"confirm": {"action": "accept", "content": {"ok": True}}}


async def test_honest_retry_restores_the_upstream_state(env):
    async with httpx.AsyncClient(timeout=10) as http:
        result = await round_one(http, env["gateway"], arguments={"state": "upstream-secret-7"})
        assert "upstream-secret-7" not in result["requestState"]
        r = await http.post(
            env["gateway"].url,
            headers=headers("whoami_state"),
            json=call(
                2,
                "whoami_state",
                {"state": "upstream-secret-7"},
                inputResponses=ANSWER,
                requestState=result["requestState"],
            ),
        )
        seen = r.json()["result"]["structuredContent"]
        assert seen["requestState"] == "upstream-secret-7" and seen["inputResponses"] == ANSWER


async def test_no_upstream_state_means_none_forwarded(env):
    async with httpx.AsyncClient(timeout=10) as http:
        result = await round_one(http, env["gateway"], arguments={"state": ""})
        assert result["requestState"].startswith("mcpe1.")  # sealed even though upstream sent none
        r = await http.post(
            env["gateway"].url,
            headers=headers("whoami_state"),
            json=call(
                2,
                "whoami_state",
                {"state": ""},
                inputResponses=ANSWER,
                requestState=result["requestState"],
            ),
        )
        seen = r.json()["result"]["structuredContent"]
        assert seen["requestStatePresent"] is False and seen["inputResponses"] == ANSWER


def _flip(token: str) -> str:
    i = len(token) // 2
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]


@pytest.mark.parametrize(
    "case,expected",
    [
        ("forged", "malformed"),
        ("tampered", "integrity"),
        ("other_tool", "binding"),
        ("other_arguments", "binding"),
        ("other_key", "integrity"),
    ],
)
async def test_bad_retries_never_reach_the_upstream(env, case, expected):
    async with httpx.AsyncClient(timeout=10) as http:
        result = await round_one(http, env["gateway"], arguments={"state": "s1"})
        state = result["requestState"]
        name, args = "whoami_state", {"state": "s1"}
        if case == "forged":
            state = "whoami-state-1"  # what a client would send to a server with plaintext state
        elif case == "tampered":
            state = _flip(state)
        elif case == "other_tool":
            name = "ask_name"
        elif case == "other_arguments":
            args = {"state": "s2"}
        elif case == "other_key":
            prefix, _, body = state.split(".")
            state = f"{prefix}.AAAAAAAA.{body}"
        before = len(upstream_log(env))
        r = await http.post(
            env["gateway"].url,
            headers=headers(name),
            json=call(77, name, args, inputResponses=ANSWER, requestState=state),
        )
        assert r.status_code == 400
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": 77,
            "error": {
                "code": -32602,
                "message": "Invalid or expired requestState",
                "data": {"reason": expected},
            },
        }
        assert len(upstream_log(env)) == before  # nothing reached the upstream


async def test_expired_state_is_refused(env):
    async with httpx.AsyncClient(timeout=10) as http:
        result = await round_one(http, env["short"], arguments={"state": "s1"})
        time.sleep(2.1)
        before = len(upstream_log(env))
        r = await http.post(
            env["short"].url,
            headers=headers("whoami_state"),
            json=call(
                5,
                "whoami_state",
                {"state": "s1"},
                inputResponses=ANSWER,
                requestState=result["requestState"],
            ),
        )
        assert r.status_code == 400 and r.json()["error"]["data"] == {"reason": "expired"}
        assert len(upstream_log(env)) == before


async def test_state_from_another_gateway_route_is_refused(env, module_tmp, state_key):
    """Same keys, other audience: a state sealed for one gateway id does not open at another."""
    with ExitStack() as stack:
        other = start_gateway(
            stack,
            module_tmp,
            upstream=env["upstream"].url,
            keys=state_key,
            env={"MCP_EDGE_GATEWAY_ID": "another-edge"},
        )
        async with httpx.AsyncClient(timeout=10) as http:
            result = await round_one(http, env["gateway"], arguments={"state": "s1"})
            r = await http.post(
                other.url,
                headers=headers("whoami_state"),
                json=call(
                    6,
                    "whoami_state",
                    {"state": "s1"},
                    inputResponses=ANSWER,
                    requestState=result["requestState"],
                ),
            )
            assert r.json()["error"]["data"] == {"reason": "binding"}


async def test_honest_flows_complete_with_the_sdk_client(env):
    async def on_elicit(ctx, params):
        return ElicitResult(
            action="accept", content={"name": "Ada", "answer": f"a-{ctx.request_id}"}
        )

    async def on_sample(ctx, params):
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="hi"), model="m"
        )

    async def on_roots(ctx):
        return ListRootsResult(roots=[Root(uri="file:///work")])

    async with Client(
        env["gateway"].url,
        mode=MODERN,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        list_roots_callback=on_roots,
    ) as client:
        assert (await client.call_tool("ask_name", {})).content[0].text == "Hello, Ada!"
        assert (await client.call_tool("ask_sample", {})).content[0].text == "Model said: hi"
        assert (await client.call_tool("ask_roots", {})).content[
            0
        ].text == "1 root(s): file:///work"
        three = await client.call_tool("ask_three", {})
        assert three.structured_content == {"answer": "hi", "name": "Ada", "roots": 1}
        rounds = await client.call_tool("three_rounds", {})
        assert rounds.structured_content["rounds"] == 3 and rounds.structured_content[
            "answers"
        ] == ["a-q1", "a-q2", "a-q3"]
    # Every state the upstream received was its own plaintext, never the gateway's envelope.
    assert all(not (s or "").startswith("mcpe1.") for s in seen_states(env))


async def test_each_round_gets_a_fresh_state_and_the_round_limit_holds(env, module_tmp, state_key):
    with ExitStack() as stack:
        capped = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "routes": [{"name": "default", "path": "/mcp", "upstream": env["upstream"].url}],
                "state": {"max_rounds": 2},
            },
        )
        async with httpx.AsyncClient(timeout=10) as http:
            states = []
            state = None
            for i in range(3):
                params = {}
                if state:
                    params = {
                        "inputResponses": {
                            f"q{i}": {"action": "accept", "content": {"answer": "x"}}
                        },
                        "requestState": state,
                    }
                r = await http.post(
                    capped.url,
                    headers=headers("three_rounds"),
                    json=call(10 + i, "three_rounds", **params),
                )
                doc = r.json()
                if i < 2:
                    state = doc["result"]["requestState"]
                    states.append(state)
                else:
                    assert doc["error"]["data"] == {"reason": "rounds"}, doc
            assert len(set(states)) == 2
