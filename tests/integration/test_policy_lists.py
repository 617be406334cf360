"""List filtering in process (a fake upstream only to answer in shapes a test needs: an SSE list,
a cacheable list behind the edge cache), the guard's policy hook on a route without rules, and
rules over arguments on a real route (a real gateway, ``mcp`` 2.x upstream and client)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import GatewayConfig
from tests.conftest import start_gateway, start_upstream
from tests.integration.test_misbehaving_upstream import (
    RING,
    FakeUpstream,
    hdrs,
    post,
    result_reply,
    rpc,
)

TOOLS = {
    "resultType": "complete",
    "ttlMs": 60000,
    "cacheScope": "public",
    "tools": [
        {"name": "get_x", "inputSchema": {"type": "object"}},
        {"name": "drop_x", "inputSchema": {"type": "object"}},
    ],
}


def app_with(upstream: FakeUpstream, policy: dict | None, **route: object) -> GatewayApp:
    doc = {"upstream": "http://127.0.0.1:9/mcp", "legacy_clients": "deny", **route}
    if policy is not None:
        doc["policy"] = policy
    config = GatewayConfig.model_validate({"auth": {"mode": "anonymous"}, "routes": [doc]})
    return GatewayApp(config, RING, inner_apps={"default": upstream})


READ_ONLY = {"default": "deny", "rules": [{"when": 'name.startsWith("get_")', "action": "allow"}]}


async def test_an_sse_list_is_filtered_in_its_final_event():
    app = app_with(FakeUpstream(result_reply(TOOLS, sse=True)), READ_ONLY)
    r = await post(app, rpc("tools/list", 3), hdrs("tools/list"))
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert "notifications/progress" in events[0]
    final = orjson.loads(events[-1])
    assert [t["name"] for t in final["result"]["tools"]] == ["get_x"] and final["id"] == 3
    assert final["result"]["cacheScope"] == "private"


async def test_the_edge_cache_keeps_the_whole_list_and_each_caller_gets_it_filtered():
    upstream = FakeUpstream(result_reply(TOOLS))
    app = app_with(upstream, READ_ONLY, cache={"enabled": True})
    first = await post(app, rpc("tools/list", 1), hdrs("tools/list"))
    second = await post(app, rpc("tools/list", 2), hdrs("tools/list"))
    assert len(upstream.received) == 1 and second.headers["x-mcp-edge-cache"] == "hit"
    for r, rid in ((first, 1), (second, 2)):
        doc = r.json()
        assert doc["id"] == rid and [t["name"] for t in doc["result"]["tools"]] == ["get_x"]


async def test_without_rules_lists_pass_untouched():
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": TOOLS})
    app = app_with(FakeUpstream(lambda doc: (200, "application/json", body)), {"default": "allow"})
    r = await post(app, rpc("tools/list", 1), hdrs("tools/list"))
    assert r.content == body  # not re-encoded, still public


async def test_a_denied_call_of_a_visible_tool_says_why_without_the_rule():
    upstream = FakeUpstream(result_reply({"resultType": "complete", "content": []}))
    policy = {
        "rules": [
            {
                "name": "tmp-only",
                "when": '!arguments.path.startsWith("/tmp/")',
                "action": "deny",
                "message": "Writes are allowed under /tmp only",
            }
        ]
    }
    app = app_with(upstream, policy)
    r = await post(
        app,
        rpc("tools/call", 4, name="write", arguments={"path": "/etc/x"}),
        hdrs("tools/call", "write"),
    )
    assert r.status_code == 400
    assert r.json()["error"] == {
        "code": -32602,
        "message": "Writes are allowed under /tmp only",
        "data": {"reason": "policy_denied"},
    }
    assert "startsWith" not in r.text and upstream.received == []
    ok = await post(
        app,
        rpc("tools/call", 5, name="write", arguments={"path": "/tmp/x"}),
        hdrs("tools/call", "write"),
    )
    assert ok.status_code == 200 and len(upstream.received) == 1


# ---------------------------------------------------------------- a real route

#: Rules that read `arguments` next to conditions that do not: lists show what the other
#: conditions allow (three-valued: `false && unknown` is false), not every tool.
ARGUMENT_RULES = {
    "default": "deny",
    "rules": [
        {
            "name": "paris-only",
            "when": 'name == "get_weather" && arguments.city == "Paris"',
            "action": "allow",
        },
        {
            "name": "one-repo",
            "when": 'arguments.repo == "acme/site" && name == "delete_repo"',
            "action": "approve",
        },
        {
            "name": "no-etc",
            "when": 'name == "list_files" && arguments.path.startsWith("/etc")',
            "action": "deny",
        },
    ],
}


@pytest.fixture(scope="module")
def real(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    log = module_tmp / "policy-lists-upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "policy_upstream.py", module_tmp, "--log", str(log))
        config = {
            "routes": [
                {
                    "name": "args",
                    "path": "/mcp",
                    "upstream": upstream.url,
                    "legacy_clients": "deny",
                    "policy": ARGUMENT_RULES,
                }
            ]
        }
        gateway = start_gateway(stack, module_tmp, config=config, keys=state_key)
        yield {"gateway": gateway, "log": log}


def sdk_client(url: str) -> tuple[Any, Client]:
    http = httpx2.AsyncClient(timeout=15)
    return http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28")


def upstream_calls(log: Path) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in entries if e.get("method") == "tools/call"]


@pytest.mark.integration
@pytest.mark.timeout(60)
async def test_a_rule_over_arguments_lists_only_what_its_other_conditions_allow(real):
    http, client = sdk_client(real["gateway"].url)
    async with http, client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        assert tools == ["delete_repo", "get_weather"]  # not every tool of the upstream
        before = len(upstream_calls(real["log"]))
        assert (await client.call_tool("get_weather", {"city": "Paris"})).content[
            0
        ].text == "Sunny in Paris"
        # Listed, but not with these arguments (the default denies): said so; not listed: unknown.
        with pytest.raises(MCPError, match="Not permitted: this call of tool 'get_weather'"):
            await client.call_tool("get_weather", {"city": "Rome"})
        with pytest.raises(MCPError, match="Unknown tool: list_files"):
            await client.call_tool("list_files", {"path": "/tmp"})
        with pytest.raises(MCPError, match="Unknown tool: write_file"):
            await client.call_tool("write_file", {"path": "/tmp/x", "text": "x"})
    after = upstream_calls(real["log"])[before:]
    assert [(e["name"], e["argument_names"]) for e in after] == [("get_weather", ["city"])]
