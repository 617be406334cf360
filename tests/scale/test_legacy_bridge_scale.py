"""The legacy bridge across replicas: three ``mcp-edge serve`` processes behind nginx round robin,
in front of real 2025-era servers (tests/servers/legacy_server.py, FastMCP from ``mcp==1.30.0``).

Routes of every replica:

* ``/resume``  → a legacy server with an event store, strategy ``resume``;
* ``/park``    → a legacy server without one, strategy ``park`` (retries forwarded to the owner);
* ``/replay``  → the same server, strategy ``replay``;
* ``/fallback``→ the same server, ``[park, replay]``;
* ``/idle``    → an event-store server whose sessions expire after 2 s idle, ``resume``;
* ``/twins``   → two processes of one legacy server (``endpoints``), for 2025-era clients;
* ``/stdio``   → the same server over stdio, one process in each replica (2025-era clients'
  virtual sessions live in one replica; requests for them elsewhere are relayed there).

Every round of a flow goes through nginx, so consecutive rounds land on different replicas; the
nginx access log says which replica served each request, and a test finds its own requests there by
the marker they carried (``X-Test-Marker``). The replicas serve their own endpoints
(forwarded retries, relayed requests) on a cluster listener of their own (``cluster.listen``),
which nginx does not reach: the public ports answer 404 there.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.conftest import Running
from tests.scale.cluster import NGINX, Nginx, Replica, gateway_config, metric
from tests.scale.conftest import require_binary
from tests.support.legacy import (
    LegacyStats,
    book_answering_its_question,
    legacy_initialize,
    start_legacy,
)
from tests.support.processes import free_port
from tests.support.raw_http import MARKER_HEADER, new_marker
from tests.support.sandbox import stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
CAPS = {"elicitation": {"form": {}}}
ANSWERS = ({"colour": "teal"}, {"number": 7}, {"ship": True})
_ids = itertools.count(1)


@dataclass
class Env:
    replicas: list[Replica]
    nginx: Nginx
    keys: str
    upstreams: dict[str, Running]

    def url(self, route: str) -> str:
        return f"{self.nginx.base}/{route}"

    def served_by(self, marker: str, expect: int) -> list[str]:
        """The replica (port) behind each request marked ``marker`` that nginx answered, once
        there are ``expect`` of them."""
        return [line.rsplit(":", 1)[-1] for line in self.nginx.wait_marked(marker, expect)]

    def heal(self) -> None:
        for replica in self.replicas:
            if not replica.running:
                replica.start(self.keys)
                replica.wait()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    require_binary(NGINX, "nginx")
    tmp = tmp_path_factory.mktemp("legacy-scale")
    with ExitStack() as stack:
        ups = {
            "es": start_legacy(stack, tmp, "--event-store", "--instance", "es"),
            "plain": start_legacy(stack, tmp, "--instance", "plain"),
            "idle": start_legacy(
                stack, tmp, "--event-store", "--idle-timeout", "2", "--instance", "idle"
            ),
            "twin1": start_legacy(stack, tmp, "--instance", "twin1"),
            "twin2": start_legacy(stack, tmp, "--instance", "twin2"),
        }
        legacy = {"era": "legacy"}
        config = gateway_config(
            [
                {
                    "name": "resume",
                    "path": "/resume",
                    "upstream": ups["es"].url,
                    **legacy,
                    "bridge": {"strategy": "resume"},
                },
                {
                    "name": "park",
                    "path": "/park",
                    "upstream": ups["plain"].url,
                    **legacy,
                    "bridge": {"strategy": "park"},
                },
                {
                    "name": "replay",
                    "path": "/replay",
                    "upstream": ups["plain"].url,
                    **legacy,
                    "bridge": {"strategy": "replay"},
                },
                {
                    "name": "fallback",
                    "path": "/fallback",
                    "upstream": ups["plain"].url,
                    **legacy,
                    "bridge": {"strategy": ["park", "replay"]},
                },
                {
                    "name": "idle",
                    "path": "/idle",
                    "upstream": ups["idle"].url,
                    **legacy,
                    "bridge": {"strategy": "resume"},
                },
                {
                    "name": "twins",
                    "path": "/twins",
                    "endpoints": [ups["twin1"].url, ups["twin2"].url],
                },
                {
                    "name": "stdio",
                    "path": "/stdio",
                    "upstream": {"command": stdio_server_command("legacy_server.py", "--stdio")},
                },
            ]
        )
        keys = generate_key()
        replicas = [Replica(i, tmp, config, cluster_port=free_port()) for i in range(3)]
        for replica in replicas:
            replica.start(keys)
        nginx = Nginx(tmp, [r.port for r in replicas])
        try:
            for replica in replicas:
                replica.wait()
            nginx.wait()
            yield Env(replicas, nginx, keys, ups)
        finally:
            nginx.stop()
            for replica in replicas:
                replica.stop()


# ---- raw 2026-07-28 rounds ------------------------------------------------------------------


def call(
    url: str,
    name: str,
    arguments: dict,
    *,
    marker: str,
    answers: dict | None = None,
    state: str | None = None,
) -> dict:
    params: dict[str, Any] = {
        "name": name,
        "arguments": arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": CAPS,
        },
    }
    if answers is not None:
        params["inputResponses"] = answers
    if state is not None:
        params["requestState"] = state
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
        MARKER_HEADER: marker,
    }
    body = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call", "params": params}
    with httpx.Client(timeout=30, trust_env=False) as http:
        r = http.post(url, headers=headers, json=body)
    assert r.headers.get("content-type", "").startswith("application/json"), r.text[:300]
    return r.json()


@dataclass
class Flow:
    """``three_questions``: three rounds of input_required, then the answers."""

    topic: str
    state: str | None = None
    key: str | None = None
    round: int = 0
    outcome: dict | None = None
    #: Sent with every round: the flow's requests in nginx's access log.
    marker: str = field(default_factory=lambda: new_marker("flow"))

    def step(self, url: str) -> None:
        answers = (
            None
            if self.key is None
            else {self.key: {"action": "accept", "content": ANSWERS[self.round - 1]}}
        )
        doc = call(
            url,
            "three_questions",
            {"topic": self.topic},
            marker=self.marker,
            answers=answers,
            state=self.state,
        )
        result = doc.get("result")
        if result and result.get("resultType") == "input_required":
            (self.key,) = result["inputRequests"]
            self.state = result["requestState"]
            self.round += 1
        else:
            self.outcome = doc

    @property
    def completed(self) -> bool:
        return bool(
            self.outcome
            and "result" in self.outcome
            and self.outcome["result"]["content"][0]["text"] == f"{self.topic}: teal, 7, True"
        )


def bridge_metric(env: Env, route: str, **labels: str) -> float:
    return sum(
        metric(r.metrics(), "mcp_edge_bridge_flow_events_total", route=route, **labels)
        for r in env.replicas
        if r.running
    )


@pytest.mark.parametrize("route", ["resume", "park", "replay"])
def test_each_strategy_with_rounds_on_different_replicas(env: Env, route: str) -> None:
    flows = [Flow(f"{route}-{i}") for i in range(4)]
    for flow in flows:
        while flow.outcome is None:
            flow.step(env.url(route))
        assert flow.completed, flow.outcome
        served = env.served_by(flow.marker, 4)
        assert len(served) == 4 and len(set(served)) >= 2, served  # round robin: rounds moved
    assert bridge_metric(env, route, strategy=route, event="asked") >= 12
    if route == "park":
        forwarded = sum(
            metric(r.metrics(), "mcp_edge_bridge_forwards_total", route="park", result="ok")
            for r in env.replicas
        )
        assert forwarded >= 4  # retries that reached a replica other than the owner


@dataclass
class Lost:
    route: str
    flows: int
    completed: int
    lost: int
    errors: list[dict]


FLOWS_LOST: list[Lost] = []


@pytest.mark.parametrize("route", ["resume", "park", "replay", "fallback"])
def test_a_replica_killed_between_rounds(env: Env, route: str) -> None:
    """Round 1 of every flow at replica 0, which is then SIGKILLed; the other rounds go through
    nginx to the survivors."""
    victim = env.replicas[0]
    flows = [Flow(f"kill-{route}-{i}") for i in range(3)]
    try:
        for flow in flows:
            flow.step(f"{victim.base}/{route}")
            assert flow.round == 1
        victim.kill()
        for flow in flows:
            while flow.outcome is None:
                flow.step(env.url(route))
    finally:
        env.heal()
    completed = [f for f in flows if f.completed]
    errors = [f.outcome["error"] for f in flows if f.outcome and "error" in f.outcome]
    FLOWS_LOST.append(Lost(route, len(flows), len(completed), len(errors), errors))
    out = os.environ.get("MCP_EDGE_RESULTS")  # keeps the flows-lost table for the report
    if out:
        lines = ["| strategy | flows | completed | lost |", "|---|--:|--:|--:|"]
        lines += [f"| {r.route} | {r.flows} | {r.completed} | {r.lost} |" for r in FLOWS_LOST]
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "legacy-flows-lost.md").write_text("\n".join(lines) + "\n")
    if route == "park":
        # The call was held by the replica that died: the client is told to restart it.
        assert not completed and len(errors) == 3
        assert all(e["code"] == -32603 and e["data"] == {"reason": "flow_lost"} for e in errors), (
            errors
        )
    else:
        assert len(completed) == 3, [f.outcome for f in flows]


def test_upstream_idle_timeout_gives_a_clear_error(env: Env) -> None:
    flow = Flow("idle")
    flow.step(env.url("idle"))
    assert flow.round == 1
    time.sleep(3.5)  # the upstream's session idle timeout is 2 s
    flow.step(env.url("idle"))
    assert flow.outcome is not None and flow.outcome["error"]["code"] == -32603, flow.outcome
    assert flow.outcome["error"]["data"] == {"reason": "upstream_session_gone"}
    assert "restart the call" in flow.outcome["error"]["message"]


# ---- a 2025-era client across replicas and upstream processes -------------------------------


def legacy_post(env: Env, http: httpx.Client, body: dict, session: str | None) -> httpx.Response:
    headers = {"Accept": ACCEPT, "Content-Type": "application/json"}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
    return http.post(env.url("twins"), headers=headers, json=body)


def sse_messages(text: str) -> list[dict]:
    return [
        json.loads(line[5:].strip())
        for line in text.splitlines()
        if line.startswith("data:") and line[5:].strip()
    ]


def test_legacy_client_session_across_three_replicas_and_two_upstreams(env: Env) -> None:
    marker = new_marker("twins")
    before = {name: LegacyStats(env.upstreams[name]).get_sync() for name in ("twin1", "twin2")}
    with httpx.Client(timeout=20, trust_env=False, headers={MARKER_HEADER: marker}) as http:
        r = legacy_post(
            env,
            http,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "old-client", "version": "1"},
                },
            },
            None,
        )
        session = r.headers["mcp-session-id"]
        assert session.startswith("mcpes1.")
        assert (
            legacy_post(
                env, http, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session
            ).status_code
            == 202
        )
        seen = set()
        for i in range(6):
            r = legacy_post(
                env,
                http,
                {
                    "jsonrpc": "2.0",
                    "id": 10 + i,
                    "method": "tools/call",
                    "params": {"name": "whoami", "arguments": {}},
                },
                session,
            )
            seen.add(sse_messages(r.text)[-1]["result"]["content"][0]["text"])
        assert len(seen) == 1, seen  # every request reached the process holding the session
        owner = seen.pop()
        # A mid-call question the 2025 way: the answer is POSTed separately, through another replica.
        final = book_answering_its_question(
            http,
            env.url("twins"),
            {
                "Accept": ACCEPT,
                "Content-Type": "application/json",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": "2025-11-25",
            },
            call_id=20,
            date="2025-12-24",
            size=3,
            post_answer=lambda answer: legacy_post(env, http, answer, session),
        )
        assert (
            final["id"] == 20 and final["result"]["content"][0]["text"] == "Booked 3 on 2025-12-24"
        )
        r = http.delete(
            env.url("twins"),
            headers={"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"},
        )
        assert r.status_code == 200, r.text  # the legacy server ended the session
    served = env.served_by(marker, 11)
    assert len(served) == 11 and len(set(served)) == 3, (
        served
    )  # the session's requests were spread over all replicas
    after = {name: LegacyStats(env.upstreams[name]).get_sync() for name in ("twin1", "twin2")}
    other = "twin2" if owner == "twin1" else "twin1"
    assert after[owner]["tools"].get("whoami", 0) - before[owner]["tools"].get("whoami", 0) == 6
    assert after[owner]["deletes"] == before[owner]["deletes"] + 1
    assert after[other]["tools"].get("whoami", 0) == before[other]["tools"].get("whoami", 0)


# ---- the replicas' own endpoints, on their own listener --------------------------------------


def test_the_replicas_endpoints_are_served_on_the_cluster_listener_only(env: Env) -> None:
    with httpx.Client(timeout=10, trust_env=False) as http:
        for replica in env.replicas:
            for path in ("/.mcp-edge/forward", "/.mcp-edge/legacy"):
                assert http.post(replica.base + path, content=b"x").status_code == 404
                assert http.post(env.nginx.base + path, content=b"x").status_code == 404
                # There, a request without a sealed header is refused (403), its body unread.
                assert http.post(replica.cluster_base + path, content=b"x").status_code == 403
            for path in ("/park", "/stdio", "/healthz", "/metrics"):
                assert http.get(replica.cluster_base + path).status_code == 404, path
            assert http.get(replica.base + "/healthz").status_code == 200


def test_a_legacy_client_on_a_stdio_route_across_replicas(env: Env) -> None:
    """A 2025-era client's virtual session lives in the replica that runs its process; through
    nginx its requests reach every replica and are relayed (over the cluster listeners) to it."""
    marker = new_marker("stdio")
    base = {"Accept": ACCEPT, "Content-Type": "application/json"}
    with httpx.Client(timeout=20, trust_env=False, headers={MARKER_HEADER: marker}) as http:
        r = http.post(
            env.url("stdio"),
            headers=base,
            json=legacy_initialize("old-client", {"elicitation": {}}),
        )
        assert r.status_code == 200, r.text
        session = {
            **base,
            "Mcp-Session-Id": r.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        pids = set()
        for i in range(6):
            r = http.post(
                env.url("stdio"),
                headers=session,
                json={
                    "jsonrpc": "2.0",
                    "id": 10 + i,
                    "method": "tools/call",
                    "params": {"name": "pid", "arguments": {}},
                },
            )
            assert r.status_code == 200, r.text
            pids.add(sse_messages(r.text)[-1]["result"]["content"][0]["text"])
        assert len(pids) == 1, pids  # every request reached the one process holding the session
        final = book_answering_its_question(
            http,
            env.url("stdio"),
            session,
            call_id=20,
            date="2025-11-11",
            size=4,
            post_answer=lambda answer: http.post(env.url("stdio"), headers=session, json=answer),
        )
        assert (
            final["id"] == 20 and final["result"]["content"][0]["text"] == "Booked 4 on 2025-11-11"
        )
        assert http.delete(env.url("stdio"), headers=session).status_code == 200
    served = env.served_by(marker, 10)
    # Spread over all replicas, served by one process: the others relayed them to its replica.
    assert len(served) == 10 and len(set(served)) == 3, served
