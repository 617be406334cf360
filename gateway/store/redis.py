"""The one way the gateway opens Redis (the single-use store, tool pins, the edge cache and, through
the ``limits`` library, rate-limit budgets): fail fast, so a slow or dead Redis is the caller's
decision (503, fail-open, last known value), never a request that hangs."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff


def client_options() -> dict[str, Any]:
    """Options of every client: one quick retry only (it replaces a pooled connection that died
    with a restarted server), no background health checks."""
    return {"retry": Retry(NoBackoff(), 1), "health_check_interval": 0}


def fast_redis(url: str, timeout: float) -> Redis:
    """A client whose connects and commands give up after ``timeout`` seconds."""
    return Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout, **client_options())
