"""Single-use store in Redis, shared by all replicas: one ``SET key 1 NX PX ttl`` per retry."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import anyio
from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.core.seal import StateRejected
from gateway.store.base import StoreUnavailable
from gateway.store.redis import fast_redis

KEY_PREFIX = "mcp-edge:jti:"


class RedisStore:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.5,
        key_prefix: str = KEY_PREFIX,
        clock: Callable[[], float] = time.time,
        client: Redis | None = None,
    ) -> None:
        self.timeout = timeout
        self.key_prefix = key_prefix
        self.clock = clock
        # Anything slower than `timeout` is the caller's 503 (or fail-open) decision, not ours.
        self.redis = client or fast_redis(url, timeout)

    async def consume(self, jti: str, expires_at: int) -> None:
        ttl_ms = max(1, math.ceil((expires_at - self.clock()) * 1000))
        try:
            with anyio.fail_after(self.timeout):
                fresh = await self.redis.set(self.key_prefix + jti, b"1", nx=True, px=ttl_ms)
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(type(exc).__name__) from exc
        if not fresh:
            raise StateRejected("replayed")

    async def ping(self) -> bool:
        try:
            with anyio.fail_after(self.timeout):
                return bool(await self.redis.ping())
        except (RedisError, OSError, TimeoutError):
            return False

    async def aclose(self) -> None:
        await self.redis.aclose()
