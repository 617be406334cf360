"""Stateless replicas behind a plain round-robin balancer: any replica finishes any flow, a replica
killed mid-flow costs no flow, and a key rotation rolled one replica at a time loses none."""

from __future__ import annotations

import asyncio
import collections
import itertools

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitRequestParams, ElicitResult, ErrorData, TextContent

from mcp_edge.core.seal import generate_key, parse_key_spec
from tests.scale.cluster import metric
from tests.scale.conftest import Cluster
from tests.scale.flows import SurveyFlow, post, survey_call
from tests.support.raw_http import new_marker

pytestmark = pytest.mark.timeout(90)


def kid_of(key_spec: str) -> str:
    return parse_key_spec(key_spec).kid


def sealed_with(state: str) -> str:
    return state.split(".")[1]


def report(name: str, **numbers: object) -> None:
    print(f"\nSCALE {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


async def test_sdk_client_flows_complete_across_replicas(cluster: Cluster) -> None:
    """The published `mcp` 2.x client runs its own MRTR loop through nginx; its rounds are spread
    over all replicas and every flow completes."""

    async def on_elicit(
        context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        return ElicitResult(action="accept", content={"answer": f"sdk-{context.request_id}"})

    async def one(topic: str) -> str:
        async with httpx2.AsyncClient(timeout=15.0, trust_env=False) as http:
            transport = streamable_http_client(cluster.url("/mcp"), http_client=http)
            async with Client(
                transport, mode="2026-07-28", elicitation_callback=on_elicit
            ) as client:
                result = await client.call_tool("survey", {"topic": topic})
        assert not result.is_error, result
        block = result.content[0]
        assert isinstance(block, TextContent)
        return block.text

    flows = 6
    before = cluster.snapshot()
    texts = await asyncio.gather(*(one(f"sdk{i}") for i in range(flows)))
    after = cluster.snapshot()

    for i, text in enumerate(texts):
        assert text == f"sdk{i}: sdk-q1, sdk-q2, sdk-q3 | served by shared x4"
    retries = [
        int(
            metric(a, "mcp_edge_mrtr_retries_accepted_total", route="shared")
            - metric(b, "mcp_edge_mrtr_retries_accepted_total", route="shared")
        )
        for a, b in zip(after, before, strict=True)
        if a is not None and b is not None
    ]
    assert sum(retries) == flows * 3
    assert all(r > 0 for r in retries), f"every replica accepted retries: {retries}"
    report("sdk-client", flows=flows, completed=len(texts), retries_per_replica=retries, lost=0)


async def test_each_round_lands_on_another_replica(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """Flows driven by hand, interleaved: the replicas' own metrics show which one served each
    round; rounds of one flow are served by different replicas and still complete."""
    flows = [
        SurveyFlow(f"rr{i}", cluster.url("/mcp")) for i in range(10)
    ]  # 10: not a multiple of 3
    served: dict[str, list[int]] = collections.defaultdict(list)
    snapshot = cluster.snapshot()
    while not all(f.done for f in flows):
        for flow in flows:
            if flow.done:
                continue
            await flow.advance(client)
            now = cluster.snapshot()
            (replica,) = cluster.served("shared", snapshot, now)
            served[flow.topic].append(replica)
            snapshot = now

    assert all(f.completed for f in flows), [f.error for f in flows if not f.completed]
    assert all(len(set(rounds)) >= 2 for rounds in served.values()), served
    assert {r for rounds in served.values() for r in rounds} == {0, 1, 2}
    steps = [(a, b) for rs in served.values() for a, b in itertools.pairwise(rs)]
    report(
        "round-robin",
        flows=len(flows),
        requests=sum(f.requests for f in flows),
        replicas_hit=len({r for rs in served.values() for r in rs}),
        flows_on_all_3_replicas=sum(len(set(rs)) == 3 for rs in served.values()),
        next_round_on_another_replica=f"{sum(a != b for a, b in steps)}/{len(steps)}",
        lost=0,
    )


async def test_sigkill_replica_mid_flow_loses_no_flow(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """SIGKILL one replica while flows are half way: nginx moves new connections to the other
    replicas (proxy_next_upstream on connection refusal) and every flow completes there."""
    victim = cluster.replicas[1]
    flows = [SurveyFlow(f"kill{i}", cluster.url("/mcp")) for i in range(9)]
    try:
        start = cluster.snapshot()
        for _ in range(2):  # round 1 and the first retry of every flow
            await asyncio.gather(*(f.advance(client) for f in flows))
        mid = cluster.snapshot()
        victim_served = len([r for r in cluster.served("shared", start, mid) if r == victim.index])
        assert victim_served > 0, "the victim took part before it died"
        # The requests sent after the kill carry a marker of their own: nginx's log of them.
        marker = new_marker("after-kill")
        for flow in flows:
            flow.marker = marker
        sent_before = sum(f.requests for f in flows)

        victim.kill()
        while not all(f.done for f in flows):
            await asyncio.gather(*(f.advance(client) for f in flows if not f.done))
        end = cluster.snapshot()

        assert all(f.completed for f in flows), [f.error for f in flows if not f.completed]
        after_kill = cluster.served("shared", mid, end)
        assert set(after_kill) == {0, 1, 2} - {victim.index}
        sent_after = sum(f.requests for f in flows) - sent_before
        entries = cluster.nginx.wait_marked(marker, sent_after)
        assert len(entries) == sent_after, entries
        failovers = [e for e in entries if f"127.0.0.1:{victim.port}, " in e]
        assert failovers, "nginx met the dead replica and moved on"
        report(
            "sigkill",
            flows=len(flows),
            requests=sum(f.requests for f in flows),
            served_by_victim_before_kill=victim_served,
            requests_after_kill=len(after_kill),
            nginx_failovers=len(failovers),
            lost=0,
        )
    finally:
        cluster.heal()


# Nine restarts one after another, each bounded by its own wait for the replica to be ready (30 s).
@pytest.mark.timeout(300)
async def test_key_rotation_rolled_across_replicas_loses_no_flow(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    """The runbook, one replica at a time: add the new key second; move it first; drop the old
    one. Flows keep going between every single restart, across replicas of mixed generations."""
    old, new = cluster.keys, generate_key()
    url = cluster.url("/mcp")
    topics = iter(f"rot{i}" for i in range(1000))
    in_flight = [SurveyFlow(next(topics), url) for _ in range(6)]
    finished: list[SurveyFlow] = []
    kept = SurveyFlow("kept", url)
    await kept.advance(client)  # a state sealed with the old key, never retried until the end
    assert kept.state is not None and sealed_with(kept.state) == kid_of(old)

    steps = [f"{old},{new}", f"{new},{old}", new]
    sealed_in_step: list[set[str]] = []
    restarts = 0
    for ring in steps:
        kids: set[str] = set()
        for replica in cluster.replicas:
            replica.restart(ring)
            restarts += 1
            await asyncio.gather(*(f.advance(client) for f in in_flight))
            kids |= {sealed_with(f.states[-1]) for f in in_flight if f.states and not f.done}
            finished += [f for f in in_flight if f.done]
            in_flight = [f if not f.done else SurveyFlow(next(topics), url) for f in in_flight]
        sealed_in_step.append(kids)
        cluster.keys = ring
    while not all(f.done for f in in_flight):
        await asyncio.gather(*(f.advance(client) for f in in_flight if not f.done))
    finished += in_flight

    assert all(f.completed for f in finished), [
        (f.topic, f.error) for f in finished if not f.completed
    ]
    assert sealed_in_step[0] == {kid_of(old)}  # step 1: every replica still seals with the old key
    assert kid_of(new) in sealed_in_step[1]
    assert sealed_in_step[2] == {kid_of(new)}
    # The old key is gone: state it sealed is refused now (that is why step 3 waits one TTL).
    message = survey_call(kept.topic, kept.responses, kept.state)
    status, doc = await post(client, url, message)
    assert status == 400 and doc["error"]["data"]["reason"] == "integrity", doc
    report(
        "key-rotation",
        restarts=restarts,
        flows=len(finished),
        requests=sum(f.requests for f in finished),
        lost=0,
    )
