"""One scaled-out deployment for the whole session, built from real processes:

    client ──▶ nginx (round robin, no affinity) ──▶ 3 x mcp-edge serve ──▶ upstreams
                                                         │
                                                         └──▶ redis-server (single-use store)

Routes of every replica:

* ``/mcp``      → one upstream with a fixed request-state key;
* ``/once``     → the same upstream, ``single_use: true`` (Redis store, fail closed);
* ``/pinned``   → ``endpoints: [a, b]``, two upstreams with per-process keys, affinity on;
* ``/unpinned`` → the same two, ``affinity: false``;
* ``/limited``, ``/limited-flows``, ``/limited-outage``, ``/limited-chains`` → the first
  upstream, with rate limits (budgets in Redis);
* ``/cached`` → the first upstream (``tools/list`` public, 60 s), the edge cache backed by Redis;
* ``/policy`` → the first upstream, the survey needs the gateway's approval (single-use in Redis),
  tool definitions pinned in Redis.

Tests that kill or restart something put it back (``Cluster.heal``) before they return.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.scale.cluster import (
    NGINX,
    REDIS_SERVER,
    REQUIRE_ALL,
    Nginx,
    RedisServer,
    Replica,
    Samples,
    Upstream,
    free_port_on,
    gateway_config,
    metric,
)

REPLICAS = 3
UPSTREAM_KEY = os.urandom(32).hex()


def require_binary(path: str | None, name: str) -> str:
    """Skip without the binary; fail instead when REQUIRE_ALL=1 (CI installs it with apt)."""
    if path:
        return path
    message = f"{name} is not installed (apt-get install {name.split('-')[0]})"
    if REQUIRE_ALL:
        pytest.fail(message + " and REQUIRE_ALL=1")
    pytest.skip(message)


@dataclass
class Cluster:
    shared: Upstream
    ephemeral: list[Upstream]
    redis: RedisServer
    replicas: list[Replica]
    nginx: Nginx
    keys: str

    def url(self, path: str = "/mcp") -> str:
        return self.nginx.base + path

    def snapshot(self) -> list[Samples | None]:
        """Every replica's metrics (None for one that is down)."""
        return [r.metrics() if r.running else None for r in self.replicas]

    def served(
        self, route: str, before: list[Samples | None], after: list[Samples | None]
    ) -> list[int]:
        """Indices of the replicas whose count of answered requests on `route` went up.

        `mcp_edge_request_seconds` is observed when the response starts, so it is counted
        before the client can have read the answer.
        """
        hits = []
        for i, (b, a) in enumerate(zip(before, after, strict=True)):
            if a is None:
                continue
            delta = metric(a, "mcp_edge_request_seconds_count", route=route) - (
                metric(b, "mcp_edge_request_seconds_count", route=route) if b is not None else 0.0
            )
            hits += [i] * int(delta)
        return hits

    def heal(self) -> None:
        """Bring back anything a test stopped, with the current key ring."""
        if self.redis.process is None or not self.redis.process.running:
            self.redis.start()
            self.redis.wait()
        down = [r for r in self.replicas if not r.running]
        for replica in down:
            replica.start(self.keys)
        for replica in down:
            replica.wait()


@pytest.fixture(scope="session")
def scale_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("scale")


@dataclass
class Upstreams:
    #: Seals its requestState with a fixed key (any process of it could finish a flow).
    shared: Upstream
    #: Two processes with the SDK default, a random request-state key each, on one port at two
    #: addresses (127.0.0.2 and 127.0.0.3), like two pods behind a headless Service.
    pair: list[Upstream]


@pytest.fixture(scope="session")
def upstreams(scale_tmp: Path) -> Iterator[Upstreams]:
    port = free_port_on("127.0.0.2", "127.0.0.3")
    started: list[Upstream] = []
    try:
        started.append(
            Upstream(
                scale_tmp, "--keys", UPSTREAM_KEY, "--instance", "shared", "--list-ttl-ms", "60000"
            )
        )
        for host in ("127.0.0.2", "127.0.0.3"):
            started.append(
                Upstream(
                    scale_tmp, "--ephemeral", "--instance", f"eph-{host}", host=host, port=port
                )
            )
        for upstream in started:  # started together, waited for together
            upstream.wait()
        yield Upstreams(shared=started[0], pair=started[1:])
    finally:
        for upstream in started:
            upstream.stop()


@pytest.fixture(scope="session")
def shared_upstream(upstreams: Upstreams) -> Upstream:
    return upstreams.shared


@pytest.fixture(scope="session")
def ephemeral_pair(upstreams: Upstreams) -> list[Upstream]:
    return upstreams.pair


@pytest.fixture(scope="session")
def redis_server(scale_tmp: Path) -> Iterator[RedisServer]:
    require_binary(REDIS_SERVER, "redis-server")
    redis = RedisServer(scale_tmp)
    try:
        redis.start()
        redis.wait()
        yield redis
    finally:
        redis.stop()


@pytest.fixture(scope="session")
def cluster(
    scale_tmp: Path,
    shared_upstream: Upstream,
    ephemeral_pair: list[Upstream],
    redis_server: RedisServer,
) -> Iterator[Cluster]:
    require_binary(NGINX, "nginx")
    pair = [u.url for u in ephemeral_pair]
    config = gateway_config(
        [
            {"name": "shared", "path": "/mcp", "upstream": shared_upstream.url},
            {"name": "once", "path": "/once", "upstream": shared_upstream.url, "single_use": True},
            {"name": "pinned", "path": "/pinned", "endpoints": pair},
            {"name": "unpinned", "path": "/unpinned", "endpoints": pair, "affinity": False},
            # Budgets in the shared Redis (see test_rate_limits.py), one route per test.
            {
                "name": "limited",
                "path": "/limited",
                "upstream": shared_upstream.url,
                "rate_limits": {"per_principal": "60/minute"},
            },
            {
                "name": "limited-flows",
                "path": "/limited-flows",
                "upstream": shared_upstream.url,
                "rate_limits": {"per_principal": "4/minute"},
            },
            {
                "name": "limited-outage",
                "path": "/limited-outage",
                "upstream": shared_upstream.url,
                "rate_limits": {"per_principal": "1000/minute"},
            },
            {
                "name": "limited-chains",
                "path": "/limited-chains",
                "upstream": shared_upstream.url,
                "rate_limits": {"per_principal": "3/minute"},
            },
            # The edge cache with Redis behind each replica's memory (see test_edge_cache_shared.py).
            {
                "name": "cached",
                "path": "/cached",
                "upstream": shared_upstream.url,
                "cache": {"enabled": True},
            },
            # The gateway's own approval before the survey, pins in Redis (see test_policy_replicas.py).
            {
                "name": "policy",
                "path": "/policy",
                "upstream": shared_upstream.url,
                "legacy_clients": "deny",
                "policy": {
                    "pin_tools": True,
                    "rules": [{"when": 'name == "survey"', "action": "approve"}],
                },
            },
        ],
        store={"type": "redis", "url": redis_server.url, "timeout_seconds": 0.5},
    )
    config["cache"] = {"backend": "redis"}
    keys = generate_key()
    replicas = [Replica(i, scale_tmp, config) for i in range(REPLICAS)]
    nginx: Nginx | None = None
    try:
        for replica in replicas:
            replica.start(keys)
        nginx = Nginx(scale_tmp, [r.port for r in replicas])
        for replica in replicas:
            replica.wait()
        nginx.wait()
        yield Cluster(shared_upstream, ephemeral_pair, redis_server, replicas, nginx, keys)
    finally:
        if nginx is not None:
            nginx.stop()
        for replica in replicas:
            replica.stop()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(15.0), trust_env=False) as c:
        yield c


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here) and "cluster" in getattr(
            item, "fixturenames", ()
        ):
            item.add_marker(pytest.mark.integration)
