"""One endpoint, several MCP servers: a route with ``members:`` end to end.

One gateway for the module, one route with four members of three kinds:

- ``survey``: tests/servers/mrtr_upstream.py (the ``mcp`` 2.x SDK, 2026-07-28 over HTTP), prefix
  ``survey``;
- ``old``: tests/servers/legacy_server.py (``mcp`` 1.x, 2025-era, through the legacy bridge),
  prefix ``old``, ``add`` renamed ``sum``, ``url_*`` excluded;
- ``odd``: tests/support/hostile_upstream.py, the unprefixed member, listing what no real server
  lists (a name carrying another member's prefix, names that are no names, a URI that tries to
  reach another member), paging its tools, and never answering ``prompts/list`` (its deadline);
- ``gone``: an HTTP member nobody listens for, until the last test starts one there.

Clients: the ``mcp`` 2.x SDK client and raw HTTP.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.subscriptions import ResourceUpdated, ToolsListChanged
from mcp.types import ElicitResult

from tests.conftest import Running, start_gateway, start_upstream
from tests.scale.cluster import metric, scrape
from tests.support.answers import rpc_answer
from tests.support.hostile_upstream import Exchange, HostileUpstream, keepalive_forever, response
from tests.support.legacy import LegacyStats, start_legacy
from tests.support.processes import free_port, python_script, serving
from tests.support.sandbox import stdio_server_command

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
CAPS = {"elicitation": {"form": {}}}
#: Every tools/list the odd member was asked (a call must never fetch a list to route).
ODD_LISTS: list[object] = []


async def odd_tools(x: Exchange) -> None:
    ODD_LISTS.append(x.id)
    cursor = (x.doc.get("params") or {}).get("cursor")
    if cursor == "page-2":
        result = {"tools": [{"name": "second_page", "inputSchema": {"type": "object"}}]}
    else:
        result = {
            "tools": [
                {"name": name, "inputSchema": {"type": "object"}}
                for name in ("plain", "survey__steal", "", "a\u0000b", "x" * 200)
            ],
            "nextCursor": "page-2",
        }
    await x.json(json.dumps(response(x.id, {"resultType": "complete", **result})).encode())


async def odd_resources(x: Exchange) -> None:
    result = {
        "resultType": "complete",
        "resources": [
            {"uri": "file:///odd.txt", "name": "odd"},
            {"uri": "survey+file:///stolen", "name": "escape"},
            {"uri": "http://169.254.169.254/latest", "name": "metadata"},
        ],
    }
    await x.json(json.dumps(response(x.id, result)).encode())


async def odd_listen(x: Exchange) -> None:
    """Acknowledges nothing it honours, then only keeps the stream open."""
    ack = {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged", "params": {}}
    await x.start_chunked(b"application/json")
    await x.chunk(json.dumps(ack).encode() + b"\n")
    await x.forever(lambda n: b"\n", 0.5)


async def odd_discover(x: Exchange) -> None:
    result = {
        "resultType": "complete",
        "supportedVersions": [MODERN],
        "capabilities": {"tools": {}},
        "instructions": "The odd one.",
    }
    await x.json(json.dumps(response(x.id, result)).encode())


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    odd = HostileUpstream(
        {
            "tools/list": odd_tools,
            "resources/list": odd_resources,
            "server/discover": odd_discover,
            "prompts/list": keepalive_forever,
            "subscriptions/listen": odd_listen,
        }
    ).start()
    gone_port = free_port()
    with ExitStack() as stack:
        stack.callback(odd.stop)
        survey = start_upstream(
            stack,
            "mrtr_upstream.py",
            module_tmp,
            "--keys",
            "ab" * 32,
            "--growable",
            "--list-ttl-ms",
            "600000",
        )
        old = start_legacy(stack, module_tmp, "--instance", "old", "--subscriptions")
        config = {
            "routes": [
                {
                    "name": "tools",
                    "path": "/mcp",
                    "cache": {"enabled": True},
                    "members": [
                        {"name": "survey", "upstream": survey.url, "era": "modern"},
                        {
                            "name": "old",
                            "upstream": old.url,
                            "era": "legacy",
                            "tools": {"rename": {"add": "sum"}, "exclude": ["url_*"]},
                        },
                        {
                            "name": "odd",
                            "prefix": "",
                            "upstream": odd.url,
                            "era": "modern",
                            "list_timeout_ms": 800,
                        },
                        {
                            "name": "gone",
                            "upstream": f"http://127.0.0.1:{gone_port}/mcp",
                            "era": "modern",
                        },
                        {
                            "name": "local",
                            "upstream": {
                                "command": stdio_server_command("legacy_server.py", "--stdio")
                            },
                        },
                    ],
                }
            ]
        }
        gateway = start_gateway(stack, module_tmp, keys=state_key, config=config)
        # A second replica: a flow's later round may reach either.
        other = start_gateway(stack, module_tmp, keys=state_key, config=config)
        for gw in (gateway, other):
            wait_member_ready(gw, "local")
        yield {
            "other": other,
            "gateway": gateway,
            "survey": survey,
            "old": old,
            "odd": odd,
            "gone_port": gone_port,
            "tmp": module_tmp,
            "stack": stack,
        }


def wait_member_ready(gw: Running, member: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        doc = httpx.get(gw.base + "/readyz", timeout=5).json()
        if doc.get("routes", {}).get("tools", {}).get("members", {}).get(member, {}).get("ready"):
            return
        time.sleep(0.2)
    raise TimeoutError(f"member {member} not ready: {doc}\n{gw.process.log_tail()}")


def post(
    gateway: Running, rid: Any, method: str, params: dict | None = None, **kw: Any
) -> httpx.Response:
    params = dict(params or {})
    params.setdefault(
        "_meta",
        {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": CAPS,
        },
    )
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    name = kw.get("name") or (
        params.get("uri") if method == "resources/read" else params.get("name")
    )
    if method in ("tools/call", "prompts/get", "resources/read") and name is not None:
        headers["Mcp-Name"] = name
    with httpx.Client(timeout=30) as http:
        return http.post(
            gateway.url,
            headers=headers,
            json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
        )


def test_lists_merge_members_under_their_names_and_say_who_is_missing(env):
    resp = post(env["gateway"], 1, "tools/list")
    assert resp.status_code == 200
    result = resp.json()["result"]
    names = [t["name"] for t in result["tools"]]
    # Members in configuration order, each item under its federated name.
    assert {"survey__survey", "survey__chain", "survey__whoami"} <= set(names)
    assert {"old__book_table", "sum", "old__three_questions"} <= set(names)
    assert "old__add" not in names and "old__url_consent" not in names
    assert names.index("survey__survey") < names.index("sum") < names.index("plain")
    # The unprefixed member's name carrying another member's prefix, and names that are no
    # names, never reach the merged list.
    assert "survey__steal" not in names and "" not in names
    assert not any("\u0000" in n or len(n) > 128 for n in names)
    # The dead member is missing, said so to the client, and nothing is cacheable.
    missing = result["_meta"]["io.mcp-edge/federation"]["missing"]
    assert missing == [{"member": "gone", "reason": "unavailable"}]
    assert resp.headers["mcp-edge-missing"] == "gone"
    assert result["ttlMs"] == 0 and result["cacheScope"] == "private"


def test_pages_across_members_ride_in_a_sealed_cursor(env):
    first = post(env["gateway"], 2, "tools/list").json()["result"]
    cursor = first["nextCursor"]
    assert cursor.startswith("mcpec1.") and "page-2" not in cursor
    # The next page through the other replica: the cursor is sealed, not remembered.
    second = post(env["other"], 3, "tools/list", {"cursor": cursor}).json()["result"]
    # Only the member with a next page was asked again.
    assert [t["name"] for t in second["tools"]] == ["second_page"]
    assert "nextCursor" not in second
    tampered = cursor[:-4] + ("AAAA" if not cursor.endswith("AAAA") else "BBBB")
    refused = post(env["gateway"], 4, "tools/list", {"cursor": tampered}).json()
    assert refused["id"] == 4 and refused["error"]["code"] == -32602
    other_method = post(env["gateway"], 5, "prompts/list", {"cursor": cursor}).json()
    assert other_method["error"]["data"]["reason"] == "method"


def test_a_slow_member_does_not_hold_the_list(env):
    resp = post(env["gateway"], 6, "prompts/list")
    result = resp.json()["result"]
    assert {"old__greeting", "old__briefing"} <= {p["name"] for p in result["prompts"]}
    missing = {
        m["member"]: m["reason"] for m in result["_meta"]["io.mcp-edge/federation"]["missing"]
    }
    assert missing["odd"] == "timeout"
    assert result["ttlMs"] == 0
    # Its deadline (0.8 s), not the route's read timeout, bounded the answer.
    assert resp.elapsed.total_seconds() < 10


def test_resource_uris_are_federated_and_cannot_escape(env):
    result = post(env["gateway"], 7, "resources/list").json()["result"]
    uris = [r["uri"] for r in result["resources"]]
    assert "old+static://hello" in uris
    assert "file:///odd.txt" in uris  # the unprefixed member's URI, unchanged
    assert "survey+file:///stolen" not in uris  # would route to another member
    read = rpc_answer(post(env["gateway"], 8, "resources/read", {"uri": "old+static://hello"}))
    assert read["result"]["contents"][0]["uri"] == "old+static://hello"
    # A URI naming an address reaches no member but the unprefixed one, as its own URI.
    unknown = rpc_answer(
        post(env["gateway"], 9, "resources/read", {"uri": "nobody+http://10.0.0.1/"})
    )
    assert unknown["id"] == 9


def test_calls_are_routed_by_name_to_each_kind(env):
    gateway = env["gateway"]
    lists_before = len(ODD_LISTS)
    whoami = rpc_answer(
        post(gateway, 10, "tools/call", {"name": "survey__whoami", "arguments": {}})
    )
    assert whoami["result"]["content"][0]["text"].startswith("127.0.0.1:")
    total = rpc_answer(
        post(gateway, 11, "tools/call", {"name": "sum", "arguments": {"a": 2, "b": 3}})
    )
    assert total["result"]["content"][0]["text"] == "5"
    plain = rpc_answer(post(gateway, 12, "tools/call", {"name": "plain", "arguments": {}}))
    assert plain["result"]["content"][0]["text"] == "done"
    # A renamed tool's prefixed original reaches nobody.
    before = LegacyStats(env["old"]).get_sync()
    err = rpc_answer(
        post(gateway, 13, "tools/call", {"name": "old__add", "arguments": {"a": 1, "b": 1}})
    )
    assert err["id"] == 13 and err["error"]["code"] == -32602
    assert "old__add" in err["error"]["message"]
    assert LegacyStats(env["old"]).get_sync()["tools"] == before["tools"]
    # A name with no member's prefix is the unprefixed member's, as its own name.
    odd = rpc_answer(post(gateway, 14, "tools/call", {"name": "nobody__x", "arguments": {}}))
    assert odd["result"]["content"][0]["text"] == "done"
    # No list was fetched to route any of these calls.
    assert len(ODD_LISTS) == lists_before


async def test_mrtr_through_a_2026_member_and_a_legacy_member(env):
    asked: list[str] = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        if "people" in params.message:
            return ElicitResult(action="accept", content={"size": 4})
        return ElicitResult(action="accept", content={"answer": str(len(asked))})

    async with Client(env["gateway"].url, mode=MODERN, elicitation_callback=on_elicit) as client:
        survey = await client.call_tool("survey__survey", {"topic": "ops"})
        assert survey.content[0].text.startswith("ops: 1, 2, 3")
        booked = await client.call_tool("old__book_table", {"date": "friday"})
        assert booked.content[0].text == "Booked 4 on friday"
        local = await client.call_tool("local__book_table", {"date": "monday"})
        assert local.content[0].text == "Booked 4 on monday"
        total = await client.call_tool("local__add", {"a": 20, "b": 22})
        assert total.content[0].text == "42"


@pytest.mark.parametrize("member", ["old", "local"])
def test_a_bridged_members_second_round_on_another_replica(env, member):
    """The question of a legacy member (HTTP, or a local process held by the first replica) is
    answered through the other replica: the state binds the member, parked calls are forwarded
    by route and member."""
    arguments = {"date": "sunday"}
    first = rpc_answer(
        post(
            env["gateway"],
            60,
            "tools/call",
            {"name": f"{member}__book_table", "arguments": arguments},
        )
    )
    result = first["result"]
    assert result["resultType"] == "input_required", first
    (key,) = result["inputRequests"]
    done = rpc_answer(
        post(
            env["other"],
            61,
            "tools/call",
            {
                "name": f"{member}__book_table",
                "arguments": arguments,
                "requestState": result["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"size": 3}}},
            },
        )
    )
    assert done["id"] == 61
    assert done["result"]["content"][0]["text"] == "Booked 3 on sunday", done


def test_a_state_from_one_member_replayed_at_another_reaches_nobody(env):
    gateway = env["gateway"]
    first = rpc_answer(
        post(gateway, 20, "tools/call", {"name": "survey__survey", "arguments": {"topic": "t"}})
    )
    state = first["result"]["requestState"]
    before = LegacyStats(env["old"]).get_sync()["tools"]
    replay = rpc_answer(
        post(
            gateway,
            21,
            "tools/call",
            {
                "name": "old__book_table",
                "arguments": {"topic": "t"},
                "requestState": state,
                "inputResponses": {"q1": {"action": "accept", "content": {"answer": "x"}}},
            },
        )
    )
    assert replay["id"] == 21 and replay["error"]["code"] == -32602
    assert replay["error"]["data"]["reason"] == "binding"
    assert LegacyStats(env["old"]).get_sync()["tools"] == before


def test_discover_is_merged(env):
    result = rpc_answer(post(env["gateway"], 30, "server/discover"))["result"]
    assert MODERN in result["supportedVersions"]
    assert "tools" in result["capabilities"]
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-edge"
    for member in ("survey", "old", "odd"):
        assert f"{member}:" in result["instructions"]
    assert "The odd one." in result["instructions"]


def test_2025_clients_are_refused(env):
    with httpx.Client(timeout=10) as http:
        resp = http.post(
            env["gateway"].url,
            headers={"Accept": ACCEPT},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
    assert resp.status_code == 400 and "2026-07-28" in resp.text


def tool_names(gateway: Running, rid: int) -> list[str]:
    return [t["name"] for t in post(gateway, rid, "tools/list").json()["result"]["tools"]]


async def test_listen_fans_in_and_a_list_change_reaches_the_client_and_the_cache(env):
    gateway = env["gateway"]
    # The survey member's part is kept by the edge cache (its own ttl: ten minutes).
    assert "survey__fresh" not in tool_names(gateway, 50)
    async with (
        Client(gateway.url, mode=MODERN) as client,
        client.listen(
            tools_list_changed=True, resource_subscriptions=["old+static://hello"]
        ) as sub,
    ):
        assert sub.honored.tools_list_changed
        assert sub.honored.resource_subscriptions == ["old+static://hello"]
        grown = await client.call_tool("survey__grow", {"name": "fresh"})
        assert grown.content[0].text == "added fresh"
        async with asyncio.timeout(15):
            assert await anext(sub) == ToolsListChanged()
        # The member's cached part went with its list change: the new tool shows at once.
        assert "survey__fresh" in tool_names(gateway, 51)
        fresh = rpc_answer(
            post(gateway, 52, "tools/call", {"name": "survey__fresh", "arguments": {}})
        )
        assert fresh["result"]["content"][0]["text"] == "grown"
        # A legacy member's resource update, its URI in federated form.
        told = await client.call_tool("old__touch", {"uri": "static://hello"})
        assert told.structured_content["result"] == 1
        async with asyncio.timeout(15):
            assert await anext(sub) == ResourceUpdated(uri="old+static://hello")

    # The client left: every member stream was closed (nobody is subscribed any more).
    async def touch() -> int:
        async with Client(gateway.url, mode=MODERN) as other:
            result = await other.call_tool("old__touch", {"uri": "static://hello"})
            return int(result.structured_content["result"])

    async with asyncio.timeout(15):
        while await touch():
            await asyncio.sleep(0.2)


def test_a_member_down_fails_alone_and_is_used_again_at_once(env):
    gateway = env["gateway"]
    err = rpc_answer(post(gateway, 40, "tools/call", {"name": "gone__whoami", "arguments": {}}))
    assert err["id"] == 40 and err["error"]["code"] == -32603
    assert err["error"]["data"]["member"] == "gone"
    assert err["error"]["data"]["name"] == "gone__whoami"  # the name the client used
    assert err["error"]["data"]["reason"] == "upstream_unreachable"
    assert "127.0.0.1" not in json.dumps(err)  # no internals
    ok = rpc_answer(post(gateway, 41, "tools/call", {"name": "survey__whoami", "arguments": {}}))
    assert "result" in ok
    with httpx.Client(timeout=10) as http:
        ready = http.get(gateway.url.replace("/mcp", "/readyz")).json()
    members = ready["routes"]["tools"]["members"]
    assert members["gone"]["state"] == "down" and members["survey"]["state"] == "up"
    samples = scrape(gateway.url.replace("/mcp", ""))
    assert metric(samples, "mcp_edge_member_up", route="tools", member="gone") == 0
    assert metric(samples, "mcp_edge_member_up", route="tools", member="survey") == 1
    assert metric(samples, "mcp_edge_federation_missing_total", route="tools", member="gone") >= 1
    assert metric(samples, "mcp_edge_federation_collisions_total", route="tools", member="odd") >= 1
    # The member comes back: its very next call is served.
    port = env["gone_port"]
    env["stack"].enter_context(
        serving(
            "gone",
            python_script(
                "mrtr_upstream.py", "--port", str(port), "--keys", "cd" * 32, "--instance", "back"
            ),
            port=port,
            log_path=env["tmp"] / "gone.log",
        )
    )
    back = rpc_answer(post(gateway, 42, "tools/call", {"name": "gone__whoami", "arguments": {}}))
    assert back["result"]["content"][0]["text"] == "back"
