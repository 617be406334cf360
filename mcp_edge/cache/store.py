"""Where cached results live: an LRU in process memory bounded in bytes, optionally in front of
Redis so that every replica can answer from what one of them fetched.

Entries carry their absolute expiry (wall clock, milliseconds), so a copy taken from Redis counts
down the same time left on every replica.

A federated member's entries can be forgotten before their time (the member said its list
changed). With Redis they live there only, never in a process's memory, and a sorted set per
member (:func:`index_key`) names them, so that a forget on one replica reaches every replica:
the set is read and its entries unlinked.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import anyio

if TYPE_CHECKING:
    from mcp_edge.store.redis import AnyRedis


#: Bookkeeping counted per entry on top of its key and body (dict slot, object headers).
ENTRY_OVERHEAD = 200


@dataclass(frozen=True, slots=True)
class Entry:
    expires_ms: int
    scope: str
    route: str
    tail: bytes

    @property
    def size(self) -> int:
        return len(self.tail) + ENTRY_OVERHEAD

    def encode(self) -> bytes:
        return b"v1 %d %s %s\n%b" % (
            self.expires_ms,
            self.scope.encode(),
            self.route.encode(),
            self.tail,
        )

    @classmethod
    def decode(cls, data: bytes) -> Entry | None:
        head, sep, tail = data.partition(b"\n")
        parts = head.split(b" ")
        if not sep or len(parts) != 4 or parts[0] != b"v1" or not parts[1].isdigit():
            return None
        return cls(int(parts[1]), parts[2].decode(), parts[3].decode(), tail)


#: Called with (route, reason) for every entry dropped before its time ran out (``size``) or
#: found expired (``expired``).
OnEvict = Callable[[str, str], None]


def index_key(key_prefix: str, route: str) -> str:
    """The Redis sorted set naming a forgettable route's entry keys (scored by their expiry).
    Entry keys are hex digests: ``index:`` never starts one."""
    return f"{key_prefix}index:{route}"


class CacheBackend(Protocol):
    async def get(self, key: str, now_ms: int) -> Entry | None: ...

    async def put(self, key: str, entry: Entry, now_ms: int) -> None: ...

    async def invalidate(self, route: str) -> None:
        """Every entry of ``route`` goes, wherever it is kept; never raises."""
        ...

    async def aclose(self) -> None: ...


class MemoryCache:
    """Least recently used entries go first once the cached bytes exceed ``max_bytes``."""

    def __init__(self, max_bytes: int, *, on_evict: OnEvict | None = None) -> None:
        self.max_bytes = max_bytes
        self.on_evict = on_evict
        #: Called after the held entries changed (metrics that cannot be read on demand).
        self.on_change: Callable[[], None] | None = None
        self.bytes = 0
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _weight(self, key: str, entry: Entry) -> int:
        return entry.size + len(key)

    def _drop(self, key: str, reason: str) -> None:
        entry = self._entries.pop(key)
        self.bytes -= self._weight(key, entry)
        if self.on_evict is not None:
            self.on_evict(entry.route, reason)

    def lookup(self, key: str, now_ms: int) -> Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires_ms <= now_ms:
            self._drop(key, "expired")
            if self.on_change is not None:
                self.on_change()
            return None
        self._entries.move_to_end(key)
        return entry

    def store(self, key: str, entry: Entry, now_ms: int) -> None:
        if key in self._entries:
            self.bytes -= self._weight(key, self._entries.pop(key))
        weight = self._weight(key, entry)
        if weight > self.max_bytes:
            return
        self._entries[key] = entry
        self.bytes += weight
        while self.bytes > self.max_bytes:
            oldest_key, oldest = next(iter(self._entries.items()))
            self._drop(oldest_key, "expired" if oldest.expires_ms <= now_ms else "size")
        if self.on_change is not None:
            self.on_change()

    def forget(self, route: str) -> int:
        """Drop every entry of ``route`` (a federated member's cached parts, after it said its
        list changed); how many."""
        keys = [key for key, entry in self._entries.items() if entry.route == route]
        for key in keys:
            self._drop(key, "invalidated")
        if keys and self.on_change is not None:
            self.on_change()
        return len(keys)

    async def get(self, key: str, now_ms: int) -> Entry | None:
        return self.lookup(key, now_ms)

    async def put(self, key: str, entry: Entry, now_ms: int) -> None:
        self.store(key, entry, now_ms)

    async def invalidate(self, route: str) -> None:
        self.forget(route)

    async def aclose(self) -> None:
        self._entries.clear()
        self.bytes = 0
        if self.on_change is not None:
            self.on_change()


class RedisCache:
    """The process's memory LRU first, then Redis (``GET`` / ``SET PX``). Redis trouble is a miss
    (or an entry kept locally only), never an error for the client.

    The entries of a route named by :meth:`forgettable` (a federated member's) skip the memory
    LRU: a hit is still one ``GET``, and :meth:`invalidate` on any replica reaches every replica.
    Their keys are also added, in the same pipeline as the ``SET``, to the route's sorted set
    (:func:`index_key`, scored by expiry, expired members pruned on every store), which lives
    at least as long as the longest entry it names."""

    def __init__(
        self,
        url: str,
        local: MemoryCache,
        *,
        timeout: float = 0.1,
        key_prefix: str = "mcp-edge:cache:",
        max_ttl_seconds: float = 3600.0,
        on_error: Callable[[str], None] | None = None,
        client: AnyRedis | None = None,
    ) -> None:
        self.local = local
        self.timeout = timeout
        self.key_prefix = key_prefix
        #: How long an index outlives its latest store (entries never live longer).
        self.index_ttl_ms = int(max_ttl_seconds * 1000)
        self.on_error = on_error
        if client is None:
            from mcp_edge.store.redis import fast_redis  # (the redis extra: store.type redis)

            client = fast_redis(url, timeout)
        self.redis = client
        self._forgettable: set[str] = set()

    def forgettable(self, route: str) -> None:
        """``route``'s entries may be invalidated: kept in Redis only, and indexed there."""
        self._forgettable.add(route)

    def _failed(self, op: str) -> None:
        if self.on_error is not None:
            self.on_error(op)

    async def get(self, key: str, now_ms: int) -> Entry | None:
        entry = self.local.lookup(key, now_ms)
        if entry is not None:
            return entry
        try:
            with anyio.fail_after(self.timeout):
                data = await self.redis.get(self.key_prefix + key)
            entry = Entry.decode(data) if isinstance(data, bytes) and data else None
        except Exception:  # noqa: BLE001  (whatever the client raises or answers: a miss)
            self._failed("get")
            return None
        if entry is None or entry.expires_ms <= now_ms:
            return None
        if entry.route not in self._forgettable:
            self.local.store(key, entry, now_ms)
        return entry

    async def put(self, key: str, entry: Entry, now_ms: int) -> None:
        indexed = entry.route in self._forgettable
        if not indexed:
            self.local.store(key, entry, now_ms)
        ttl_ms = entry.expires_ms - now_ms
        if ttl_ms <= 0:
            return
        try:
            with anyio.fail_after(self.timeout):
                if not indexed:
                    await self.redis.set(self.key_prefix + key, entry.encode(), px=ttl_ms)
                    return
                index = index_key(self.key_prefix, entry.route)
                pipe = self.redis.pipeline(transaction=False)
                pipe.set(self.key_prefix + key, entry.encode(), px=ttl_ms)
                pipe.zadd(index, {key: entry.expires_ms})
                pipe.zremrangebyscore(index, "-inf", now_ms)
                pipe.pexpire(index, max(ttl_ms, self.index_ttl_ms))
                await pipe.execute()
        except Exception:  # noqa: BLE001
            self._failed("put")

    async def invalidate(self, route: str) -> None:
        """Drop ``route``'s entries from this process's memory and from Redis (the keys its
        index names, each unlinked on its own: every command touches one key)."""
        self.local.forget(route)
        if route not in self._forgettable:
            return
        index = index_key(self.key_prefix, route)
        try:
            with anyio.fail_after(self.timeout):
                named = await self.redis.zrange(index, 0, -1)
                keys = [k.decode() if isinstance(k, bytes) else str(k) for k in named]
                if not keys:
                    return
                pipe = self.redis.pipeline(transaction=False)
                for key in keys:
                    pipe.unlink(self.key_prefix + key)
                # Only these: a key stored meanwhile stays named (and is dropped next time).
                pipe.zrem(index, *keys)
                await pipe.execute()
        except Exception:  # noqa: BLE001
            self._failed("invalidate")

    async def aclose(self) -> None:
        await self.local.aclose()
        await self.redis.aclose()


def now_ms(clock: Callable[[], float] = time.time) -> int:
    return int(clock() * 1000)
