"""List filtering in process (a fake upstream only to answer in shapes a test needs: an SSE list,
a cacheable list behind the edge cache) and the guard's policy hook on a route without rules."""

from __future__ import annotations

import orjson

from gateway.app import GatewayApp
from gateway.config import GatewayConfig
from tests.integration.test_misbehaving_upstream import RING, FakeUpstream, hdrs, post, result_reply, rpc

TOOLS = {"resultType": "complete", "ttlMs": 60000, "cacheScope": "public",
         "tools": [{"name": "get_x", "inputSchema": {"type": "object"}},
                   {"name": "drop_x", "inputSchema": {"type": "object"}}]}  # fmt: skip


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
    policy = {"rules": [{"name": "tmp-only", "when": '!arguments.path.startsWith("/tmp/")', "action": "deny",
                         "message": "Writes are allowed under /tmp only"}]}  # fmt: skip
    app = app_with(upstream, policy)
    r = await post(app, rpc("tools/call", 4, name="write", arguments={"path": "/etc/x"}), hdrs("tools/call", "write"))
    assert r.status_code == 400
    assert r.json()["error"] == {"code": -32602, "message": "Writes are allowed under /tmp only",
                                 "data": {"reason": "policy_denied"}}  # fmt: skip
    assert "startsWith" not in r.text and upstream.received == []
    ok = await post(app, rpc("tools/call", 5, name="write", arguments={"path": "/tmp/x"}), hdrs("tools/call", "write"))
    assert ok.status_code == 200 and len(upstream.received) == 1
