"""A member's list change reaches every replica's cache: two gateway replicas sharing one real
redis-server (``cache.backend: redis``), one route with two members, both ``mcp`` 2.x servers
(tests/servers/mrtr_upstream.py) whose ``tools/list`` results are public for ten minutes:

- ``survey`` (``--growable``): its tool ``grow`` adds a tool and says the list changed on every
  listen stream;
- ``steady``: a list that never changes.

Its list changes on a listen stream through replica A; replica B, which had answered the old
list from the cache, answers the new one at once, while the steady member's part stays cached
(its server is not asked again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.subscriptions import ToolsListChanged

from tests.conftest import Running, require, start_gateway, start_upstream
from tests.scale.cluster import REDIS_SERVER, RedisServer, metric, scrape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MODERN = "2026-07-28"
ROUTE = "fed"


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    require(REDIS_SERVER is not None, "redis-server")
    redis = RedisServer(module_tmp)
    with ExitStack() as stack:
        redis.start()
        stack.callback(redis.stop)
        redis.wait()
        ttl = ("--ephemeral", "--list-ttl-ms", "600000")
        survey = start_upstream(stack, "mrtr_upstream.py", module_tmp, "--growable", *ttl)
        steady = start_upstream(stack, "mrtr_upstream.py", module_tmp, "--instance", "steady", *ttl)
        config = {
            "store": {"type": "redis", "url": redis.url},
            "cache": {"backend": "redis"},
            "routes": [
                {
                    "name": ROUTE,
                    "path": "/mcp",
                    "cache": {"enabled": True},
                    "members": [
                        {"name": "survey", "upstream": survey.url, "era": "modern"},
                        {"name": "steady", "upstream": steady.url, "era": "modern"},
                    ],
                }
            ],
        }
        replicas = [start_gateway(stack, module_tmp, keys=state_key, config=config) for _ in "ab"]
        yield {"replicas": replicas, "survey": survey, "steady": steady}


def post(gateway: Running, rid: str, method: str, params: dict[str, Any], **headers: str) -> dict:
    """One request, raw (an SDK client would list tools on its own around a call)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    response = httpx.post(
        gateway.url,
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
            **headers,
        },
        json={"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": meta}},
        timeout=30,
    )
    doc = response.json()
    assert response.status_code == 200 and doc["id"] == rid and "result" in doc, doc
    return dict(doc["result"])


def tool_names(gateway: Running, rid: str) -> list[str]:
    return [t["name"] for t in post(gateway, rid, "tools/list", {})["tools"]]


def lists_asked(upstream: Running) -> int:
    stats = httpx.get(upstream.base + "/stats", timeout=5).json()
    return int(stats["methods"].get("tools/list", 0))


def hits(gateway: Running, member: str) -> float:
    samples = scrape(gateway.base)
    return metric(samples, "mcp_edge_cache_lookups_total", route=f"{ROUTE}/{member}", result="hit")


async def test_a_list_change_on_one_replica_is_seen_at_once_on_the_other(env):
    a, b = env["replicas"]
    survey, steady = env["survey"], env["steady"]
    # Both replicas answer the list; what one fetched the other answers from Redis.
    deadline = time.monotonic() + 30
    while not {"survey__whoami", "steady__whoami"} <= set(tool_names(a, "warm-a")):
        assert time.monotonic() < deadline, "the members never answered"
        await asyncio.sleep(0.2)
    hits_before = hits(b, "survey")
    names = tool_names(b, "old-b")
    assert "survey__fresh" not in names and "steady__whoami" in names
    assert hits(b, "survey") == hits_before + 1  # B's answer is the cached part
    steady_asked = lists_asked(steady)

    async with (
        Client(a.url, mode=MODERN) as client,
        client.listen(tools_list_changed=True) as sub,
    ):
        assert sub.honored.tools_list_changed
        grown = post(
            a,
            "grow",
            "tools/call",
            {"name": "survey__grow", "arguments": {"name": "fresh"}},
            **{"Mcp-Name": "survey__grow"},
        )
        assert grown["content"][0]["text"] == "added fresh"
        async with asyncio.timeout(15):
            assert await anext(sub) == ToolsListChanged()
        # Told on A; B's very next list has the new tool (its part left Redis before A spoke).
        asked = lists_asked(survey)
        names = tool_names(b, "new-b")
        assert "survey__fresh" in names and "steady__whoami" in names
        assert lists_asked(survey) == asked + 1  # fetched again, by B
        # Kept again: A answers the new list from what B fetched.
        assert "survey__fresh" in tool_names(a, "new-a")
        assert lists_asked(survey) == asked + 1

    # The steady member's part stayed cached throughout.
    assert lists_asked(steady) == steady_asked
