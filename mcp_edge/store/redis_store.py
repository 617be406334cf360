"""Single-use store in Redis, shared by all replicas: one ``SET key <nonce> NX GET PX ttl`` per
spend, optionally followed by ``WAIT`` on the same connection.

The nonce makes a spend safe to send again: when the connection breaks after the command left
(a failover), the client's one retry finds either nothing (the first attempt was lost: this one
spends it) or its own nonce (the first attempt landed: still this request's spend), and only a
different value is a replay. A spend whose outcome stays unknown (no answer in time, fewer
replicas than ``spend_replicas`` acknowledged) is :class:`StoreUnavailable`: the caller fails
closed, and the state may be spent already (the client starts its flow again). So is whatever
else the client raises or answers: in a cluster failover redis-py's cluster client has raised
``RuntimeError`` and ``AttributeError``, and a store that answers ``WAIT`` (or ``SET``) with
something else than the command's reply has not said whether the spend holds.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable

import anyio

from mcp_edge.core.seal import StateRejected
from mcp_edge.store.base import StoreUnavailable
from mcp_edge.store.redis import AnyRedis, fast_redis

KEY_PREFIX = "mcp-edge:jti:"


class RedisStore:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.5,
        key_prefix: str = KEY_PREFIX,
        clock: Callable[[], float] = time.time,
        client: AnyRedis | None = None,
        spend_replicas: int = 0,
    ) -> None:
        self.timeout = timeout
        self.spend_replicas = spend_replicas
        #: WAIT gives up well inside the spend's own bound, so "too few replicas" is an answer.
        self.wait_ms = max(1, int(timeout * 600))
        self.key_prefix = key_prefix
        self.clock = clock
        # Anything slower than `timeout` is the caller's 503 (or fail-open) decision, not ours.
        self.redis = client or fast_redis(url, timeout)

    async def consume(self, jti: str, expires_at: int) -> None:
        ttl_ms = max(1, math.ceil((expires_at - self.clock()) * 1000))
        key, nonce = self.key_prefix + jti, secrets.token_bytes(12)
        acked = self.spend_replicas
        try:
            with anyio.fail_after(self.timeout):
                if self.spend_replicas:
                    async with self.redis.pipeline(transaction=False) as pipe:
                        pipe.set(key, nonce, nx=True, get=True, px=ttl_ms)
                        pipe.wait(self.spend_replicas, self.wait_ms)
                        prior, acked = await pipe.execute()
                else:
                    prior = await self.redis.set(key, nonce, nx=True, get=True, px=ttl_ms)
        except Exception as exc:  # noqa: BLE001  (any failure of the store is "unknown")
            raise StoreUnavailable(type(exc).__name__) from exc
        if not (prior is None or isinstance(prior, bytes)) or type(acked) is not int:
            raise StoreUnavailable("unexpected answer")
        if prior is not None and prior != nonce:
            raise StateRejected("replayed")
        if acked < self.spend_replicas:
            raise StoreUnavailable(f"spend held by {acked} of {self.spend_replicas} replicas")

    async def ping(self) -> bool:
        try:
            with anyio.fail_after(self.timeout):
                return bool(await self.redis.ping())
        except Exception:  # noqa: BLE001
            return False

    async def aclose(self) -> None:
        await self.redis.aclose()
