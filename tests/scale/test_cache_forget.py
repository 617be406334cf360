"""A federated member's cached parts forgotten on every replica: the Redis cache on its own, two
``RedisCache`` objects (two replicas, each with its own memory) against one real redis-server.

A member's entries live in Redis only, named by the member's sorted set; a forget on one replica
unlinks them there, so the other replica's next lookup misses. Other routes keep their memory
copies and get no set."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis

from mcp_edge.cache.store import Entry, MemoryCache, RedisCache, index_key
from tests.scale.cluster import RedisServer

pytestmark = pytest.mark.timeout(30)

MEMBER = "fed/docs"
OTHER_MEMBER = "fed/code"
PLAIN = "plain"  # a single-upstream route: never forgotten


def now_ms() -> int:
    return int(time.time() * 1000)


def entry(route: str, expires_ms: int, body: bytes = b"{}") -> Entry:
    return Entry(expires_ms, "public", route, b',"tools":' + body + b"}")


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex}:"


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


@pytest.fixture
async def replicas(redis_server: RedisServer, prefix: str) -> AsyncIterator[list[RedisCache]]:
    """Two replicas' caches: their own memory, one Redis; both know the members as forgettable
    (the stack marks every federated member's cache so)."""
    errors: list[str] = []
    caches = []
    for _ in range(2):
        cache = RedisCache(
            redis_server.url,
            MemoryCache(1 << 20),
            timeout=2.0,
            key_prefix=prefix,
            max_ttl_seconds=30,
            on_error=errors.append,
        )
        cache.forgettable(MEMBER)
        cache.forgettable(OTHER_MEMBER)
        caches.append(cache)
    yield caches
    for cache in caches:
        await cache.aclose()
    assert errors == [], "Redis trouble"


async def test_a_forget_on_one_replica_reaches_the_other(
    replicas: list[RedisCache], raw: Redis, prefix: str
) -> None:
    a, b = replicas
    now = now_ms()
    await a.put("k-docs-1", entry(MEMBER, now + 20_000, b"[1]"), now)
    await a.put("k-docs-2", entry(MEMBER, now + 20_000, b"[2]"), now)
    await a.put("k-code", entry(OTHER_MEMBER, now + 20_000, b"[3]"), now)
    await a.put("k-plain", entry(PLAIN, now + 20_000, b"[4]"), now)
    # B answers from what A stored, a member's parts straight from Redis (not kept in memory).
    for key in ("k-docs-1", "k-docs-2", "k-code", "k-plain"):
        assert await b.get(key, now_ms()) is not None, key
    assert len(b.local) == 1 and b.local.lookup("k-plain", now_ms()) is not None
    assert len(a.local) == 1
    assert sorted(await raw.zrange(index_key(prefix, MEMBER), 0, -1)) == [b"k-docs-1", b"k-docs-2"]
    assert not await raw.exists(index_key(prefix, PLAIN))

    await a.invalidate(MEMBER)  # the member said its list changed, on A's listen stream

    assert await b.get("k-docs-1", now_ms()) is None
    assert await b.get("k-docs-2", now_ms()) is None
    assert await a.get("k-docs-1", now_ms()) is None
    assert not await raw.exists(prefix + "k-docs-1", prefix + "k-docs-2")
    assert not await raw.exists(index_key(prefix, MEMBER))
    # The other member and the plain route keep theirs.
    other = await b.get("k-code", now_ms())
    assert other is not None and other.tail.endswith(b"[3]}")
    assert await b.get("k-plain", now_ms()) is not None
    assert await raw.zrange(index_key(prefix, OTHER_MEMBER), 0, -1) == [b"k-code"]

    # Stored again after the change: found again, and forgettable again.
    now = now_ms()
    await b.put("k-docs-1", entry(MEMBER, now + 20_000, b"[5]"), now)
    fresh = await a.get("k-docs-1", now_ms())
    assert fresh is not None and fresh.tail.endswith(b"[5]}")
    await b.invalidate(MEMBER)
    assert await a.get("k-docs-1", now_ms()) is None


async def test_forgetting_what_was_never_stored_is_nothing(
    replicas: list[RedisCache], raw: Redis, prefix: str
) -> None:
    a, _ = replicas
    await a.invalidate(MEMBER)
    assert not await raw.exists(index_key(prefix, MEMBER))


async def test_the_index_outlives_its_entries_and_drops_the_expired(
    replicas: list[RedisCache], raw: Redis, prefix: str
) -> None:
    a, _ = replicas
    index = index_key(prefix, MEMBER)
    now = now_ms()
    await a.put("k-short", entry(MEMBER, now + 1_000), now)
    # As long as the longest an entry may live (max_ttl_seconds: 30), whatever the entry's own.
    assert 25_000 < await raw.pttl(index) <= 30_000
    await a.put("k-long", entry(MEMBER, now + 29_000), now)
    assert await raw.pttl(index) >= await raw.pttl(prefix + "k-long") > 25_000
    # A store once the short entry is past its time names only the live ones.
    later = now + 2_000
    await a.put("k-next", entry(MEMBER, later + 10_000), later)
    assert sorted(await raw.zrange(index, 0, -1)) == [b"k-long", b"k-next"]
