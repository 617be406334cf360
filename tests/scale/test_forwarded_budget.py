"""A retry forwarded to the replica holding its parked call draws from the answer budget on both
replicas (kind ``forwarded``): two real ``mcp-edge serve`` processes in front of an unmodified
2025-era server (tests/servers/legacy_server.py, FastMCP from ``mcp==1.30.0``; strategy
``park``, no event store), each round sent to the replica the test chooses.

``small`` has an answer budget of 4 MiB, ``large`` the default. The tool asks a question, then
answers ``kib`` KiB of text, which FastMCP sends twice (``content`` and ``structuredContent``):
the answer's JSON is about twice that, and the sealed reply between replicas a third more again.

- parked on ``small``, retried on ``large``: ``small`` collects the answer (3.2 MiB: it fits)
  but has no room for the sealed reply (4.3 MiB), and answers the budget's error;
- parked on ``large``, retried on ``small``: the sealed reply does not fit in what ``small``
  may hold, which it sees from the reply's length, before reading it;
- an answer that fits (2 MiB, sealed 2.7 MiB) is forwarded both ways whole.

Before, neither replica counted any of it, and the forwarding one read only what had arrived of
the reply when it first looked (a large reply was cut short: the call was "lost").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.scale.cluster import Replica, gateway_config, metric
from tests.support.legacy import start_legacy
from tests.support.processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODERN = "2026-07-28"
MIB = 2**20
TOO_LARGE_KIB = 1600  # JSON ~3.2 MiB, sealed ~4.3 MiB
FITS_KIB = 1024  # JSON ~2 MiB, sealed ~2.7 MiB
_ids = itertools.count(1)


@dataclass
class Pair:
    small: Replica
    large: Replica


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("forwarded-budget")
    with ExitStack() as stack:
        upstream = start_legacy(stack, tmp, "--instance", "plain")
        route = {
            "name": "park",
            "path": "/park",
            "upstream": upstream.url,
            "era": "legacy",
            "bridge": {"strategy": "park"},
        }

        def config(budget: int) -> dict[str, Any]:
            doc = gateway_config([route])
            doc["limits"] = {"max_inspect_bytes": 4 * MIB, "max_inflight_answer_bytes": budget}
            return doc

        keys = generate_key()
        small = Replica(0, tmp, config(4 * MIB), cluster_port=free_port())
        large = Replica(1, tmp, config(64 * MIB), cluster_port=free_port())
        try:
            for replica in (small, large):
                replica.start(keys)
            for replica in (small, large):
                replica.wait()
            yield Pair(small, large)
        finally:
            for replica in (small, large):
                replica.stop()


def call(replica: Replica, kib: int, state: dict[str, Any] | None = None) -> httpx.Response:
    params: dict[str, Any] = {
        "name": "big_after_question",
        "arguments": {"kib": kib},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }
    if state is not None:
        params.update(state)
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "big_after_question",
    }
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}
    with httpx.Client(timeout=60, trust_env=False) as http:
        return http.post(f"{replica.base}/park", headers=headers, json=body)


def park_then_retry(owner: Replica, other: Replica, kib: int) -> httpx.Response:
    """The question parks the call on ``owner``; its answer goes to ``other``, which forwards it."""
    first = call(owner, kib).json()["result"]
    assert first["resultType"] == "input_required", first
    (key,) = first["inputRequests"]
    retry = {
        "requestState": first["requestState"],
        "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}},
    }
    return call(other, kib, retry)


def given_back(*replicas: Replica) -> None:
    """Every replica's ``forwarded`` bytes are given back (once its request is over)."""
    deadline = time.monotonic() + 10
    while True:
        held = [metric(r.metrics(), "mcp_edge_held_bytes", kind="forwarded") for r in replicas]
        if not any(held) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert held == [0.0] * len(replicas)


def refused_here(replica: Replica) -> float:
    return metric(replica.metrics(), "mcp_edge_answer_refused_total", reason="answer_budget")


def assert_budget_error(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text[:300]
    assert answer.headers.get("retry-after") == "1"
    doc = answer.json()
    assert doc["error"]["code"] == -32603 and doc["error"]["data"] == {"reason": "answer_budget"}


def test_the_owner_without_room_for_the_sealed_answer_sends_the_budgets_error(pair: Pair):
    before = refused_here(pair.small)
    answer = park_then_retry(pair.small, pair.large, TOO_LARGE_KIB)
    assert_budget_error(answer)
    assert refused_here(pair.small) == before + 1
    given_back(pair.small, pair.large)


def test_the_forwarder_without_room_for_the_owners_answer_refuses_before_reading_it(
    pair: Pair,
):
    before = refused_here(pair.small)
    answer = park_then_retry(pair.large, pair.small, TOO_LARGE_KIB)
    assert_budget_error(answer)
    assert refused_here(pair.small) == before + 1
    samples = pair.small.metrics()
    assert metric(samples, "mcp_edge_bridge_forwards_total", result="over_budget") >= 1
    given_back(pair.small, pair.large)


@pytest.mark.parametrize("owner", ["small", "large"])
def test_an_answer_that_fits_is_forwarded_whole_both_ways(pair: Pair, owner: str):
    first, second = (pair.small, pair.large) if owner == "small" else (pair.large, pair.small)
    answer = park_then_retry(first, second, FITS_KIB)
    assert answer.status_code == 200, answer.text[:300]
    (content,) = answer.json()["result"]["content"]
    assert content["text"] == ("0123456789abcdef" * 64) * FITS_KIB
    given_back(pair.small, pair.large)
