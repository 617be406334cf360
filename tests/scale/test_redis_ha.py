"""The shared store fails over under load: two gateway replicas on a Redis Sentinel group (a master,
two replicas, three sentinels) and on a Redis Cluster (three masters, three replicas), MRTR flows on
a single-use route, flows through the gateway's single-use approval, rate-limited calls and cached
lists running all the time, and the master killed with SIGKILL in the middle.

Asserted, for every request: its answer's shape is counted, and every one is a success or, on the
routes whose guarantee needs the store (single-use states, single-use approvals), the documented
refusal (``503``, a JSON-RPC error for the request's id with ``state_store_unavailable`` and
``Retry-After``); no other shape (a plain-text 500, another status or error), and never a silent
pass. Rate-limited calls and cached lists are always a success (their store fails open). After the
failover: every state and approval the gateway accepted is refused when presented again (with
``spend_replicas: 1`` on Sentinel, for every spend; on Cluster, where spends carry the replication
window, for every spend the replica was known to hold before the kill, the rest is counted), rate
limits count again across replicas, the cache is shared again; and service is whole within a bound.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import StateRejected, generate_key
from mcp_edge.store.base import StoreUnavailable
from mcp_edge.store.redis_store import RedisStore
from tests.scale.cluster import REDIS_SERVER, Replica, Upstream, gateway_config
from tests.scale.conftest import require_binary
from tests.scale.flows import HEADERS, PROTOCOL, post, survey_call, tool_call
from tests.scale.redis_ha import (
    DATA,
    FAILOVER_TIMEOUT,
    REDIS_CLI,
    STORE_REFUSAL,
    SUCCESS,
    Node,
    RedisClusterGroup,
    SentinelGroup,
    answer_shape,
    info_field,
    probe,
    replicated,
    wait_until,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]

APPROVAL = "mcp-edge/approval"
#: After the failover, how long until every kind of request succeeds again (asserted bound).
WHOLE_WITHIN = 30.0
#: Consecutive successes of every worker that count as "whole again".
STREAK = 3
#: After the rest is whole, how long until the replicas share cached entries again.
CACHE_SHARED_WITHIN = 20.0
#: Routes of 3/minute budgets, one per attempt at checking that budgets count again (an attempt
#: during which the budget store was slower than its bound, and so failed open, is not a check).
TIGHT_ATTEMPTS = 3
#: After the rest is whole, how long until every replica's budget store answers again.
BUDGETS_BACK_WITHIN = 20.0
#: Replays of spent states in flight at once, after the failover.
REPLAYS_AT_ONCE = 8
_markers = itertools.count(1)


def routes(upstream: str) -> list[dict[str, Any]]:
    return [
        {"name": "once", "path": "/once", "upstream": upstream, "single_use": True},
        {
            "name": "policy",
            "path": "/policy",
            "upstream": upstream,
            "legacy_clients": "deny",
            "policy": {
                "pin_tools": True,
                "rules": [{"when": 'name == "survey"', "action": "approve"}],
            },
        },
        {
            "name": "limited",
            "path": "/limited",
            "upstream": upstream,
            "rate_limits": {"per_principal": "100000/minute"},
        },
        *(
            {
                "name": f"tight-{n}",
                "path": f"/tight-{n}",
                "upstream": upstream,
                "rate_limits": {"per_principal": "3/minute"},
            }
            for n in range(TIGHT_ATTEMPTS)
        ),
        {"name": "cached", "path": "/cached", "upstream": upstream, "cache": {"enabled": True}},
    ]


@dataclass
class Accepted:
    """A request carrying a state the gateway accepted (spent): presenting it again must fail."""

    path: str
    message: dict[str, Any]
    at: float


@dataclass
class Load:
    """Workers sending requests with unique markers through both replicas until told to stop."""

    bases: list[str]
    client: httpx.AsyncClient
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    accepted: list[Accepted] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    last_refused: float = 0.0
    sent: int = 0
    #: Consecutive successes per worker (reset by a refusal).
    streaks: dict[str, int] = field(default_factory=dict)
    oks: Counter[str] = field(default_factory=Counter)
    #: Every answer, by worker and shape (``answer_shape``).
    shapes: Counter[tuple[str, str]] = field(default_factory=Counter)

    def base(self) -> str:
        self.sent += 1
        return self.bases[self.sent % len(self.bases)]

    def ok(self, worker: str) -> None:
        self.streaks[worker] = self.streaks.get(worker, 0) + 1
        self.oks[worker] += 1

    async def exchange(
        self, worker: str, path: str, message: dict[str, Any], method: str = "tools/call"
    ) -> tuple[str, dict[str, Any] | None, httpx.Response]:
        """Send ``message`` to the next replica; count its answer's shape. Anything but a
        success resets the worker's streak (the client starts over)."""
        headers = {**HEADERS, "Mcp-Method": method}
        if method == "tools/call":
            headers["Mcp-Name"] = message["params"].get("name", "")
        response = await self.client.post(self.base() + path, json=message, headers=headers)
        shape, doc = answer_shape(response, message["id"])
        self.shapes[worker, shape] += 1
        if shape != SUCCESS:
            if shape == STORE_REFUSAL:
                self.refused[worker] += 1
            self.last_refused = time.monotonic()
            self.streaks[worker] = 0
        return shape, doc, response

    def unexpected(self) -> dict[str, int]:
        """Answers of a shape not allowed for their worker: only the routes whose guarantee
        needs the store may refuse, and only with the documented refusal."""
        allowed = {"once": {SUCCESS, STORE_REFUSAL}, "policy": {SUCCESS, STORE_REFUSAL}}
        return {
            f"{worker}: {shape}": count
            for (worker, shape), count in self.shapes.items()
            if shape not in allowed.get(worker, {SUCCESS})
        }

    async def flow_worker(self, worker: str, path: str) -> None:
        """MRTR flows (the gateway's approval first on /policy), each request to the other replica."""
        while not self.stop.is_set():
            topic = f"{worker}-{next(_markers)}"
            responses: dict[str, Any] | None = None
            state: str | None = None
            while not self.stop.is_set():
                message = survey_call(topic, responses, state)
                shape, doc, _ = await self.exchange(worker, path, message)
                if shape != SUCCESS or doc is None:
                    break  # the state's fate is unknown: the client starts over
                if state is not None:
                    self.accepted.append(Accepted(path, message, time.monotonic()))
                self.ok(worker)
                result = doc["result"]
                if result.get("resultType") != "input_required":
                    assert result["content"][0]["text"].startswith(
                        f"{topic}: {topic}-q1, {topic}-q2, {topic}-q3"
                    )
                    break
                (key,) = result["inputRequests"]
                answer = {"approve": True} if key == APPROVAL else {"answer": f"{topic}-{key}"}
                responses = {key: {"action": "accept", "content": answer}}
                state = result["requestState"]

    async def limited_worker(self) -> None:
        """Calls on a rate-limited route: budgets fail open (documented), so every call is answered."""
        while not self.stop.is_set():
            message = tool_call("whoami", {"marker": f"limited-{next(_markers)}"}, None, None)
            shape, _, _ = await self.exchange("limited", "/limited", message)
            if shape == SUCCESS:
                self.ok("limited")

    async def cache_worker(self) -> None:
        """Lists on the cached route: Redis trouble is a miss, never an error (documented)."""
        while not self.stop.is_set():
            message = tools_list(f"cache-{next(_markers) % 7}")
            shape, _, response = await self.exchange("cached", "/cached", message, "tools/list")
            if shape == SUCCESS:
                assert response.headers.get("x-mcp-edge-cache") in ("hit", "miss")
                self.ok("cached")

    def whole(self) -> bool:
        return all(
            self.streaks.get(w, 0) >= STREAK for w in ("once", "policy", "limited", "cached")
        )


def tools_list(marker: str) -> dict[str, Any]:
    """A ``tools/list`` whose cache key is ``marker``'s."""
    return {
        "jsonrpc": "2.0",
        "id": next(_markers),
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {
                    "extensions": {"io.example/ha": {"m": marker}}
                },
            }
        },
    }


async def list_tools(
    client: httpx.AsyncClient, url: str, marker: str
) -> tuple[str | None, dict[str, Any]]:
    message = tools_list(marker)
    response = await client.post(url, json=message, headers={**HEADERS, "Mcp-Method": "tools/list"})
    assert response.headers.get("content-type", "").startswith("application/json"), response.text[
        :300
    ]
    doc = response.json()
    assert response.status_code == 200 and doc["id"] == message["id"] and "result" in doc, doc
    return response.headers.get("x-mcp-edge-cache"), doc["result"]


@dataclass
class Gateways:
    replicas: list[Replica]

    @property
    def bases(self) -> list[str]:
        return [r.base for r in self.replicas]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0), trust_env=False) as c:
        yield c


def start_gateways(tmp: Path, upstream: Upstream, store: dict[str, Any]) -> list[Replica]:
    config = gateway_config(routes(upstream.url), store=store)
    config["cache"] = {"backend": "redis"}
    keys = generate_key()
    replicas = [Replica(i, tmp, config) for i in range(2)]
    for replica in replicas:
        replica.start(keys)
    for replica in replicas:
        replica.wait()
    return replicas


@pytest.fixture
def sentinel_group(tmp_path: Path) -> Iterator[SentinelGroup]:
    require_binary(REDIS_SERVER, "redis-server")
    group = SentinelGroup(tmp_path / "redis")
    try:
        group.start()
        yield group
    finally:
        group.stop()


@pytest.fixture
def cluster_group(tmp_path: Path) -> Iterator[RedisClusterGroup]:
    require_binary(REDIS_SERVER, "redis-server")
    require_binary(REDIS_CLI, "redis-cli")
    group = RedisClusterGroup(tmp_path / "redis")
    try:
        group.start()
        yield group
    finally:
        group.stop()


async def run_failover(
    replicas: list[Replica],
    client: httpx.AsyncClient,
    *,
    checkpoint: Any,
    kill: Any,
    failed_over: Any,
) -> dict[str, Any]:
    """Load, a checkpoint (the replicas hold every spend so far), the kill, the failover, until
    whole; returns what the checks after it need."""
    load = Load([r.base for r in replicas], client)
    workers = [
        asyncio.create_task(load.flow_worker("once", "/once")),
        asyncio.create_task(load.flow_worker("policy", "/policy")),
        asyncio.create_task(load.limited_worker()),
        asyncio.create_task(load.cache_worker()),
    ]
    try:

        async def until(what: str, check: Any, timeout: float) -> None:
            deadline = time.monotonic() + timeout
            while not check():
                for task in workers:
                    if task.done():
                        task.result()  # a worker's failed assertion, surfaced here
                        raise AssertionError(f"a worker stopped while waiting for {what}")
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{what}: not within {timeout:.0f}s ({dict(load.oks)}, refused "
                        f"{dict(load.refused)}, other shapes {load.unexpected()})"
                    )
                await asyncio.sleep(0.05)

        await until(
            "warm-up: every worker succeeded",
            lambda: all(load.oks[w] >= 4 for w in ("once", "policy", "limited", "cached")),
            45,
        )
        checkpoint_at = time.monotonic()
        await asyncio.to_thread(wait_until, "the replicas hold every spend so far", checkpoint, 20)
        kill()
        killed_at = time.monotonic()
        accepted_before_kill = len(load.accepted)
        await until("the failover", lambda: _cached_check(failed_over), FAILOVER_TIMEOUT)
        failed_over_at = time.monotonic()
        await until("every kind of request succeeds again", load.whole, WHOLE_WITHIN)
    finally:
        load.stop.set()
        done = await asyncio.wait_for(asyncio.gather(*workers, return_exceptions=True), 30)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
    whole_at = max(load.last_refused, killed_at)
    return {
        "load": load,
        "checkpoint_at": checkpoint_at,
        "killed_at": killed_at,
        "failover_s": round(failed_over_at - killed_at, 2),
        "whole_s": round(whole_at - killed_at, 2),
        "accepted_before_kill": accepted_before_kill,
    }


_last_check: dict[int, tuple[float, bool]] = {}


def _cached_check(check: Any) -> bool:
    """Ask the servers at most every 0.2 s (the probes are blocking calls)."""
    now = time.monotonic()
    seen = _last_check.get(id(check))
    if seen is None or now - seen[0] > 0.2:
        seen = _last_check[id(check)] = (now, bool(check()))
    return seen[1]


async def replay_accepted(
    client: httpx.AsyncClient, replicas: list[Replica], accepted: list[Accepted]
) -> int:
    """Present every accepted state again, to each replica; the number accepted a second time.

    A 503 (the store slow to answer on a loaded machine) refuses too; the replay is sent again
    (a few times, bounded) until the store gives its answer, which must be ``replayed``. The
    replays go out a few at a time (every state was spent before the first one), so that their
    number, which grows with the load, does not make the phase long."""
    gate = asyncio.Semaphore(REPLAYS_AT_ONCE)

    async def replay(item: Accepted, replica: Replica) -> bool:
        async with gate:
            for _ in range(10):
                message = {**item.message, "id": next(_markers)}
                status, doc = await post(client, replica.base + item.path, message)
                assert doc.get("id") == message["id"], doc
                if status != 503:
                    break
                assert doc["error"]["data"] == {"reason": "state_store_unavailable"}, doc
                await asyncio.sleep(0.3)
        if status == 200:
            return True
        assert status == 400 and doc["error"]["data"] == {"reason": "replayed"}, (status, doc)
        return False

    outcomes = await asyncio.gather(
        *(replay(item, replica) for item in accepted for replica in replicas)
    )
    return sum(outcomes)


async def failed_open(client: httpx.AsyncClient, replicas: list[Replica], route: str) -> float:
    """Requests on ``route`` the replicas let through because their budget store did not answer
    (``rate_limits.fail_open``, the default), in all."""
    total = 0.0
    prefix = "mcp_edge_rate_limit_requests_total{"
    for replica in replicas:
        for line in (await client.get(replica.base + "/metrics")).text.splitlines():
            if (
                line.startswith(prefix)
                and f'route="{route}"' in line
                and 'decision="store_unavailable_allowed"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
    return total


async def budgets_answered(client: httpx.AsyncClient, replicas: list[Replica]) -> None:
    """Until a call on the rate-limited route is counted by each replica's budget store again
    instead of let through for want of an answer."""
    deadline = time.monotonic() + BUDGETS_BACK_WITHIN
    for replica in replicas:
        while True:
            before = await failed_open(client, [replica], "limited")
            message = tool_call("whoami", {"marker": f"back-{next(_markers)}"}, None, None)
            status, doc = await post(client, replica.base + "/limited", message)
            assert status == 200 and doc["id"] == message["id"], doc
            if await failed_open(client, [replica], "limited") == before:
                break
            assert time.monotonic() < deadline, "the budget store does not answer again"
            await asyncio.sleep(0.2)


async def after_failover(client: httpx.AsyncClient, replicas: list[Replica]) -> float:
    """Rate limits count across the replicas again; the cache is shared again (seconds until it
    was, after the rest was whole)."""
    await budgets_answered(client, replicas)
    for attempt in range(TIGHT_ATTEMPTS):
        route = f"tight-{attempt}"
        answers = []
        for i in range(4):  # 3/minute on a budget no one touched: three pass, the fourth is refused
            message = tool_call("whoami", {}, None, None)
            status, doc = await post(client, replicas[i % 2].base + f"/{route}", message)
            assert doc["id"] == message["id"]
            answers.append(status)
        if not await failed_open(client, replicas, route):
            assert answers == [200, 200, 200, 429], answers
            break
    else:
        raise AssertionError(f"the budget store failed open in each of {TIGHT_ATTEMPTS} checks")
    # The cache: Redis trouble was a miss; once every replica's client found the new master, what
    # one replica fetched is a hit on the other again.
    started = time.monotonic()
    while True:
        marker = f"after-{next(_markers)}"
        await list_tools(client, replicas[0].base + "/cached", marker)
        if (await list_tools(client, replicas[1].base + "/cached", marker))[0] == "hit":
            return round(time.monotonic() - started, 2)
        assert time.monotonic() - started < CACHE_SHARED_WITHIN, "the cache is not shared again"
        await asyncio.sleep(0.2)


def report(name: str, **numbers: object) -> None:
    print(f"\nREDIS-HA {name}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


async def test_sentinel_failover_under_load(
    tmp_path: Path,
    shared_upstream: Upstream,
    sentinel_group: SentinelGroup,
    client: httpx.AsyncClient,
) -> None:
    group = sentinel_group
    replicas = start_gateways(
        tmp_path,
        shared_upstream,
        {"type": "redis", "url": group.url, "timeout_seconds": 1.0, "spend_replicas": 1},
    )
    try:
        run = await run_failover(
            replicas,
            client,
            checkpoint=group.replicated,
            kill=group.master.kill,
            failed_over=group.failed_over,
        )
        load: Load = run["load"]
        posts = shared_upstream.stats()["posts"]
        # Every spend waited for a replica: none is lost, whenever it happened.
        again = await replay_accepted(client, replicas, load.accepted)
        assert again == 0, f"{again} spent states were accepted again after the failover"
        assert shared_upstream.stats()["posts"] == posts, "a replay reached the upstream"
        cache_s = await after_failover(client, replicas)
    finally:
        for replica in replicas:
            replica.stop()
    assert not load.unexpected(), f"answers of another shape: {load.unexpected()}"
    assert run["whole_s"] < WHOLE_WITHIN
    report(
        "sentinel",
        requests=load.sent,
        shapes=dict(Counter(shape for _, shape in load.shapes.elements())),
        refused=sum(load.refused.values()),
        refused_by_route=dict(load.refused),
        spends_replayed=len(load.accepted),
        accepted_twice=again,
        failover_s=run["failover_s"],
        whole_again_s=run["whole_s"],
        cache_shared_after_s=cache_s,
    )


async def test_cluster_failover_under_load(
    tmp_path: Path,
    shared_upstream: Upstream,
    cluster_group: RedisClusterGroup,
    client: httpx.AsyncClient,
) -> None:
    group = cluster_group
    replicas = start_gateways(
        tmp_path, shared_upstream, {"type": "redis", "url": group.url, "timeout_seconds": 0.5}
    )
    victim = group.masters()[0]
    heir = group.replica_of(victim)
    try:
        run = await run_failover(
            replicas,
            client,
            checkpoint=lambda: group.replicated(victim, heir),
            kill=victim.kill,
            failed_over=lambda: group.failed_over(victim, heir),
        )
        load: Load = run["load"]
        # Spends the replica was known to hold (before the checkpoint) and spends after the kill
        # are never accepted again; the few in between carry the replication window (counted).
        held = [a for a in load.accepted if a.at < run["checkpoint_at"] or a.at > run["killed_at"]]
        window = [a for a in load.accepted if run["checkpoint_at"] <= a.at <= run["killed_at"]]
        posts = shared_upstream.stats()["posts"]
        again = await replay_accepted(client, replicas, held)
        assert again == 0, f"{again} spent states were accepted again after the failover"
        assert shared_upstream.stats()["posts"] == posts, "a replay reached the upstream"
        lost = await replay_accepted(client, replicas, window)
        cache_s = await after_failover(client, replicas)
    finally:
        for replica in replicas:
            replica.stop()
    assert not load.unexpected(), f"answers of another shape: {load.unexpected()}"
    assert run["whole_s"] < WHOLE_WITHIN
    report(
        "cluster",
        requests=load.sent,
        shapes=dict(Counter(shape for _, shape in load.shapes.elements())),
        refused=sum(load.refused.values()),
        refused_by_route=dict(load.refused),
        spends_replayed=len(held),
        accepted_twice=again,
        in_replication_window=len(window),
        window_accepted_again=lost,
        failover_s=run["failover_s"],
        whole_again_s=run["whole_s"],
        cache_shared_after_s=cache_s,
    )


async def test_spend_waits_for_a_replica_and_fails_closed_without_one(tmp_path: Path) -> None:
    """``spend_replicas: 1``: a spend is accepted only once a replica holds it; with the replica
    frozen it is "unknown" (the route answers 503) and stays spent; without the setting the
    master's answer is enough."""
    require_binary(REDIS_SERVER, "redis-server")
    master = Node(tmp_path, "master", DATA)
    replica = Node(tmp_path, "replica", [*DATA, "--replicaof", "127.0.0.1", str(master.port)])
    url = f"redis://127.0.0.1:{master.port}/0"
    waiting = RedisStore(url, timeout=2.0, spend_replicas=1)  # WAIT gives up after 1.2 s
    plain = RedisStore(url, timeout=0.5)
    expires = int(time.time()) + 60
    try:
        master.wait()
        replica.wait()
        await asyncio.to_thread(
            wait_until,
            "the master counts its replica online",
            lambda: "state=online" in (info_field(master.port, "replication", "slave0") or ""),
            20,
        )
        await asyncio.to_thread(
            wait_until, "the replica caught up", lambda: replicated(master, replica), 20
        )
        await waiting.consume("held", expires)
        assert (
            probe(replica.port, "EXISTS", "mcp-edge:jti:held") == 1
        )  # on the replica when accepted
        os.killpg(replica.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="held by 0 of 1 replicas"):
                await waiting.consume("frozen", expires)
            assert time.monotonic() - started < 3.0
            await plain.consume("unwaited", expires)  # the master's answer only
        finally:
            os.killpg(replica.process.pid, signal.SIGCONT)
        with pytest.raises(StateRejected, match="replayed"):
            await waiting.consume("frozen", expires)  # an unknown outcome is not a fresh state
        await asyncio.to_thread(
            wait_until, "the replica caught up", lambda: replicated(master, replica), 20
        )
        await waiting.consume("thawed", expires)
    finally:
        await waiting.aclose()
        await plain.aclose()
        replica.stop()
        master.stop()
