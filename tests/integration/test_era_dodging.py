"""Era dodging: a request that declares a 2025 version (or none) but carries the 2026-07-28 MRTR
fields must not get a forged state past the seal.

The upstream is a real ``mcp`` 2.x low-level server whose tools read ``requestState`` and
``inputResponses`` from the wire params on either leg and never verify them. A legacy-era
session through the gateway is otherwise served as usual (the positive controls), but any body
carrying those fields is refused at the edge, and the upstream's own request log shows it never
arrived. A route may also refuse legacy-era clients altogether (``legacy_clients: deny``).
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_gateway, start_upstream
from tests.support.legacy import legacy_initialize, open_legacy_session

pytestmark = pytest.mark.integration

ACCEPT = "application/json, text/event-stream"
ELICITATION = {"elicitation": {}}
FORGED = "forged-by-client"
ANSWER = {"confirm": {"action": "accept", "content": {"ok": True}}}


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    log = module_tmp / "upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "plaintext_state.py", module_tmp, "--log", str(log))
        gateway = start_gateway(stack, module_tmp, upstream=upstream.url, keys=state_key)
        modern_only = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "routes": [
                    {
                        "name": "default",
                        "path": "/mcp",
                        "upstream": upstream.url,
                        "legacy_clients": "deny",
                    }
                ],
            },
        )
        yield {"gateway": gateway, "modern_only": modern_only, "log": log}


def upstream_calls(env) -> list[dict]:
    entries = [json.loads(line) for line in env["log"].read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("method") == "tools/call"]


def rpc_body(text: str):
    """The JSON-RPC message of a JSON body, or the last data event of an SSE body."""
    text = text.strip()
    if text.startswith("{") or text.startswith("["):
        return json.loads(text)
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])


def tools_call(request_id: int, marker: str, **extra) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "whoami_state", "arguments": {"ask": False, "marker": marker}, **extra},
    }


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", None])
def test_legacy_session_works_without_mrtr_fields(env, version):
    """Positive control: the same legacy session and tool go through when nothing is smuggled."""
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(
            http, env["gateway"].url, client="era-dodger", capabilities=ELICITATION, version=version
        )
        r = http.post(env["gateway"].url, headers=headers, json=tools_call(7, f"plain-{version}"))
    assert r.status_code == 200, r.text
    seen = rpc_body(r.text)["result"]["structuredContent"]
    assert seen["requestStatePresent"] is False and seen["inputResponsesPresent"] is False
    assert any(c.get("name") == "whoami_state" for c in upstream_calls(env))


@pytest.mark.parametrize("version", ["2025-11-25", "2025-06-18", None])
@pytest.mark.parametrize(
    "extra,fields",
    [
        ({"requestState": FORGED}, ["requestState"]),
        ({"inputResponses": ANSWER}, ["inputResponses"]),
        ({"inputResponses": ANSWER, "requestState": FORGED}, ["inputResponses", "requestState"]),
    ],
)
def test_mrtr_fields_on_legacy_requests_never_reach_the_upstream(env, version, extra, fields):
    before = len(upstream_calls(env))
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(
            http, env["gateway"].url, client="era-dodger", capabilities=ELICITATION, version=version
        )
        r = http.post(env["gateway"].url, headers=headers, json=tools_call(9, "smuggled", **extra))
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["id"] == 9
    assert body["error"]["code"] == -32602
    assert body["error"]["data"] == {"reason": "legacy_retry_fields", "fields": sorted(fields)}
    assert len(upstream_calls(env)) == before
    assert not any(
        c.get("has_request_state") or c.get("has_input_responses") for c in upstream_calls(env)
    )


def test_mrtr_fields_inside_a_legacy_batch_are_refused(env):
    """2025-03-26 allowed batches: a field hidden in any element is found."""
    before = len(upstream_calls(env))
    batch = [tools_call(11, "first"), tools_call(12, "second", requestState=FORGED)]
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(
            http,
            env["gateway"].url,
            client="era-dodger",
            capabilities=ELICITATION,
            version="2025-03-26",
        )
        r = http.post(env["gateway"].url, headers=headers, json=batch)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["data"]["fields"] == ["requestState"]
    assert len(upstream_calls(env)) == before


@pytest.mark.parametrize(
    "raw",
    [
        # Python's json module and pydantic read NaN; the edge's parser does not. Forwarding what
        # the edge could not read would let the upstream act on fields the edge never saw.
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami_state",'
        b'"arguments":{"n":NaN},"requestState":"forged-by-client"}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"whoami_state"}} trailing',
    ],
)
def test_legacy_bodies_the_edge_cannot_read_are_not_forwarded(env, raw):
    before = len(upstream_calls(env))
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(
            http, env["gateway"].url, client="era-dodger", capabilities=ELICITATION
        )
        r = http.post(
            env["gateway"].url, headers={**headers, "Content-Type": "application/json"}, content=raw
        )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == -32700
    assert len(upstream_calls(env)) == before


def test_modern_route_refuses_legacy_clients(env):
    gateway = env["modern_only"]
    before = len(upstream_calls(env))
    with httpx.Client(timeout=10) as http:
        r = http.post(
            gateway.url,
            headers={"Accept": ACCEPT},
            json=legacy_initialize("old"),
        )
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == -32602
        assert error["data"] == {"supported": ["2026-07-28"], "requested": "2025-11-25"}
        assert "mcp-session-id" not in r.headers

        r = http.post(
            gateway.url,
            headers={"Accept": ACCEPT, "MCP-Protocol-Version": "2025-11-25"},
            json=tools_call(3, "x", requestState=FORGED),
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == -32600 and r.json()["id"] == 3

        r = http.get(gateway.url, headers={"Accept": "text/event-stream"})
        assert r.status_code == 400 and r.json()["error"]["data"]["supported"] == ["2026-07-28"]

        # 2026-07-28 traffic on the same route is served as usual.
        r = http.post(
            gateway.url,
            headers={
                "Accept": ACCEPT,
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/list",
            },
            json={
                "jsonrpc": "2.0",
                "id": 4,
                "method": "tools/list",
                "params": {
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                    }
                },
            },
        )
        assert r.status_code == 200 and rpc_body(r.text)["result"]["tools"]
    assert len(upstream_calls(env)) == before
