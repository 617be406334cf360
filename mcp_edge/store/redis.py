"""The one way the gateway opens Redis (the single-use store, tool pins, the edge cache and, through
the ``limits`` library, rate-limit budgets): fail fast, so a slow or dead Redis is the caller's
decision (503, fail-open, last known value), never a request that hangs.

``store.url`` names one of three deployments:

* ``redis://[user:password@]host:port[/db]``, ``rediss://...``, ``unix://...``: one server;
* ``redis+sentinel://[user:password@]host:port[,host:port...]/<master>[/db]`` (``rediss+sentinel``
  for TLS): the sentinels are asked which server is the master, again after every lost connection,
  so a failover is followed by reconnecting;
* ``redis+cluster://[user:password@]host:port[,host:port...]`` (``rediss+cluster``): a Redis
  Cluster, the nodes given are where the client learns the slot map.

Every operation the gateway runs touches one key (``SET``, ``GET``, one hash, ``limits``' scripts,
whose sliding-window keys share a hash tag), so all of them run unchanged on a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, unquote

from redis.asyncio import ConnectionPool, Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from mcp_edge.core.urls import credentials, redact, split_credentials, split_host_port

#: What the gateway's clients are (all speak the same commands for single keys).
AnyRedis = Redis | RedisCluster

Kind = Literal["single", "sentinel", "cluster"]
SINGLE_SCHEMES = ("redis", "rediss", "unix")
HA_SCHEMES: dict[str, tuple[Kind, bool]] = {
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
}
DEFAULT_PORT = {"sentinel": 26379, "cluster": 6379}
SCHEMES_TEXT = "redis://, rediss://, unix://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://"


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """A parsed ``store.url``."""

    kind: Kind
    #: A single server's URL as the client takes it (credentials percent-encoded).
    url: str = field(repr=False)
    nodes: tuple[tuple[str, int], ...] = ()
    master: str | None = None
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False

    def auth(self) -> dict[str, Any]:
        return {"username": self.username, "password": self.password}


def parse_redis_url(url: str) -> RedisTarget:
    """Parse and check ``store.url``; ValueError with a message naming the URL with its
    credentials redacted, and what is wrong.

    The credentials are everything between ``://`` and the last ``@``, so a password may hold
    any character (``/``, ``#``, ``?``, ``@``: written as they are, or percent-encoded); a
    single server's URL is handed to the client with them percent-encoded."""
    try:
        return _parse(url)
    except ValueError as exc:
        raise ValueError(f"url: {redact(url)!r}: {exc}") from None


def _parse(url: str) -> RedisTarget:
    scheme, userinfo, rest, _ = split_credentials(url)
    if scheme is None or (scheme not in SINGLE_SCHEMES and scheme not in HA_SCHEMES):
        raise ValueError(f"must start with {SCHEMES_TEXT}")
    username, password = credentials(userinfo)
    if scheme in SINGLE_SCHEMES:
        return _single(scheme, rest, username, password)
    kind, tls = HA_SCHEMES[scheme]
    if "?" in rest or "#" in rest:
        raise ValueError(f"{scheme}:// takes no query or fragment")
    hosts, _, path = rest.partition("/")
    nodes = tuple(_node(h, DEFAULT_PORT[kind], scheme) for h in hosts.split(","))
    segments = path.split("/") if path else []
    master, db = None, 0
    if kind == "sentinel":
        if not segments or not segments[0]:
            raise ValueError(
                f"{scheme}:// needs the master's name: {scheme}://host:26379,host:26379/mymaster[/db]"
            )
        master = unquote(segments[0])
        if len(segments) > 2 or (len(segments) == 2 and not _digits(segments[1])):
            raise ValueError("after the master's name only a database number may follow (/0)")
        db = int(segments[1]) if len(segments) == 2 else 0
    elif any(segments):
        raise ValueError(f"{scheme}:// takes no path (a cluster has database 0 only)")
    return RedisTarget(kind, url, nodes, master, db, username, password, tls)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _single(scheme: str, rest: str, username: str | None, password: str | None) -> RedisTarget:
    """One server: its URL checked here and by the client's own parser, then rebuilt with the
    credentials percent-encoded (what the client's parser reads back as they were)."""
    if "#" in rest:
        raise ValueError(f"{scheme}:// takes no fragment")
    if scheme == "unix":
        if not rest.startswith("/"):
            raise ValueError("unix:// needs the socket's path: unix:///run/redis.sock[?db=0]")
    else:
        authority, sep, tail = rest.partition("/")
        authority, _, query = authority.partition("?")
        if not authority:
            raise ValueError(f"{scheme}:// needs a host (e.g. {scheme}://redis:6379/0)")
        split_host_port(authority)
        path = tail.partition("?")[0] if sep else ""
        if path and not _digits(path):
            raise ValueError("the path is the database number (/0)")
    auth = ""
    if username is not None or password is not None:
        auth = quote(username or "", safe="")
        if password is not None:
            auth += ":" + quote(password, safe="")
        auth += "@"
    normalized = f"{scheme}://{auth}{rest}"
    try:
        ConnectionPool.from_url(
            normalized
        ).make_connection()  # the options, as the client takes them
    except (TypeError, ValueError, RedisError) as exc:
        raise ValueError(f"an option the Redis client does not take ({exc})") from None
    return RedisTarget("single", normalized, username=username, password=password)


def _node(text: str, default_port: int, scheme: str) -> tuple[str, int]:
    if not text:
        raise ValueError(f"{scheme}:// needs host:port[,host:port...]")
    host, port = split_host_port(text)
    return host, default_port if port is None else port


def client_options() -> dict[str, Any]:
    """Options of every client: one quick retry only (it replaces a pooled connection that died
    with a restarted server or a master that failed over), no background health checks."""
    return {"retry": Retry(NoBackoff(), 1), "health_check_interval": 0}


class _SentinelMaster(Redis):
    """The master as the sentinels name it; closing it closes the sentinel connections too."""

    sentinel_group: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        if self.sentinel_group is not None:
            for client in self.sentinel_group.sentinels:
                await client.aclose()


def fast_redis(url: str, timeout: float) -> AnyRedis:
    """A client whose connects and commands give up after ``timeout`` seconds."""
    target = parse_redis_url(url)
    bounded: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    if target.kind == "single":
        return Redis.from_url(target.url, **bounded, **client_options())
    if target.kind == "cluster":
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes],
            ssl=target.tls,
            **target.auth(),
            **bounded,
            retry=Retry(NoBackoff(), 1),
        )
    sentinel = Sentinel(
        list(target.nodes),
        sentinel_kwargs={**bounded, **target.auth(), "ssl": target.tls},
        ssl=target.tls,
        db=target.db,
        **target.auth(),
        **bounded,
        **client_options(),
    )
    assert target.master is not None
    master = sentinel.master_for(target.master, redis_class=_SentinelMaster)
    master.sentinel_group = sentinel
    return master


def limits_storage_args(url: str, timeout: float) -> tuple[str, dict[str, Any]]:
    """The ``limits`` storage URI for ``store.url`` (without credentials) and the options that go
    with it, for deployments whose client ``limits`` builds itself (sentinel, cluster)."""
    target = parse_redis_url(url)
    hosts = ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in target.nodes)
    bounded: dict[str, Any] = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    auth = {k: v for k, v in target.auth().items() if v is not None}
    if target.kind == "sentinel":
        assert target.master is not None
        return f"async+redis+sentinel://{hosts}/{quote(target.master, safe='')}", {
            **bounded,
            **auth,
            **client_options(),
            "db": target.db,
            "ssl": target.tls,
            "sentinel_kwargs": {**bounded, **auth, "ssl": target.tls},
            "use_replicas": False,  # budgets are read where they are spent: a replica lags
        }
    if target.kind == "cluster":
        return f"async+redis+cluster://{hosts}", {
            **bounded,
            **auth,
            "ssl": target.tls,
            "retry": Retry(NoBackoff(), 1),
        }
    raise ValueError("a single server's storage shares the gateway's own connection pool")
