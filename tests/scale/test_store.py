"""The single-use stores on their own (memory; Redis against a real redis-server), the replay
guard's fail-closed / fail-open decision, and a whole in-process gateway in front of a real
upstream with a store that cannot be reached."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from mcp_edge.core.errors import RpcError
from mcp_edge.core.seal import KeyRing, StateRejected, generate_key, parse_key_spec
from mcp_edge.observability.metrics import Metrics
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import ConfigError, GatewayConfig, load_config
from mcp_edge.store import MemoryStore, StoreMetrics, StoreUnavailable, make_replay_guard
from mcp_edge.store.redis_store import KEY_PREFIX, RedisStore
from tests.scale.cluster import RedisServer, Upstream
from tests.scale.flows import SurveyFlow
from tests.support.processes import free_port

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# ------------------------------------------------------------------ memory store


async def test_memory_store_refuses_a_second_use() -> None:
    store = MemoryStore(clock=Clock())
    await store.consume("a", 1_000_600)
    await store.consume("b", 1_000_600)
    with pytest.raises(StateRejected) as caught:
        await store.consume("a", 1_000_600)
    assert caught.value.reason == "replayed"


async def test_memory_store_forgets_ids_once_expired() -> None:
    clock = Clock()
    store = MemoryStore(clock=clock)
    for i in range(100):
        await store.consume(f"id{i}", int(clock.now) + 10 + i)
    assert len(store) == 100
    clock.now += 60  # ids expiring up to +60 are swept on the next write
    await store.consume("fresh", int(clock.now) + 10)
    assert len(store) == 100 - 51 + 1
    # An expired id may be presented again: the seal's own expiry check refuses that state.
    await store.consume("id0", int(clock.now) + 10)


async def test_memory_store_is_bounded_and_fails_closed_when_full() -> None:
    clock = Clock()
    store = MemoryStore(max_entries=3, clock=clock)
    for jti in ("a", "b", "c"):
        await store.consume(jti, int(clock.now) + 5)
    with pytest.raises(StoreUnavailable):
        await store.consume("d", int(clock.now) + 5)  # evicting a live id would allow its replay
    clock.now += 6
    await store.consume("d", int(clock.now) + 5)  # room again once the others expired
    assert len(store) == 1


# ------------------------------------------------------------------ replay guard


class DeadStore:
    async def consume(self, jti: str, expires_at: int) -> None:
        raise StoreUnavailable("ConnectionError")

    async def aclose(self) -> None:
        pass


class RecordingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    async def consume(self, jti: str, expires_at: int) -> None:
        self.calls.append((jti, expires_at))
        await super().consume(jti, expires_at)


async def test_replay_guard_keeps_ids_through_the_leeway() -> None:
    store = RecordingStore()
    guard = make_replay_guard(
        store,
        route="r",
        leeway_seconds=5,
        fail_open=False,
        metrics=StoreMetrics(Metrics().registry),
    )
    await guard("x", 2_000_000_000)
    assert store.calls == [("x", 2_000_000_005)]


@pytest.mark.parametrize("fail_open", [False, True])
async def test_replay_guard_when_the_store_is_down(fail_open: bool) -> None:
    metrics = Metrics()
    guard = make_replay_guard(
        DeadStore(),
        route="r",
        leeway_seconds=5,
        fail_open=fail_open,
        metrics=StoreMetrics(metrics.registry),
    )
    if fail_open:
        await guard("x", 2_000_000_000)
    else:
        with pytest.raises(RpcError) as caught:
            await guard("x", 2_000_000_000)
        assert caught.value.http_status == 503
        assert caught.value.data == {"reason": "state_store_unavailable"}
        assert caught.value.headers == {"Retry-After": "1"}
    action = "fail_open" if fail_open else "rejected"
    assert (
        metrics.registry.get_sample_value(
            "mcp_edge_state_store_unavailable_total", {"route": "r", "action": action}
        )
        == 1.0
    )


# ------------------------------------------------------------------ Redis store


@pytest.fixture
async def redis_store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    store = RedisStore(redis_server.url, timeout=0.5)
    yield store
    await store.aclose()


async def test_redis_store_sets_once_with_expiry(
    redis_store: RedisStore, redis_server: RedisServer
) -> None:
    jti = f"t-{time.time_ns()}"
    await redis_store.consume(jti, int(time.time()) + 30)
    with pytest.raises(StateRejected) as caught:
        await redis_store.consume(jti, int(time.time()) + 30)
    assert caught.value.reason == "replayed"
    async with Redis.from_url(redis_server.url) as raw:
        ttl_ms = await raw.pttl(KEY_PREFIX + jti)
    assert 28_000 < ttl_ms <= 30_000


async def test_redis_store_unreachable_is_unavailable_quickly() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", timeout=0.3)  # nothing listens there
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.consume("x", int(time.time()) + 30)
    assert time.monotonic() - started < 1.0
    await store.aclose()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


async def test_redis_store_times_out_on_a_silent_server(silent_server: int) -> None:
    store = RedisStore(f"redis://127.0.0.1:{silent_server}/0", timeout=0.3)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.consume("x", int(time.time()) + 30)
    assert time.monotonic() - started < 1.0
    await store.aclose()


# ------------------------------------------------------------------ config


def test_store_config(tmp_path: Any) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "store: {type: redis}\nroutes: [{upstream: 'http://a/mcp', single_use: true}]\n"
    )
    with pytest.raises(ConfigError, match="store: url: required when type is redis"):
        load_config(str(path), env={})
    config = load_config(str(path), env={"MCP_EDGE_STORE_URL": "redis://:secret@redis:6379/0"})
    assert config.store.type == "redis" and config.routes[0].single_use
    assert "secret" not in repr(config.store)
    path.write_text("store: {type: memcached}\nroutes: [{upstream: 'http://a/mcp'}]\n")
    with pytest.raises(ConfigError, match=r"store\.type"):
        load_config(str(path), env={})
    # Several worker processes do not share a memory store: refused rather than silently weaker.
    path.write_text(
        "listen: {workers: 2}\nroutes: [{upstream: 'http://a/mcp', single_use: true}]\n"
    )
    with pytest.raises(ConfigError, match=r"need store\.type: redis"):
        load_config(str(path), env={})


# ------------------------------------------------------------------ in-process gateway


def in_process_gateway(upstream: str, store: dict[str, Any]) -> GatewayApp:
    config = GatewayConfig.model_validate(
        {
            "auth": {"mode": "anonymous"},
            "store": store,
            "routes": [{"name": "once", "path": "/once", "upstream": upstream, "single_use": True}],
        }
    )
    return GatewayApp(config, KeyRing([parse_key_spec(generate_key())]))


@pytest.mark.parametrize("fail_open", [False, True])
async def test_unreachable_store_in_front_of_a_real_upstream(
    shared_upstream: Upstream, fail_open: bool
) -> None:
    app = in_process_gateway(
        shared_upstream.url,
        {
            "type": "redis",
            "url": f"redis://127.0.0.1:{free_port()}/0",
            "timeout_seconds": 0.3,
            "fail_open": fail_open,
        },
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", timeout=10
    ) as client:
        flow = SurveyFlow(f"in-process-{fail_open}", "http://127.0.0.1/once")
        await flow.advance(client)
        posts = shared_upstream.stats()["posts"]
        await flow.run(client)
    await app.aclose()
    samples = {
        (s.name, s.labels.get("action")): s.value
        for m in app.metrics.registry.collect()
        for s in m.samples
    }
    if fail_open:
        assert flow.completed  # retries went through unchecked, each one counted and logged
        assert samples[("mcp_edge_state_store_unavailable_total", "fail_open")] == 3.0
    else:
        assert flow.status == 503 and flow.requests == 2
        assert flow.error == {
            "code": -32603,
            "message": "Single-use state store unavailable; retry shortly",
            "data": {"reason": "state_store_unavailable"},
        }
        assert shared_upstream.stats()["posts"] == posts
        assert samples[("mcp_edge_state_store_unavailable_total", "rejected")] == 1.0


async def test_memory_store_in_front_of_a_real_upstream(shared_upstream: Upstream) -> None:
    app = in_process_gateway(shared_upstream.url, {"type": "memory"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", timeout=10
    ) as client:
        flow = SurveyFlow("memory", "http://127.0.0.1/once")
        await flow.advance(client)
        replay = SurveyFlow("memory", flow.url, responses=flow.responses, state=flow.state)
        await flow.run(client)
        await replay.advance(client)
    await app.aclose()
    assert flow.completed
    assert replay.status == 400
    assert replay.error == {
        "code": -32602,
        "message": "Invalid or expired requestState",
        "data": {"reason": "replayed"},
    }
