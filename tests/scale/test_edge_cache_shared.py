"""The edge cache shared through Redis: what one replica fetched, the others answer without asking
the upstream (each from its own memory after the first look in Redis); with Redis down every
replica goes on answering, from its memory or from the upstream."""

from __future__ import annotations

import itertools
from typing import Any

import httpx
import pytest

from tests.scale.cluster import metric
from tests.scale.conftest import Cluster
from tests.scale.flows import PROTOCOL

pytestmark = pytest.mark.timeout(60)
_ids = itertools.count(20_000)


def tools_list(caps: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": caps,
            }
        },
    }


async def list_tools(
    client: httpx.AsyncClient, url: str, caps: dict[str, Any]
) -> tuple[str | None, dict]:
    message = tools_list(caps)
    response = await client.post(
        url,
        json=message,
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": "tools/list",
        },
    )
    assert response.status_code == 200, response.text
    doc = response.json()
    assert doc["id"] == message["id"] and doc["result"]["cacheScope"] == "public", doc
    return response.headers.get("x-mcp-edge-cache"), doc["result"]


def upstream_lists(cluster: Cluster) -> int:
    return int(cluster.shared.stats()["methods"].get("tools/list", 0))


async def test_replicas_answer_from_what_one_of_them_fetched(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    caps = {"roots": {}, "extensions": {"io.example/shared-cache": {}}}
    before = upstream_lists(cluster)
    first, fetched = await list_tools(client, cluster.replicas[0].base + "/cached", caps)
    assert first == "miss" and upstream_lists(cluster) == before + 1
    for replica in cluster.replicas[1:]:
        how, result = await list_tools(client, replica.base + "/cached", caps)
        assert how == "hit", replica.index
        assert result["tools"] == fetched["tools"] and 0 < result["ttlMs"] <= fetched["ttlMs"]
    for _ in range(3):
        assert (await list_tools(client, cluster.url("/cached"), caps))[0] == "hit"
    assert upstream_lists(cluster) == before + 1, "a hit reached the upstream"


async def test_redis_down_the_cache_answers_from_memory_or_upstream(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    warm = {"roots": {}, "extensions": {"io.example/warm": {}}}
    for replica in cluster.replicas:  # one fetch, then every replica holds it in memory
        await list_tools(client, replica.base + "/cached", warm)
    errors_before = sum(
        metric(r.metrics(), "mcp_edge_cache_backend_errors_total") for r in cluster.replicas
    )
    cluster.redis.kill()
    try:
        before = upstream_lists(cluster)
        for replica in cluster.replicas:
            assert (await list_tools(client, replica.base + "/cached", warm))[0] == "hit"
            cold = {"roots": {}, "extensions": {"io.example/cold": {"replica": replica.index}}}
            assert (await list_tools(client, replica.base + "/cached", cold))[0] == "miss"
        assert upstream_lists(cluster) == before + len(cluster.replicas)
        errors = sum(
            metric(r.metrics(), "mcp_edge_cache_backend_errors_total") for r in cluster.replicas
        )
        assert errors >= errors_before + len(cluster.replicas)
    finally:
        cluster.heal()
