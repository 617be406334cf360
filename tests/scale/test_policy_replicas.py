"""The gateway's approval through three replicas behind nginx round robin: the approval round and
the upstream's three rounds of one flow land on different replicas and chain in one sealed state;
a replayed approval is refused by every replica (spent in Redis); pins in Redis, accepted with
``mcp-edge tools accept``, hold on every replica."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import httpx
import pytest

from tests.scale.cluster import metric
from tests.scale.conftest import Cluster
from tests.scale.flows import HEADERS, post, survey_call
from tests.support.processes import venv_command

pytestmark = pytest.mark.timeout(90)
APPROVAL = "mcp-edge/approval"
YES = {APPROVAL: {"action": "accept", "content": {"approve": True}}}


async def test_approval_then_upstream_rounds_across_replicas(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    url = cluster.url("/policy")
    calls_before = cluster.shared.stats()["calls"].get("survey", 0)
    before = cluster.snapshot()
    status, doc = await post(client, url, survey_call("approved", None, None))
    assert status == 200, doc
    question = doc["result"]
    assert list(question["inputRequests"]) == [APPROVAL]
    assert (
        cluster.shared.stats()["calls"].get("survey", 0) == calls_before
    )  # asked before the upstream
    approval_state = question["requestState"]

    responses: dict[str, Any] | None = YES
    state = approval_state
    rounds = 0
    while True:
        status, doc = await post(client, url, survey_call("approved", responses, state))
        assert status == 200, doc
        result = doc["result"]
        if result.get("resultType") != "input_required":
            break
        rounds += 1
        key = next(iter(result["inputRequests"]))
        assert key != APPROVAL
        responses = {key: {"action": "accept", "content": {"answer": f"a{rounds}"}}}
        state = result["requestState"]
    assert rounds == 3
    assert result["content"][0]["text"].startswith("approved: a1, a2, a3")
    served = cluster.served("policy", before, cluster.snapshot())
    assert len(served) == 5 and len(set(served)) == 3  # every replica took part in the one flow
    assert cluster.shared.stats()["calls"].get("survey", 0) == calls_before + 4

    posts = cluster.shared.stats()["posts"]
    for replica in cluster.replicas:  # the approval was spent in Redis: no replica takes it again
        status, doc = await post(
            client, replica.base + "/policy", survey_call("approved", YES, approval_state)
        )
        assert status == 400 and doc["error"]["data"] == {"reason": "replayed"}, doc
    assert cluster.shared.stats()["posts"] == posts
    print(
        f"\nSCALE policy-approval: requests=5 replicas={sorted(set(served))} upstream_rounds=3 replays_refused=3"
    )


async def tools_listed(client: httpx.AsyncClient, base: str) -> list[str]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
    r = await client.post(
        base + "/policy", json=body, headers={**HEADERS, "Mcp-Method": "tools/list"}
    )
    return sorted(t["name"] for t in r.json()["result"]["tools"])


def tools_cli(cluster: Cluster, *args: str) -> str:
    config = cluster.replicas[0].tmp / "replica0.yaml"
    out = subprocess.run(
        [*venv_command("mcp-edge"), "tools", *args, "--config", str(config), "--route", "policy"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return out.stdout


async def test_pins_in_redis_accepted_with_the_cli_hold_on_every_replica(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    assert "survey" in await tools_listed(client, cluster.nginx.base)  # pinned on first sight
    line = next(
        ln for ln in tools_cli(cluster, "digests").splitlines() if ln.startswith("survey\t")
    )
    digest = line.split("\t")[1].removeprefix("pinned ")
    assert digest.startswith("sha256:") and line.endswith("\tok")
    other = "sha256:" + "0" * 64
    try:
        # An operator pins another definition: every replica hides the one it sees, within 2 s.
        tools_cli(cluster, "accept", "--tool", "survey", "--digest", other)
        await asyncio.sleep(2.2)
        for replica in cluster.replicas:
            assert "survey" not in await tools_listed(client, replica.base), replica.index
        status, doc = await post(client, cluster.url("/policy"), survey_call("pinned", None, None))
        assert status == 400 and doc["error"]["message"] == "Unknown tool: survey"
        assert "CHANGED (hidden)" in tools_cli(cluster, "digests")
    finally:
        tools_cli(cluster, "accept", "--tool", "survey")  # the definition last seen
    await asyncio.sleep(2.2)
    for replica in cluster.replicas:
        assert "survey" in await tools_listed(client, replica.base)
    changes = sum(
        metric(r.metrics(), "mcp_edge_tool_definition_changes_total", route="policy")
        for r in cluster.replicas
    )
    assert changes >= 3
