"""The TypeScript SDK server (`tests/servers/ts_server.mjs`, `@modelcontextprotocol/server` 2.x)
behaves on the wire the way the federation tests will rely on: `server/discover` and the lists
with no session, calls, a prompt, a static resource and a template, progress over SSE, the
MRTR round with a requestState sealed by the SDK's codec (accepted by a replica sharing the key,
refused tampered, replayed on another method, or by a process with another key), and
`subscriptions/listen` hearing the tool list change.

Raw httpx first, then the real `mcp` 2.x client. Three processes for the module: replicas A and
B share a state key and a request log; C has its own key and the colliding and hostile names.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.types import ElicitResult

from tests.support.ts_server import (
    COLLIDING,
    PROMPTS,
    RESOURCES,
    REVISION,
    SERVER_NAME,
    TEMPLATES,
    TOOLS,
    TsServer,
    launch_ts_server,
    mcp_headers,
    mcp_request,
    names,
    wait_answering,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ELICIT = {"elicitation": {"form": {}}}
STATE_KEY = "a shared requestState key for replicas A and B, 32+ bytes"


@dataclass(frozen=True)
class Servers:
    a: TsServer
    b: TsServer
    c: TsServer


@pytest.fixture(scope="module")
def servers(module_tmp: Path) -> Iterator[Servers]:
    with ExitStack() as stack:
        shared_log = module_tmp / "replicas.jsonl"
        a, b = (
            launch_ts_server(stack, module_tmp, instance=i, state_key=STATE_KEY, log=shared_log)
            for i in ("a", "b")
        )
        c = launch_ts_server(stack, module_tmp, instance="c", collide=True, hostile="docs")
        yield Servers(wait_answering(a), wait_answering(b), wait_answering(c))


def marker() -> str:
    return uuid.uuid4().hex[:10]


def post(
    server: TsServer,
    request_id: int | str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
) -> httpx.Response:
    target = (params or {}).get("name") or (params or {}).get("uri")
    return httpx.post(
        server.url,
        headers=mcp_headers(method, target),
        json=mcp_request(request_id, method, params, capabilities=capabilities),
        timeout=15,
    )


def result(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    return body["result"]


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[5:])
        for line in text.splitlines()
        if line.startswith("data:") and line[5:].strip()
    ]


# ---- discover and lists -----------------------------------------------------------------------


def test_discover_advertises_what_is_served_without_a_session(servers: Servers):
    r = post(servers.a, 1, "server/discover")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    assert "mcp-session-id" not in r.headers
    found = r.json()["result"]
    assert found["supportedVersions"] == [REVISION]
    assert found["capabilities"] == {
        "tools": {"listChanged": True},
        "prompts": {"listChanged": True},
        "resources": {"subscribe": True, "listChanged": True},
        "completions": {},
    }
    assert found["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == SERVER_NAME
    assert (found["resultType"], found["ttlMs"], found["cacheScope"]) == ("complete", 0, "private")
    assert "ts_* tools" in found["instructions"]


def test_lists_hold_the_default_surface_and_nothing_else(servers: Servers):
    tools = result(post(servers.a, 1, "tools/list"))
    assert names(tools["tools"]) == list(TOOLS)
    assert "nextCursor" not in tools
    assert names(result(post(servers.a, 2, "prompts/list"))["prompts"]) == list(PROMPTS)
    resources = result(post(servers.a, 3, "resources/list"))["resources"]
    assert names(resources, "uri") == list(RESOURCES)
    templates = result(post(servers.a, 4, "resources/templates/list"))["resourceTemplates"]
    assert names(templates, "uriTemplate") == list(TEMPLATES)


def test_the_flags_add_colliding_and_hostile_names(servers: Servers):
    tools = names(result(post(servers.c, 1, "tools/list"))["tools"])
    assert tools == [*TOOLS, COLLIDING["tool"], "docs__shadow", "ts__inner"]
    prompts = names(result(post(servers.c, 2, "prompts/list"))["prompts"])
    assert prompts == [*PROMPTS, COLLIDING["prompt"], "docs__shadow"]
    uris = names(result(post(servers.c, 3, "resources/list"))["resources"], "uri")
    assert uris == [*RESOURCES, COLLIDING["resource"], "docs+ts://shadow"]
    # Each answers in a way that names this server.
    called = result(post(servers.c, 4, "tools/call", {"name": COLLIDING["tool"]}))
    assert called["content"][0]["text"] == "ts-server: simple text"
    read = result(post(servers.c, 5, "resources/read", {"uri": "docs+ts://shadow"}))
    assert read["contents"][0] == {
        "uri": "docs+ts://shadow",
        "mimeType": "text/plain",
        "text": "ts-server: docs+ts://shadow",
    }


# ---- calls, prompt, resources, completion, the request log --------------------------------------


def test_calls_prompt_resources_and_completion_and_their_log(servers: Servers):
    m = marker()
    echo = result(
        post(
            servers.a,
            1,
            "tools/call",
            {"name": "ts_echo", "arguments": {"text": "hi", "marker": m}},
        )
    )
    assert echo["content"] == [{"type": "text", "text": "echo: hi"}]
    assert echo["resultType"] == "complete"
    prompt = result(
        post(servers.a, 2, "prompts/get", {"name": "ts_greeting", "arguments": {"name": "Ada"}})
    )
    assert prompt["messages"][0]["content"]["text"] == "Hello, Ada!"
    static = result(post(servers.a, 3, "resources/read", {"uri": "ts://static/info"}))
    assert static["contents"][0]["text"] == "ts-server static info"
    item = result(post(servers.a, 4, "resources/read", {"uri": f"ts://items/{m}"}))
    assert item["contents"] == [
        {"uri": f"ts://items/{m}", "mimeType": "text/plain", "text": f"item {m}"}
    ]
    completion = result(
        post(
            servers.a,
            5,
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "ts_greeting"},
                "argument": {"name": "name", "value": "al"},
            },
        )
    )
    assert completion["completion"]["values"] == ["Alan", "Alonzo"]
    # An unknown resource: the spec's error, naming it.
    missing = post(servers.a, 6, "resources/read", {"uri": "ts://nothing"}).json()
    assert missing["error"]["code"] == -32602 and missing["id"] == 6

    (logged,) = servers.a.requests(m)
    assert logged == {
        "instance": "a",
        "http": "POST",
        "id": 1,
        "method": "tools/call",
        "name": "ts_echo",
        "uri": None,
        "arguments": {"text": "hi", "marker": m},
        "requestState": False,
        "inputResponses": False,
        "marker": m,
        "protocolVersion": REVISION,
    }
    reads = [e for e in servers.a.requests() if e["uri"] == f"ts://items/{m}"]
    assert [(e["method"], e["instance"]) for e in reads] == [("resources/read", "a")]


def test_progress_notifications_come_first_on_an_sse_answer(servers: Servers):
    m = marker()
    params = {
        "name": "ts_progress",
        "arguments": {"steps": 3, "marker": m},
        "_meta": {"progressToken": m},
    }
    r = post(servers.a, 7, "tools/call", params)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(r.text)
    assert [msg.get("method") for msg in messages] == ["notifications/progress"] * 3 + [None]
    assert [msg["params"]["progress"] for msg in messages[:3]] == [1, 2, 3]
    assert all(msg["params"]["progressToken"] == m for msg in messages[:3])
    assert messages[-1]["id"] == 7 and messages[-1]["result"]["content"][0]["text"] == "counted 3"
    # Without a token: no notification, one JSON answer.
    quiet = post(servers.a, 8, "tools/call", {"name": "ts_progress", "arguments": {"steps": 2}})
    assert quiet.headers["content-type"].startswith("application/json")
    assert result(quiet)["content"][0]["text"] == "counted 2"


# ---- MRTR ------------------------------------------------------------------------------------


def confirm_params(m: str, **extra: Any) -> dict[str, Any]:
    return {"name": "ts_confirm", "arguments": {"action": f"launch-{m}", "marker": m}, **extra}


ACCEPTED = {"confirm": {"action": "accept", "content": {"confirm": True}}}


def test_mrtr_round_trip_with_sealed_state_across_replicas(servers: Servers):
    m = marker()
    first = result(post(servers.a, 1, "tools/call", confirm_params(m), capabilities=ELICIT))
    assert first["resultType"] == "input_required"
    asked = first["inputRequests"]["confirm"]
    assert asked["method"] == "elicitation/create" and asked["params"]["mode"] == "form"
    assert asked["params"]["requestedSchema"]["properties"] == {
        "confirm": {"type": "boolean", "title": "Confirm"}
    }
    state = first["requestState"]
    assert state.startswith("v1.") and state.count(".") == 2  # the SDK's HMAC codec

    # The retry reaches replica B, which shares A's key: it completes there.
    retry = confirm_params(m, requestState=state, inputResponses=ACCEPTED)
    done = result(post(servers.b, 2, "tools/call", retry, capabilities=ELICIT))
    assert done["content"] == [{"type": "text", "text": f"confirmed launch-{m}"}]

    # A declined answer: a tool error, not a protocol error.
    declined = confirm_params(
        m, requestState=state, inputResponses={"confirm": {"action": "decline"}}
    )
    refused = result(post(servers.a, 3, "tools/call", declined, capabilities=ELICIT))
    assert refused["isError"] is True and "(decline)" in refused["content"][0]["text"]

    log = servers.a.requests(m)
    assert [(e["instance"], e["requestState"], e["inputResponses"]) for e in log] == [
        ("a", False, False),
        ("b", True, True),
        ("a", True, True),
    ]
    assert all(state not in json.dumps(e) for e in log)  # the state itself is never logged


def test_state_is_refused_tampered_on_another_method_or_by_another_key(servers: Servers):
    m = marker()
    state = result(post(servers.a, 1, "tools/call", confirm_params(m), capabilities=ELICIT))[
        "requestState"
    ]
    body, mac = state.rsplit(".", 1)
    tampered = f"{body}.{mac[:5]}{'A' if mac[5] != 'A' else 'B'}{mac[6:]}"
    attempts = {
        "tampered": (
            servers.a,
            "tools/call",
            confirm_params(m, requestState=tampered, inputResponses=ACCEPTED),
        ),
        "other key": (
            servers.c,
            "tools/call",
            confirm_params(m, requestState=state, inputResponses=ACCEPTED),
        ),
        "other method": (
            servers.a,
            "prompts/get",
            {
                "name": "ts_greeting",
                "arguments": {"name": "Ada"},
                "requestState": state,
                "inputResponses": ACCEPTED,
            },
        ),
    }
    for why, (server, method, params) in attempts.items():
        r = post(server, why, method, params, capabilities=ELICIT)
        assert r.status_code == 200, (why, r.text)
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": why,
            "error": {
                "code": -32602,
                "message": "Invalid or expired requestState",
                "data": {"reason": "invalid_request_state"},
            },
        }, why


def test_an_elicitation_the_client_cannot_answer_is_refused(servers: Servers):
    r = post(servers.a, 1, "tools/call", confirm_params(marker()))  # no elicitation capability
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == -32021, r.text


async def test_the_python_sdk_client_drives_the_round_and_gets_progress(servers: Servers):
    m = marker()
    asked: list[str] = []
    progress: list[float] = []

    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with (
        asyncio.timeout(30),
        Client(servers.a.url, mode=REVISION, elicitation_callback=on_elicit) as client,
    ):
        assert [t.name for t in (await client.list_tools()).tools] == list(TOOLS)
        confirmed = await client.call_tool("ts_confirm", {"action": f"launch-{m}", "marker": m})
        counted = await client.call_tool(
            "ts_progress", {"steps": 2, "marker": m}, progress_callback=on_progress
        )
        with pytest.raises(MCPError) as unknown:
            await client.get_prompt("no_such_prompt")
    assert confirmed.content[0].text == f"confirmed launch-{m}" and asked == [
        f"Confirm launch-{m}?"
    ]
    assert counted.content[0].text == "counted 2" and progress == [1, 2]
    assert unknown.value.error.code == -32602
    flags = [(e["name"], e["requestState"]) for e in servers.a.requests(m)]
    assert flags == [("ts_confirm", False), ("ts_confirm", True), ("ts_progress", False)]


# ---- subscriptions/listen ------------------------------------------------------------------------


def test_a_raw_listen_stream_is_acknowledged_and_hears_the_tool_list_change(servers: Servers):
    m = marker()
    listen = mcp_request(
        f"listen-{m}", "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
    )
    with (
        httpx.Client(timeout=httpx.Timeout(15, read=15)) as http,
        http.stream(
            "POST", servers.a.url, headers=mcp_headers("subscriptions/listen"), json=listen
        ) as stream,
    ):
        assert stream.status_code == 200 and stream.headers["content-type"].startswith(
            "text/event-stream"
        )
        lines = stream.iter_lines()
        frames = (
            json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip()
        )
        ack = next(frames)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == f"listen-{m}"
        grown = result(
            post(
                servers.a,
                2,
                "tools/call",
                {"name": "ts_grow", "arguments": {"name": m, "marker": m}},
            )
        )
        assert grown["content"][0]["text"] == f"added ts_grown_{m}"
        changed = next(frames)
    assert changed == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": f"listen-{m}"}},
    }
    # The grown tool is listed and callable on the process that grew it (state of that process).
    assert f"ts_grown_{m}" in names(result(post(servers.a, 3, "tools/list"))["tools"])
    called = result(post(servers.a, 4, "tools/call", {"name": f"ts_grown_{m}", "arguments": {}}))
    assert called["content"][0]["text"] == f"grown {m}"


async def test_the_python_sdk_client_listens_for_tools_and_resource_updates(servers: Servers):
    m = marker()
    async with (
        asyncio.timeout(30),
        Client(servers.a.url, mode=REVISION) as listener,
        Client(servers.a.url, mode=REVISION) as other,
    ):
        async with listener.listen(
            tools_list_changed=True, resource_subscriptions=["ts://static/info"]
        ) as sub:
            assert sub.honored.tools_list_changed is True
            assert sub.honored.resource_subscriptions == ["ts://static/info"]
            await other.call_tool("ts_touch", {"marker": m})
            assert await anext(sub) == ResourceUpdated(uri="ts://static/info")
            await other.call_tool("ts_grow", {"name": m, "marker": m})
            assert await anext(sub) == ToolsListChanged()
        tools = [t.name for t in (await other.list_tools()).tools]
    assert f"ts_grown_{m}" in tools
    assert [e["name"] for e in servers.a.requests(m)] == ["ts_touch", "ts_grow"]
