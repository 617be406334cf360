"""Rate limits through the replicas, with the budgets in the real Redis: three gateways behind
nginx round robin spend one budget, so the 61st call in a minute is refused whichever replica it
reaches; the first retries of an MRTR flow spend nothing (a replayed state does, and so does every
round past `retries_per_unit`, so one unit buys a bounded number of upstream calls); while Redis
is down the budgets fail open."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import httpx
import pytest

from tests.scale.cluster import metric
from tests.scale.conftest import Cluster
from tests.scale.flows import PROTOCOL, SurveyFlow, post, survey_call, tool_call

pytestmark = pytest.mark.timeout(60)
RATE_LIMITED = -31429
_ids = itertools.count(10_000)


def report(name: str, **numbers: object) -> None:
    print(f"\nSCALE {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


def whoami() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": next(_ids),
        "method": "tools/call",
        "params": {
            "name": "whoami",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


async def call_whoami(client: httpx.AsyncClient, url: str) -> httpx.Response:
    message = whoami()
    response = await client.post(
        url,
        json=message,
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": "tools/call",
            "Mcp-Name": "whoami",
        },
    )
    assert response.json()["id"] == message["id"], response.text
    return response


def decisions(cluster: Cluster, route: str, decision: str) -> float:
    return sum(
        metric(r.metrics(), "mcp_edge_rate_limit_requests_total", route=route, decision=decision)
        for r in cluster.replicas
    )


def assert_limited(response: httpx.Response) -> None:
    assert response.status_code == 429, response.text
    assert 1 <= int(response.headers["retry-after"]) <= 60
    error = response.json()["error"]
    assert error["code"] == RATE_LIMITED
    assert error["data"]["reason"] == "rate_limited" and error["data"]["limit"] == "60/minute"


async def test_sixty_a_minute_is_one_budget_across_the_replicas(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    before = cluster.snapshot()
    upstream_before = cluster.shared.stats()["calls"].get("whoami", 0)
    for i in range(60):
        response = await call_whoami(client, cluster.url("/limited"))
        assert response.status_code == 200, f"call {i + 1}: {response.text}"
    served = cluster.served("limited", before, cluster.snapshot())
    assert sorted(set(served)) == [0, 1, 2], "round robin should have used every replica"

    assert_limited(await call_whoami(client, cluster.url("/limited")))  # the 61st, through nginx
    for replica in cluster.replicas:  # and on every replica directly
        assert_limited(await call_whoami(client, replica.base + "/limited"))
    assert cluster.shared.stats()["calls"].get("whoami", 0) == upstream_before + 60
    assert decisions(cluster, "limited", "limited") == 4
    assert decisions(cluster, "limited", "allowed") == 60
    report("rate-limit-shared-budget", allowed=60, refused=4, replicas=sorted(set(served)))


async def test_an_mrtr_flow_counts_once_and_a_replayed_state_counts_again(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    url = cluster.url("/limited-flows")  # 4 per minute
    first = SurveyFlow("budget-a", url)
    await first.run(client)
    assert first.completed and first.requests == 4, first.error  # round 1 + 3 retries: 1 spent
    assert decisions(cluster, "limited-flows", "retry") == 3
    second = SurveyFlow("budget-b", url)
    await second.advance(client)  # 2 spent
    assert second.status == 200 and second.state is not None and second.state.startswith("mcpe1.")

    # Presenting a state again is a new request (3 spent); it still goes on, as on any route.
    status, doc = await post(
        client, url, survey_call(first.topic, first.responses, first.states[0])
    )
    assert status == 200 and "result" in doc, doc
    assert (await call_whoami(client, url)).status_code == 200  # 4 spent
    refused = await call_whoami(client, url)
    assert refused.status_code == 429 and refused.json()["error"]["data"]["limit"] == "4/minute"

    # Over budget, a flow begun in budget still finishes (its retries are free), whichever
    # replica each retry reaches; a new flow is refused at its first request.
    await second.run(client)
    assert second.completed, second.error
    third = SurveyFlow("budget-c", url)
    await third.advance(client)
    assert third.status == 429 and third.error is not None and third.error["code"] == RATE_LIMITED
    assert decisions(cluster, "limited-flows", "allowed") == 4
    assert decisions(cluster, "limited-flows", "retry") == 6
    assert decisions(cluster, "limited-flows", "limited") == 2
    report("rate-limit-mrtr", flows=2, requests_of_flows=8, spent_by_flows=2, replay_spent=1)


async def test_one_unit_buys_a_bounded_number_of_upstream_calls(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """A paid request followed by its chain of fresh-state retries: the first `retries_per_unit`
    (3, the default) ride on its unit, each later round spends one, whichever replica it reaches."""
    url = cluster.url("/limited-chains")  # 3 per minute
    marker = f"chain-{uuid.uuid4().hex[:12]}"
    arguments = {"marker": marker, "rounds": 16}  # as many rounds as state.max_rounds allows
    before = cluster.snapshot()
    responses: dict[str, Any] | None = None
    state: str | None = None
    answers: list[tuple[int, str]] = []
    for _ in range(20):
        status, doc = await post(client, url, tool_call("chain", arguments, responses, state))
        if "error" in doc:
            answers.append((status, str(doc["error"]["code"])))
            break
        result = doc["result"]
        if result.get("resultType") != "input_required":
            answers.append((status, "complete"))
            break
        answers.append((status, "input_required"))
        (key,) = result["inputRequests"]
        responses, state = (
            {key: {"action": "accept", "content": {"answer": "a"}}},
            result["requestState"],
        )
    upstream_calls = cluster.shared.stats()["markers"].get(marker, 0)
    units = decisions(cluster, "limited-chains", "allowed")
    assert units == 3 and upstream_calls <= units * (1 + 3), (upstream_calls, units, answers)
    # The first call and 3 free retries on the first unit, one round on each of the two others,
    # then the budget is spent: the 7th request is refused before the upstream sees it.
    assert upstream_calls == 6 and answers[:6] == [(200, "input_required")] * 6, answers
    assert answers[6] == (429, str(RATE_LIMITED))
    assert decisions(cluster, "limited-chains", "retry") == 3
    assert len(set(cluster.served("limited-chains", before, cluster.snapshot()))) > 1
    report(
        "rate-limit-chain",
        upstream_calls=upstream_calls,
        units=int(units),
        calls_per_unit=round(upstream_calls / units, 2),
    )


async def test_redis_down_fails_open_for_rate_limits(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    url = cluster.url("/limited-outage")
    assert (await call_whoami(client, url)).status_code == 200
    cluster.redis.kill()
    try:
        for _ in cluster.replicas:
            response = await call_whoami(client, url)
            assert response.status_code == 200, response.text
        assert decisions(cluster, "limited-outage", "store_unavailable_allowed") == len(
            cluster.replicas
        )
    finally:
        cluster.heal()
    assert (await call_whoami(client, url)).status_code == 200
    report("rate-limit-redis-down", action="fail_open", allowed=len(cluster.replicas))
