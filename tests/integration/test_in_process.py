"""``mcp_edge.Edge`` around real SDK apps in their own uvicorn process, beside the same app
behind ``mcp-edge serve``.

Processes (for the module, started together): the ``mrtr_upstream`` server wrapped in-process
(``tests/servers/in_process.py wrapped``); the same server bare, and ``mcp-edge serve`` in front of
it (the sidecar); a Starlette host app that guards one mounted SDK app with ``Middleware(Edge)``
and mounts another inside an ``Edge`` of its own (``in_process.py hosted``). Both gateways share
one key ring and gateway id, the apps one request-state secret and instance name, so their
answers can be compared byte for byte, sealed state aside.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.types import ElicitResult

from tests.support.processes import (
    ManagedProcess,
    free_port,
    python_script,
    venv_command,
    wait_for_port,
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
]  # (its setup starts four processes)

MODERN = "2026-07-28"
SEALED = "mcpe1."
APP_KEY = os.urandom(32).hex()


class Servers:
    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports

    def base(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"


@pytest.fixture(scope="module")
def servers(module_tmp: Path, state_key: str) -> Iterator[Servers]:
    ports = {name: free_port() for name in ("upstream", "sidecar", "wrapped", "hosted")}
    edge_env = {"MCP_EDGE_STATE_KEYS": state_key}
    app = ["--keys", APP_KEY, "--instance", "in-process"]
    argvs = {
        "upstream": python_script("mrtr_upstream.py", "--port", str(ports["upstream"]), *app),
        "sidecar": [
            *venv_command("mcp-edge"),
            "serve",
            "--upstream",
            f"http://127.0.0.1:{ports['upstream']}/mcp",
            "--port",
            str(ports["sidecar"]),
            "--anonymous",
        ],
        "wrapped": python_script("in_process.py", "wrapped", "--port", str(ports["wrapped"]), *app),
        "hosted": python_script(
            "in_process.py", "hosted", "--port", str(ports["hosted"]), "--keys", APP_KEY
        ),
    }
    started: list[ManagedProcess] = []
    try:
        for name, argv in argvs.items():
            env = edge_env if name != "upstream" else None
            started.append(ManagedProcess(name, argv, log_path=module_tmp / f"{name}.log", env=env))
        for process in started:
            wait_for_port(ports[process.name], timeout=120, process=process)
        yield Servers(ports)
    finally:
        for process in started:
            process.stop()


def headers(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    out = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        out["Mcp-Name"] = name
    out.update(extra)
    return out


def call(
    request_id: int,
    name: str,
    arguments: dict[str, Any],
    *,
    caps: dict[str, Any] | None = None,
    **params: Any,
) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": caps
                if caps is not None
                else {"elicitation": {"form": {}}},
            },
            **params,
        },
    }


def answer(reply: str, question: str = "q1") -> dict[str, Any]:
    return {question: {"action": "accept", "content": {"answer": reply}}}


def tampered(state: str) -> str:
    middle = len(state) // 2
    return state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]


# ---- the same wire as the sidecar ---------------------------------------------------------


#: What the hop itself adds: each server's own Date and Server headers.
HOP_HEADERS = {"date", "server"}


def normalized(response: httpx.Response) -> dict[str, Any]:
    """Status, headers and body, with what differs by nature replaced: sealed values (a fresh
    nonce each) by their prefix, a sealed session id by its presence."""
    heads: dict[str, list[str]] = {}
    for key, value in response.headers.multi_items():
        if key in HOP_HEADERS:
            continue
        if key == "mcp-session-id":
            value = "<sealed session>"
        heads.setdefault(key, []).append(value)
    if response.content and heads.get("content-type", [""])[0].startswith("application/json"):
        body: Any = json.loads(response.content)
        result = body.get("result") if isinstance(body, dict) else None
        if isinstance(result, dict) and isinstance(result.get("requestState"), str):
            assert result["requestState"].startswith(SEALED), result
            result["requestState"] = SEALED + "<sealed>"
            heads.pop("content-length", None)  # (its length varies with the random id's bytes)
    else:
        body = response.text
    return {"status": response.status_code, "headers": heads, "body": body}


async def exchange(client: httpx.AsyncClient, base: str) -> list[tuple[str, dict[str, Any]]]:
    """The same requests, in the same order, to one gateway; each answer normalised."""
    url = base + "/mcp"
    out: list[tuple[str, dict[str, Any]]] = []

    async def send(label: str, body: Any, heads: dict[str, str], method: str = "POST") -> Any:
        heads = {**heads, "X-Request-Id": f"cmp-{len(out)}"}
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        response = await client.request(method, url, content=content, headers=heads)
        out.append((label, normalized(response)))
        return response

    survey = headers("tools/call", "survey")
    await send(
        "tools/list",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            },
        },
        headers("tools/list"),
    )
    await send("a call", call(2, "whoami", {}), headers("tools/call", "whoami"))
    first = await send("MRTR round 1", call(3, "survey", {"topic": "wire"}), survey)
    state = first.json()["result"]["requestState"]
    second = await send(
        "MRTR round 2",
        call(4, "survey", {"topic": "wire"}, inputResponses=answer("red"), requestState=state),
        survey,
    )
    state2 = second.json()["result"]["requestState"]
    await send(
        "MRTR round 3",
        call(
            5, "survey", {"topic": "wire"}, inputResponses=answer("42", "q2"), requestState=state2
        ),
        survey,
    )
    await send(
        "tampered state",
        call(
            6,
            "survey",
            {"topic": "wire"},
            inputResponses=answer("red"),
            requestState=tampered(state),
        ),
        survey,
    )
    await send(
        "state of other arguments",
        call(7, "survey", {"topic": "other"}, inputResponses=answer("red"), requestState=state),
        survey,
    )
    await send("missing capability", call(8, "survey", {"topic": "wire"}, caps={}), survey)
    await send("malformed JSON", b'{"jsonrpc": "2.0", "id": 9,', survey)
    await send("a member twice", b'{"jsonrpc":"2.0","id":10,"id":11,"method":"tools/list"}', survey)
    await send("header and body disagree", call(12, "whoami", {}), survey)
    await send("a notification", {"jsonrpc": "2.0", "method": "notifications/x"}, survey)
    await send("unknown tool", call(13, "nope", {}), headers("tools/call", "nope"))
    await send("GET", b"", headers("tools/call"), method="GET")
    await send(
        "foreign Origin", call(14, "whoami", {}), {**survey, "Origin": "http://evil.example"}
    )
    await send("foreign Host", call(15, "whoami", {}), {**survey, "Host": "evil.example"})
    legacy = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    init = {
        "jsonrpc": "2.0",
        "id": 16,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "wire", "version": "1"},
        },
    }
    opened = await send("2025-era initialize", init, legacy)
    session = {**legacy, "MCP-Protocol-Version": "2025-06-18"}
    session["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    await send(
        "2025-era initialized",
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        session,
    )
    await send(
        "2025-era call in its session",
        {"jsonrpc": "2.0", "id": 17, "method": "tools/call", "params": {"name": "whoami"}},
        session,
    )
    await send(
        "2025-era session id tampered",
        {"jsonrpc": "2.0", "id": 18, "method": "tools/list"},
        {**session, "Mcp-Session-Id": tampered(session["Mcp-Session-Id"])},
    )
    return out


async def test_answers_are_the_sidecars(servers: Servers) -> None:
    """Good, malformed and refused requests and MRTR rounds get the same answer from the app
    wrapped in-process as from the same app behind ``mcp-edge serve``."""
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        sidecar = await exchange(client, servers.base("sidecar"))
        in_process = await exchange(client, servers.base("wrapped"))
    assert [label for label, _ in sidecar] == [label for label, _ in in_process]
    differ = [
        f"{label}:\n  sidecar:    {a}\n  in-process: {b}"
        for (label, a), (_, b) in zip(sidecar, in_process, strict=True)
        if a != b
    ]
    assert not differ, "\n".join(differ)
    # The comparison saw the edge at work, not two pass-throughs.
    answers = dict(sidecar)
    assert answers["tampered state"]["body"]["error"]["data"] == {"reason": "integrity"}
    assert answers["missing capability"]["status"] == 400
    assert answers["foreign Host"]["status"] == 421
    assert answers["MRTR round 1"]["headers"]["x-request-id"] == ["cmp-2"]


# ---- the app behind the Edge ---------------------------------------------------------------


async def stats(client: httpx.AsyncClient, base: str) -> dict[str, Any]:
    response = await client.get(base + "/stats")  # the app's own page: not guarded
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_a_tampered_state_never_reaches_the_app(servers: Servers) -> None:
    base = servers.base("wrapped")
    marker = f"m-{uuid.uuid4().hex[:8]}"
    chain = headers("tools/call", "chain")
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        first = await client.post(
            base + "/mcp", json=call(1, "chain", {"marker": marker, "rounds": 2}), headers=chain
        )
        state = first.json()["result"]["requestState"]
        assert state.startswith(SEALED)
        assert (await stats(client, base))["markers"][marker] == 1
        refused = await client.post(
            base + "/mcp",
            json=call(
                2,
                "chain",
                {"marker": marker, "rounds": 2},
                inputResponses={"r1": {"action": "accept", "content": {}}},
                requestState=tampered(state),
            ),
            headers=chain,
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["data"] == {"reason": "integrity"}
        assert (await stats(client, base))["markers"][marker] == 1  # the app never saw it
        accepted = await client.post(
            base + "/mcp",
            json=call(
                3,
                "chain",
                {"marker": marker, "rounds": 2},
                inputResponses={"r1": {"action": "accept", "content": {}}},
                requestState=state,
            ),
            headers=chain,
        )
        assert accepted.json()["result"]["resultType"] == "input_required"
        assert (await stats(client, base))["markers"][marker] == 2


async def survey_with_client(url: str, topic: str) -> tuple[str, list[str]]:
    asked: list[str] = []
    replies = iter(["red", "42", "yes"])

    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"answer": next(replies)})

    async with Client(url, mode=MODERN, elicitation_callback=on_elicit) as client:
        tools = await client.list_tools()
        assert {"survey", "chain", "whoami"} <= {t.name for t in tools.tools}
        result = await client.call_tool("survey", {"topic": topic})
    return result.content[0].text, asked


async def test_the_sdk_client_completes_flows_through_the_wrapped_app(servers: Servers) -> None:
    text, asked = await survey_with_client(servers.base("wrapped") + "/mcp", "wrapped")
    assert asked == ["Favourite colour?", "Lucky number?", "Ship it?"]
    assert text == "wrapped: red, 42, yes | served by in-process x4"


async def test_admin_endpoints_under_the_admin_path(servers: Servers) -> None:
    base = servers.base("wrapped") + "/edge"
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        ready = await client.get(base + "/readyz")
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        await client.post(
            servers.base("wrapped") + "/mcp",
            json=call(1, "whoami", {}),
            headers=headers("tools/call", "whoami"),
        )
        metrics = await client.get(base + "/metrics")
        assert metrics.status_code == 200
        assert 'mcp_edge_requests_total{method="tools/call",route="default",status="200"}' in (
            metrics.text
        )
        assert (await client.post(base + "/metrics")).status_code == 405


# ---- a Starlette host app -----------------------------------------------------------------


async def test_host_app_paths_pass_untouched(servers: Servers) -> None:
    base = servers.base("hosted")
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        hello = await client.get(base + "/hello")
        missing = await client.get(base + "/a/other")
    assert hello.status_code == 200 and hello.text == "hello from the host app"
    assert hello.headers["x-host-app"] == "yes" and "x-request-id" not in hello.headers
    assert missing.status_code == 404 and "x-request-id" not in missing.headers


@pytest.mark.parametrize("path", ["/a/mcp", "/b/mcp"])
async def test_middleware_and_mounted_edge_guard_their_paths(servers: Servers, path: str) -> None:
    """``/a/mcp``: the host's ``Middleware(Edge, path="/a/mcp")`` around an SDK app mounted at
    ``/a``; ``/b/mcp``: an ``Edge(path="/mcp")`` mounted at ``/b`` (its ``root_path``)."""
    url = servers.base("hosted") + path
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        first = await client.post(
            url, json=call(1, "survey", {"topic": "t"}), headers=headers("tools/call", "survey")
        )
    assert first.json()["result"]["requestState"].startswith(SEALED)
    assert first.headers["x-request-id"]
    text, _ = await survey_with_client(url, "hosted")
    assert text == f"hosted: red, 42, yes | served by {path[1]} x4"


async def test_one_edges_state_is_refused_by_the_other(servers: Servers) -> None:
    base = servers.base("hosted")
    survey = headers("tools/call", "survey")
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        first = await client.post(
            base + "/b/mcp", json=call(1, "survey", {"topic": "t"}), headers=survey
        )
        state = first.json()["result"]["requestState"]
        retry = call(2, "survey", {"topic": "t"}, inputResponses=answer("red"), requestState=state)
        elsewhere = await client.post(base + "/a/mcp", json=retry, headers=survey)
        home = await client.post(base + "/b/mcp", json=retry, headers=survey)
    assert elsewhere.status_code == 400
    assert elsewhere.json()["error"]["message"] == "Invalid or expired requestState"
    assert home.json()["result"]["resultType"] == "input_required"


async def test_a_flow_moves_from_the_sidecar_to_in_process(servers: Servers) -> None:
    """One key ring, one gateway id and route: a state the sidecar sealed opens in-process (a
    deployment can move in-process mid-flow). Back, the sidecar's endpoint affinity sends a state
    to the endpoint it names, and an in-process one names none of the sidecar's."""
    survey = headers("tools/call", "survey")
    outcomes = {}
    async with httpx.AsyncClient(timeout=15, trust_env=False) as client:
        for first, then in (("sidecar", "wrapped"), ("wrapped", "sidecar")):
            opened = await client.post(
                servers.base(first) + "/mcp", json=call(1, "survey", {"topic": "t"}), headers=survey
            )
            retry = call(
                2,
                "survey",
                {"topic": "t"},
                inputResponses=answer("red"),
                requestState=opened.json()["result"]["requestState"],
            )
            outcomes[then] = await client.post(
                servers.base(then) + "/mcp", json=retry, headers=survey
            )
    moved = outcomes["wrapped"]
    assert moved.json()["result"]["inputRequests"]["q2"]["params"]["message"] == "Lucky number?"
    back = outcomes["sidecar"]
    assert back.status_code == 502 and back.json()["error"]["data"] == {"reason": "endpoint_gone"}
