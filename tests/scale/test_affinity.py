"""Endpoint affinity: two upstream processes that each seal requestState with their own random key,
behind one route (``endpoints: [a, b]``), behind three replicas, behind round-robin nginx.

With affinity (the default) the sealed state remembers which endpoint answered and every retry
goes back to it, from whichever replica: all flows complete, spread over both upstreams. With
``affinity: false`` retries wander to the other process, which refuses the state it cannot open.
"""

from __future__ import annotations

import collections

import httpx
import pytest

from tests.scale.conftest import Cluster
from tests.scale.flows import SurveyFlow

pytestmark = pytest.mark.timeout(60)

FLOWS = 8


def report(name: str, **numbers: object) -> None:
    print(f"\nSCALE {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


async def interleave(flows: list[SurveyFlow], client: httpx.AsyncClient) -> None:
    """One request per flow in turn, so consecutive rounds of a flow meet other replicas."""
    while not all(f.done for f in flows):
        for flow in flows:
            if not flow.done:
                await flow.advance(client)


async def test_affinity_keeps_each_flow_on_its_upstream(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    before = cluster.snapshot()
    flows = [SurveyFlow(f"pin{i}", cluster.url("/pinned")) for i in range(FLOWS)]
    await interleave(flows, client)
    after = cluster.snapshot()

    assert all(f.completed for f in flows), [f.error for f in flows if not f.completed]
    per_upstream = collections.Counter(f.served_by for f in flows)
    # Each flow ran all four steps on one upstream process...
    assert set(per_upstream) == {"eph-127.0.0.2 x4", "eph-127.0.0.3 x4"}, per_upstream
    # ...while its rounds were answered by several gateway replicas.
    replicas = set(cluster.served("pinned", before, after))
    assert replicas == {0, 1, 2}
    report(
        "affinity-on",
        flows=FLOWS,
        completed=FLOWS,
        per_upstream=dict(per_upstream),
        replicas_hit=len(replicas),
        lost=0,
    )


async def test_without_affinity_upstreams_refuse_each_others_state(
    cluster: Cluster, client: httpx.AsyncClient
) -> None:
    flows = [SurveyFlow(f"nopin{i}", cluster.url("/unpinned")) for i in range(FLOWS)]
    await interleave(flows, client)

    failed = [f for f in flows if f.error is not None]
    assert failed, "with per-process keys and no affinity, retries must meet the other process"
    for flow in failed:
        # The upstream's own refusal, passed through (the gateway's checks all passed).
        assert flow.status == 400
        assert flow.error is not None and flow.error["code"] == -32602
        assert flow.error["message"] == "Invalid or expired requestState"
        assert flow.error.get("data") == {"reason": "invalid_request_state"}
    report(
        "affinity-off", flows=FLOWS, failed=len(failed), completed=sum(f.completed for f in flows)
    )
