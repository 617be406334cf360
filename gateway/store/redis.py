"""The one way the gateway opens Redis: fail fast, so a slow or dead Redis is the caller's
decision (503, fail-open, last known value), never a request that hangs."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def fast_redis(url: str, timeout: float) -> Redis:
    # One quick retry only: it replaces a pooled connection that died with a restarted server.
    return Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 1),
        health_check_interval=0,
    )
