"""``store.url``: the one Redis setting, its Sentinel and Cluster forms, the checks with clear
messages (never echoing a password), and what each feature opens from it."""

from __future__ import annotations

import pytest
from limits.aio.storage import RedisClusterStorage, RedisSentinelStorage, RedisStorage
from redis.asyncio import Redis, RedisCluster

from gateway.ratelimit.config import RateLimitSection
from gateway.ratelimit.limiter import build_budget_store
from gateway.server.config import ConfigError, load_config
from gateway.store.config import StoreSection
from gateway.store.redis import fast_redis, limits_storage_args, parse_redis_url

ENV = {"MCP_EDGE_UPSTREAM": "http://127.0.0.1:9/mcp", "MCP_EDGE_STORE_TYPE": "redis"}


def test_sentinel_form() -> None:
    t = parse_redis_url("redis+sentinel://user:p%40ss@s1:26380,s2,[::1]:26381/edge/2")
    assert t.kind == "sentinel" and not t.tls
    assert t.nodes == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (t.master, t.db, t.username, t.password) == ("edge", 2, "user", "p@ss")
    assert "p@ss" not in repr(t)
    assert parse_redis_url("rediss+sentinel://s1/edge").tls


def test_cluster_form() -> None:
    t = parse_redis_url("rediss+cluster://:pw@n1:7000,n2:7001")
    assert (t.kind, t.tls, t.nodes, t.password, t.db) == (
        "cluster",
        True,
        (("n1", 7000), ("n2", 7001)),
        "pw",
        0,
    )
    assert parse_redis_url("redis+cluster://n1").nodes == (("n1", 6379),)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://u:SECRET@s1:26379", "needs the master's name"),
        ("redis+sentinel://s1/edge/x", "only a database number"),
        ("redis+cluster://n1:7000/1", "takes no path"),
        ("redis+cluster://n1:70000", "port must be a number"),
        ("redis+cluster://n1:7000,,n2", "needs host:port"),
        ("redis+sentinel://s1/edge?ssl=1", "takes no query"),
        ("memcached://u:SECRET@x", "must start with redis://"),
        ("redis://", "needs a host"),
    ],
)
def test_bad_urls_are_refused_clearly(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, env={**ENV, "MCP_EDGE_STORE_URL": url})
    assert message in str(info.value) and "SECRET" not in str(info.value)


def test_spend_replicas_needs_a_connection_that_a_cluster_client_does_not_keep() -> None:
    with pytest.raises(ValueError, match="spend_replicas: not available with a cluster"):
        StoreSection(type="redis", url="redis+cluster://n1:7000", spend_replicas=1)
    assert (
        StoreSection(type="redis", url="redis+sentinel://s1/edge", spend_replicas=1).spend_replicas
        == 1
    )


async def test_every_feature_opens_the_deployment_the_url_names() -> None:
    single = fast_redis("redis://127.0.0.1:1/0", 0.2)
    cluster = fast_redis("redis+cluster://127.0.0.1:1,127.0.0.1:2", 0.2)
    sentinel = fast_redis("redis+sentinel://127.0.0.1:1/edge/3", 0.2)
    try:
        assert type(single) is Redis
        assert isinstance(cluster, RedisCluster)
        assert isinstance(sentinel, Redis) and sentinel.connection_pool.service_name == "edge"  # type: ignore[attr-defined]
        assert sentinel.connection_pool.connection_kwargs["db"] == 3
    finally:
        for client in (single, cluster, sentinel):
            await client.aclose()


def test_rate_limits_derive_their_storage_from_the_same_url() -> None:
    uri, options = limits_storage_args("redis+sentinel://u:pw@s1:26379,s2:26380/edge/1", 0.25)
    assert uri == "async+redis+sentinel://s1:26379,s2:26380/edge"  # no credentials in the URI
    assert (options["password"], options["db"], options["use_replicas"]) == ("pw", 1, False)
    assert options["sentinel_kwargs"]["socket_timeout"] == 0.25
    uri, options = limits_storage_args("rediss+cluster://n1:7000", 0.25)
    assert uri == "async+redis+cluster://n1:7000" and options["ssl"] is True

    section = RateLimitSection()
    kinds = {
        "redis://127.0.0.1:1/0": RedisStorage,
        "redis+sentinel://127.0.0.1:1/edge": RedisSentinelStorage,
        "redis+cluster://127.0.0.1:1": RedisClusterStorage,
    }
    for url, kind in kinds.items():
        budgets = build_budget_store(section, StoreSection(type="redis", url=url))
        assert type(budgets.storage) is kind, url
