"""Single-use state through the replicas, with a real Redis as the shared store: a replayed
state is refused by every replica and never reaches the upstream; while Redis is down the
route fails closed (503, with the request's id) and it works again once Redis is back."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.scale.cluster import metric
from tests.scale.conftest import Cluster
from tests.scale.flows import SurveyFlow, post, survey_call

pytestmark = pytest.mark.timeout(60)


def report(name: str, **numbers: object) -> None:
    print(f"\nSCALE {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


async def test_replayed_state_is_refused_by_every_replica(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    flow = SurveyFlow("once", cluster.url("/once"))
    await flow.advance(client)
    spent = (flow.responses, flow.state)
    await flow.advance(client)  # this retry spends the round-1 state
    assert not flow.done and flow.requests == 2

    posts_before = cluster.shared.stats()["posts"]
    targets = [r.base + "/once" for r in cluster.replicas] + [cluster.url("/once")]
    for url in targets:
        message = survey_call(flow.topic, *spent)
        status, doc = await post(client, url, message)
        assert status == 400, doc
        assert doc["id"] == message["id"]
        assert doc["error"]["code"] == -32602
        assert doc["error"]["data"] == {"reason": "replayed"}
    assert cluster.shared.stats()["posts"] == posts_before, "a replay reached the upstream"

    await flow.run(client)  # the flow itself goes on with its fresh state
    assert flow.completed
    refused = sum(
        metric(r.metrics(), "mcp_edge_state_rejections_total", route="once", reason="replayed")
        for r in cluster.replicas
    )
    assert refused >= len(targets)
    report("single-use-replay", replays=len(targets), refused=int(refused), forwarded=0)


async def test_redis_restart_fails_closed_then_recovers(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    flow = SurveyFlow("redis-restart", cluster.url("/once"))
    await flow.advance(client)
    cluster.redis.kill()
    refused = 0
    try:
        posts_before = cluster.shared.stats()["posts"]
        for _ in cluster.replicas:  # round robin: each replica meets the dead store
            message = flow.next_message()
            started = time.monotonic()
            status, doc = await post(client, cluster.url("/once"), message)
            elapsed = time.monotonic() - started
            assert status == 503, doc
            assert doc["id"] == message["id"]
            assert doc["error"]["code"] == -32603
            assert doc["error"]["data"] == {"reason": "state_store_unavailable"}
            assert elapsed < 3.0
            refused += 1
        assert cluster.shared.stats()["posts"] == posts_before, (
            "nothing is forwarded while the store is down"
        )
        plain = SurveyFlow(
            "no-store-needed", cluster.url("/mcp")
        )  # routes without single_use go on
        await plain.run(client)
        assert plain.completed
    finally:
        cluster.redis.start()  # same port, empty (no persistence)
        cluster.redis.wait()

    # The state was never spent while Redis was down: it is accepted now, and the flow completes.
    await flow.run(client)
    assert flow.completed, flow.error
    more = [SurveyFlow(f"after-restart{i}", cluster.url("/once")) for i in range(3)]
    for f in more:
        await f.run(client)
    assert all(f.completed for f in more)
    unavailable = sum(
        metric(
            r.metrics(), "mcp_edge_state_store_unavailable_total", route="once", action="rejected"
        )
        for r in cluster.replicas
    )
    assert unavailable >= refused
    report(
        "redis-restart",
        refused_while_down=refused,
        flows_after_restart=1 + len(more),
        completed=1 + sum(f.completed for f in more),
        lost=0,
    )
