"""``store.url``: the one Redis setting, its Sentinel and Cluster forms, the checks with clear
messages (naming the URL with its credentials redacted, whatever characters they hold), and what
each feature opens from it."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from limits.aio.storage import RedisClusterStorage, RedisSentinelStorage, RedisStorage
from redis.asyncio import Redis, RedisCluster

from mcp_edge import exits
from mcp_edge.core.seal import generate_key
from mcp_edge.ratelimit.config import RateLimitSection
from mcp_edge.ratelimit.limiter import build_budget_store
from mcp_edge.server.cli import main
from mcp_edge.server.config import ConfigError, load_config
from mcp_edge.store.config import StoreSection
from mcp_edge.store.redis import fast_redis, limits_storage_args, parse_redis_url

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


# ---------------------------------------------------------------- credentials in errors

#: Passwords holding what ends a URL's host part early in the standard parsers, each part long
#: enough to be told apart in a message.
PASSWORDS = [
    "Zq9Qa/Xw7Wb+Kv5Vc==",  # base64
    "Zq9Qa#Xw7Wb",
    "Zq9Qa?Xw7Wb",
    "Zq9Qa@Xw7Wb",
    "Zq9Qa%Xw7Wb",
    "Zq9Qa/Xw7Wb#Kv5Vc?Jm3Md@Hp1He%Ty8Tf",
]
#: Each URL form with a defect of its own (``{pw}``: the password as written).
BAD_URLS = [
    "redis://user:{pw}@redis:99999/0",
    "redis://:{pw}@redis:abc/0",
    "rediss://user:{pw}@[::1/0",
    "redis://user:{pw}@redis:6379/zero",
    "redis://user:{pw}@redis:6379/0?db=x",
    "redis://user:{pw}@redis:6379/0?no_such_option=1",
    "redis://user:{pw}@\u2603:6379/0",
    "unix://user:{pw}@relative.sock",
    "redis+sentinel://user:{pw}@s1:26379",
    "redis+sentinel://user:{pw}@s1:0/edge",
    "rediss+cluster://:{pw}@n1:7000,[fe80::zz]:7001",
    "redis+cluster://:{pw}@n1:7000/3",
    "memcached://user:{pw}@x",
]


def secret_parts(password: str) -> list[str]:
    return [part for part in re.split(r"[/#?@%+=]", password) if part]


@pytest.mark.parametrize("password", PASSWORDS)
@pytest.mark.parametrize("template", BAD_URLS)
def test_errors_name_the_url_with_its_credentials_redacted(template: str, password: str) -> None:
    url = template.format(pw=password)
    with pytest.raises(ConfigError) as info:
        load_config(None, env={**ENV, "MCP_EDGE_STORE_URL": url})
    message = str(info.value)
    assert message.startswith("store: url: '") and "***@" in message, message
    for part in secret_parts(password):
        assert part not in message, (part, message)


@pytest.mark.parametrize("password", PASSWORDS)
async def test_a_password_may_hold_any_character(password: str) -> None:
    """Written as it is or percent-encoded, the client gets the same password."""
    for written in (password, quote(password, safe="")):
        single = fast_redis(f"redis://edge:{written}@127.0.0.1:6379/2", 0.2)
        try:
            kwargs = single.connection_pool.connection_kwargs
            assert (kwargs["username"], kwargs["password"], kwargs["db"]) == (
                "edge",
                password,
                2,
            )
            assert (kwargs["host"], kwargs["port"]) == ("127.0.0.1", 6379)
        finally:
            await single.aclose()
        sentinel = parse_redis_url(f"redis+sentinel://:{written}@s1:26380,s2/edge/1")
        assert (sentinel.password, sentinel.nodes, sentinel.master, sentinel.db) == (
            password,
            (("s1", 26380), ("s2", 26379)),
            "edge",
            1,
        )
        cluster = parse_redis_url(f"redis+cluster://u:{written}@n1:7000")
        assert (cluster.username, cluster.password, cluster.nodes) == (
            "u",
            password,
            (("n1", 7000),),
        )


def test_a_bad_store_url_is_a_configuration_error_at_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check-config`` (and ``serve``, which builds the same) ends with one line and exit 2,
    never exit 70 with the client library's message (which quoted part of the password)."""
    password = PASSWORDS[-1]
    config = tmp_path / "gateway.yaml"
    config.write_text(
        "auth: {mode: anonymous}\n"
        f"store: {{type: redis, url: 'redis://edge:{password}@redis:6379/0'}}\n"
        "routes: [{name: a, upstream: 'http://127.0.0.1:1/mcp', single_use: true}]\n"
    )
    config.chmod(0o600)
    monkeypatch.setenv("MCP_EDGE_STATE_KEYS", generate_key())
    for url in ("redis://edge:{pw}@redis:99999/0", "redis://edge:{pw}@redis:6379/0?db=x"):
        monkeypatch.setenv("MCP_EDGE_STORE_URL", url.format(pw=password))
        assert main(["check-config", "--config", str(config)]) == exits.USAGE
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1, err
        assert err.startswith("mcp-edge: configuration error: store: url: 'redis://***@redis:")
        for part in secret_parts(password):
            assert part not in err, err
