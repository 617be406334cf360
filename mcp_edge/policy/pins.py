"""Tool definition pinning: the first definition of each tool seen in a ``tools/list`` is
remembered (its digest); a later, different definition is hidden from lists, and its calls are
refused, until an operator accepts the new digest.

Where pins live: per process (``store.type: memory``), or in the store's Redis, one hash per route
(``<prefix><gateway id>/<route>``: ``p:<tool>`` the pinned digest, ``s:<tool>`` the digest last
seen), so every replica agrees and ``mcp-edge tools accept`` changes it for all of them. Replicas
keep what they read for :data:`LOCAL_SECONDS`, so an accepted digest reaches them within that.
Digests listed in the route's ``policy.accepted_tools`` are accepted whatever the store holds.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from mcp_edge.core.digest import canonical_json
from mcp_edge.core.memo import BoundedMemo

if TYPE_CHECKING:
    from mcp_edge.store.redis import AnyRedis

#: The parts of a tool's definition that make it what it is.
DEFINITION_FIELDS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
KEY_PREFIX = "mcp-edge:pins:"
LOCAL_SECONDS = 2.0
#: Tool definitions whose digest is kept, by their wire bytes.
MAX_KEPT_DIGESTS = 4096


def tool_digest(tool: dict[str, Any]) -> str:
    """``sha256:<hex>`` over the RFC 8785 canonical JSON of the definition's fields."""
    doc = {k: tool[k] for k in DEFINITION_FIELDS if k in tool}
    return "sha256:" + hashlib.sha256(canonical_json(doc)).hexdigest()


@dataclass(frozen=True, slots=True)
class PinState:
    pinned: str | None
    seen: str | None


class PinBackend(Protocol):
    async def read(self, scope: str, names: Iterable[str]) -> dict[str, PinState]: ...

    async def pin_and_observe(self, scope: str, observed: dict[str, str]) -> dict[str, str]:
        """Pin each tool not pinned yet to its observed digest, record what was observed, and
        return the pinned digest of every tool in ``observed``."""
        ...

    async def accept(self, scope: str, name: str, digest: str) -> None: ...

    async def all(self, scope: str) -> dict[str, PinState]: ...

    async def aclose(self) -> None: ...


class PinStoreUnavailable(Exception):
    pass


class MemoryPins:
    def __init__(self) -> None:
        self._pinned: dict[tuple[str, str], str] = {}
        self._seen: dict[tuple[str, str], str] = {}

    async def read(self, scope: str, names: Iterable[str]) -> dict[str, PinState]:
        return {
            n: PinState(self._pinned.get((scope, n)), self._seen.get((scope, n))) for n in names
        }

    async def pin_and_observe(self, scope: str, observed: dict[str, str]) -> dict[str, str]:
        out = {}
        for name, digest in observed.items():
            out[name] = self._pinned.setdefault((scope, name), digest)
            self._seen[(scope, name)] = digest
        return out

    async def accept(self, scope: str, name: str, digest: str) -> None:
        self._pinned[(scope, name)] = digest

    async def all(self, scope: str) -> dict[str, PinState]:
        names = {n for (s, n) in [*self._pinned, *self._seen] if s == scope}
        return await self.read(scope, names)

    async def aclose(self) -> None:
        pass


class RedisPins:
    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.5,
        key_prefix: str = KEY_PREFIX,
        client: AnyRedis | None = None,
    ) -> None:
        self.timeout = timeout
        self.key_prefix = key_prefix
        if client is None:
            from mcp_edge.store.redis import fast_redis  # (the redis extra: store.type redis)

            client = fast_redis(url, timeout)
        self.redis = client

    def _key(self, scope: str) -> str:
        return self.key_prefix + scope

    async def _bounded(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            with anyio.fail_after(self.timeout):
                return await fn(*args)
        except Exception as exc:  # noqa: BLE001  (whatever the client raises: the store is out)
            raise PinStoreUnavailable(type(exc).__name__) from exc

    async def read(self, scope: str, names: Iterable[str]) -> dict[str, PinState]:
        names = list(names)
        if not names:
            return {}
        fields = [f for n in names for f in (f"p:{n}", f"s:{n}")]
        values = await self._bounded(self.redis.hmget, self._key(scope), fields)
        out = {}
        for i, name in enumerate(names):
            p, s = values[2 * i], values[2 * i + 1]
            out[name] = PinState(p.decode() if p else None, s.decode() if s else None)
        return out

    async def pin_and_observe(self, scope: str, observed: dict[str, str]) -> dict[str, str]:
        async def run() -> list[Any]:
            pipe = self.redis.pipeline(transaction=False)
            for name, digest in observed.items():
                pipe.hsetnx(self._key(scope), f"p:{name}", digest)
            pipe.hset(self._key(scope), mapping={f"s:{n}": d for n, d in observed.items()})
            pipe.hmget(self._key(scope), [f"p:{n}" for n in observed])
            return await pipe.execute()

        if not observed:
            return {}
        results = await self._bounded(run)
        pinned = results[-1]
        return {
            n: (p.decode() if p else observed[n]) for n, p in zip(observed, pinned, strict=True)
        }

    async def accept(self, scope: str, name: str, digest: str) -> None:
        await self._bounded(self.redis.hset, self._key(scope), f"p:{name}", digest)

    async def all(self, scope: str) -> dict[str, PinState]:
        raw = await self._bounded(self.redis.hgetall, self._key(scope))
        names = {k.decode()[2:] for k in raw}
        return {
            n: PinState(
                raw.get(f"p:{n}".encode(), b"").decode() or None,
                raw.get(f"s:{n}".encode(), b"").decode() or None,
            )
            for n in names
        }

    async def aclose(self) -> None:
        await self.redis.aclose()


class ToolPins:
    """One route's view of the pins, with a short-lived local copy (see :data:`LOCAL_SECONDS`)."""

    def __init__(
        self,
        backend: PinBackend,
        scope: str,
        accepted: dict[str, list[str]],
        clock: Callable[[], float] = time.monotonic,
        local_seconds: float = LOCAL_SECONDS,
    ) -> None:
        self.backend = backend
        self.scope = scope
        self.accepted = {name: frozenset(ds) for name, ds in accepted.items()}
        self.clock = clock
        self.local_seconds = local_seconds
        # tool -> (pinned, last seen, valid until)
        self._local: dict[str, tuple[str | None, str | None, float]] = {}
        self._memo: BoundedMemo[bytes, str] = BoundedMemo(MAX_KEPT_DIGESTS)

    def digest(self, raw: bytes, tool: dict[str, Any]) -> str:
        """The definition's digest, memoized by its wire bytes (lists repeat the same tools)."""
        d = self._memo.get(raw)
        if d is None:
            d = self._memo.put(raw, tool_digest(tool))
        return d

    def _ok(self, name: str, pinned: str | None, digest: str | None) -> bool:
        return (
            digest is None
            or pinned is None
            or pinned == digest
            or digest in self.accepted.get(name, ())
        )

    async def changed(self, observed: dict[str, str]) -> set[str]:
        """Tools of a ``tools/list`` whose definition differs from the pinned one (and is not
        accepted); pins the ones seen for the first time."""
        now = self.clock()
        stale = {}
        for name, digest in observed.items():
            entry = self._local.get(name)
            if entry is None or entry[2] < now or entry[1] != digest:
                stale[name] = digest
        if stale:
            pinned = await self.backend.pin_and_observe(self.scope, stale)
            until = now + self.local_seconds
            for name, digest in stale.items():
                self._local[name] = (pinned[name], digest, until)
        return {n for n, d in observed.items() if not self._ok(n, self._local[n][0], d)}

    async def blocked(self, name: str) -> bool:
        """Whether a call to ``name`` is refused: its last seen definition is not the pinned one."""
        now = self.clock()
        entry = self._local.get(name)
        if entry is None or entry[2] < now:
            try:
                state = (await self.backend.read(self.scope, [name]))[name]
            except PinStoreUnavailable:
                if entry is None:
                    raise
                return not self._ok(name, entry[0], entry[1])  # the last known pins
            entry = self._local[name] = (state.pinned, state.seen, now + self.local_seconds)
        return not self._ok(name, entry[0], entry[1])
