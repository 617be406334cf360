"""The secret vault: small secrets the gateway keeps for a caller at an upstream (exchanged
tokens, users' grants), sealed, under names that say nothing.

API (stable; the consent grants use it as the token exchange does)::

    vault = build_vault(config.store, ring)           # MemoryVault-backed, or Redis (store.url)
    slot = Slot("grant", principal.id, member_key, target="")
    await vault.put(slot, value_bytes, ttl_seconds)   # replaces; expires after ttl_seconds
    await vault.put(slot, value_bytes, ttl_seconds, only_if_present=True)
                                   # -> bool: replaced only while the entry is still there
    await vault.get(slot)          # -> bytes | None
    await vault.take(slot)         # -> bytes | None, and gone (single use: at most one taker)
    await vault.delete(slot)       # -> bool
    await vault.list("grant", principal.id)            # -> [Listed(ref, value, expires_at)]
    await vault.delete_ref("grant", principal.id, ref) # -> bool (revoke one listed entry)
    await vault.delete_all("grant", principal.id)      # -> int (revoke every one)

- **Names**: an entry is named ``<kind>:{<p>}:<e>``, where ``p`` is a keyed hash (HMAC-SHA256
  under the ring key's ``name_key``) of kind and principal and ``e`` one of kind, principal,
  member and target. Neither the principal id nor a token is ever part of a name. The
  ``{<p>}`` hash tag keeps one principal's entries in one Redis Cluster slot, so its listing
  and revocation are single-slot operations.
- **Values**: sealed with the key ring (``seal_blob``, purpose ``mcpev1``, AES-256-GCM), bound to
  the entry's name in the associated data: a value copied under another name does not open
  (it reads as absent). Never plaintext in Redis, in memory or in a log.
- **Rotation**: names and seals use the ring's current key; an entry written under an older
  key of the ring is still found (each key's name is tried, current first) and is moved under
  the current key when read.
- **Listing**: each principal has an index (a sorted set by expiry) of its entries of a kind;
  expired ones are pruned as it is written.
- **Failures**: a store that cannot answer in time raises :class:`VaultUnavailable` (the
  caller fails closed); what cannot be opened is absent.

The memory backend is for one replica: bounded (least recently used go first), per process.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp_edge.core.seal import KeyRing, StateKey, open_blob, seal_blob

if TYPE_CHECKING:
    from mcp_edge.store.config import StoreSection

PURPOSE = "mcpev1"
#: A kind names what its entries are (``exchange``, ``grant``...): plain, short.
_KIND = re.compile(r"[a-z][a-z0-9-]{0,15}")
#: Sealed values larger than this are refused before anything is stored.
MAX_VALUE_BYTES = 64 * 1024


class VaultUnavailable(Exception):
    """The store could not answer (in time); what it holds is unknown."""


@dataclass(frozen=True, slots=True)
class Slot:
    """Where one secret lives: what it is, whose, for which member, and anything else that
    tells entries apart (``target``: e.g. a digest of the audience and scopes)."""

    kind: str
    principal: str
    member: str
    target: str = ""

    def __post_init__(self) -> None:
        if not _KIND.fullmatch(self.kind):
            raise ValueError(f"vault kind {self.kind!r} must match {_KIND.pattern}")

    def __repr__(self) -> str:  # the principal id is never shown
        return f"Slot(kind={self.kind!r}, member={self.member!r})"


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of a principal's listing: ``ref`` names it for :meth:`SecretVault.delete_ref`."""

    ref: str
    value: bytes
    expires_at: float

    def __repr__(self) -> str:
        return f"Listed(ref={self.ref!r}, expires_at={self.expires_at})"


def _tag(key: bytes, *parts: str) -> str:
    mac = hmac.new(key, "\x00".join(parts).encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac[:16]).rstrip(b"=").decode("ascii")


def index_name(key: StateKey, kind: str, principal: str) -> str:
    return f"{kind}:{{{_tag(key.name_key, 'p', kind, principal)}}}"


def entry_name(key: StateKey, slot: Slot) -> str:
    tag = _tag(key.name_key, "e", slot.kind, slot.principal, slot.member, slot.target)
    return f"{index_name(key, slot.kind, slot.principal)}:{tag}"


class VaultBackend(Protocol):
    """Raw storage of sealed values by name, with one index (by expiry) per principal."""

    async def get(self, name: str) -> bytes | None: ...

    async def put(
        self,
        name: str,
        index: str,
        value: bytes,
        expires_at: float,
        *,
        only_if_present: bool = False,
    ) -> bool: ...

    async def delete(self, name: str, index: str) -> bool: ...

    async def take(self, name: str, index: str) -> bytes | None: ...

    async def listing(self, index: str, now: float) -> list[tuple[str, bytes, float]]: ...

    async def delete_index(self, index: str) -> int: ...

    async def aclose(self) -> None: ...


class SecretVault:
    """Sealed values under hashed names, over a backend (see the module's docstring)."""

    def __init__(
        self, ring: KeyRing, backend: VaultBackend, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.ring = ring
        self.backend = backend
        self.clock = clock

    @property
    def shared(self) -> bool:
        """Every replica sees the same entries (Redis)."""
        return bool(getattr(self.backend, "shared", False))

    def _seal(self, name: str, value: bytes) -> bytes:
        return seal_blob(self.ring, PURPOSE, value, bind=name.encode()).encode("ascii")

    def _open(self, name: str, sealed: bytes) -> bytes | None:
        try:
            token = sealed.decode("ascii")
        except UnicodeDecodeError:
            return None
        return open_blob(
            self.ring, PURPOSE, token, bind=name.encode(), max_chars=4 * MAX_VALUE_BYTES
        )

    async def put(
        self, slot: Slot, value: bytes, ttl_seconds: float, *, only_if_present: bool = False
    ) -> bool:
        """Store ``value`` (True). ``only_if_present``: only if the entry is there now, under
        the ring's current key, in one step of the store (False, nothing written, when it was
        deleted meanwhile): what renews an entry someone may be withdrawing at that moment."""
        if len(value) > MAX_VALUE_BYTES:
            raise ValueError("vault values are at most 64 KiB")
        if ttl_seconds <= 0:
            await self.delete(slot)
            return not only_if_present
        current = self.ring.current
        name = entry_name(current, slot)
        index = index_name(current, slot.kind, slot.principal)
        stored = await self.backend.put(
            name,
            index,
            self._seal(name, value),
            self.clock() + ttl_seconds,
            only_if_present=only_if_present,
        )
        if not stored:
            return False
        for key in self.ring.keys[1:]:  # the same slot under an older key is stale now
            await self.backend.delete(
                entry_name(key, slot), index_name(key, slot.kind, slot.principal)
            )
        return True

    async def get(self, slot: Slot) -> bytes | None:
        for position, key in enumerate(self.ring.keys):
            name = entry_name(key, slot)
            sealed = await self.backend.get(name)
            if sealed is None:
                continue
            value = self._open(name, sealed)
            if value is not None and position:
                await self._move(slot, key, value)
            return value
        return None

    async def _move(self, slot: Slot, old: StateKey, value: bytes) -> None:
        """An entry of an older ring key, put back under the current one with its expiry."""
        index = index_name(old, slot.kind, slot.principal)
        expiry = next(
            (
                exp
                for name, _, exp in await self.backend.listing(index, self.clock())
                if name == entry_name(old, slot)
            ),
            None,
        )
        if expiry is not None:
            await self.put(slot, value, expiry - self.clock())

    async def take(self, slot: Slot) -> bytes | None:
        for key in self.ring.keys:
            name = entry_name(key, slot)
            sealed = await self.backend.take(name, index_name(key, slot.kind, slot.principal))
            if sealed is not None:
                return self._open(name, sealed)
        return None

    async def delete(self, slot: Slot) -> bool:
        gone = False
        for key in self.ring.keys:
            gone |= await self.backend.delete(
                entry_name(key, slot), index_name(key, slot.kind, slot.principal)
            )
        return gone

    async def list(self, kind: str, principal: str) -> list[Listed]:
        Slot(kind, principal, "")  # checks the kind
        out: list[Listed] = []
        now = self.clock()
        for key in self.ring.keys:
            index = index_name(key, kind, principal)
            for name, sealed, expires_at in await self.backend.listing(index, now):
                value = self._open(name, sealed)
                if value is not None:
                    out.append(Listed(f"{key.kid}.{name.rsplit(':', 1)[1]}", value, expires_at))
        return out

    async def delete_ref(self, kind: str, principal: str, ref: str) -> bool:
        kid, _, tag = ref.partition(".")
        key = self.ring.by_id.get(kid)
        if key is None or not tag or not tag.replace("-", "").replace("_", "").isalnum():
            return False
        index = index_name(key, kind, principal)
        return await self.backend.delete(f"{index}:{tag}", index)

    async def delete_all(self, kind: str, principal: str) -> int:
        Slot(kind, principal, "")
        count = 0
        for key in self.ring.keys:
            count += await self.backend.delete_index(index_name(key, kind, principal))
        return count

    async def aclose(self) -> None:
        await self.backend.aclose()


# ---------------------------------------------------------------------- memory


class MemoryBackend:
    """This process's memory: at most ``max_entries`` values, least recently used dropped first."""

    shared = False

    def __init__(self, *, max_entries: int = 100_000, clock: Callable[[], float] = time.time):
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float, str]] = OrderedDict()
        self._indexes: dict[str, dict[str, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _drop(self, name: str) -> tuple[bytes, float, str] | None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            members = self._indexes.get(entry[2])
            if members is not None:
                members.pop(name, None)
                if not members:
                    del self._indexes[entry[2]]
        return entry

    def _live(self, name: str) -> tuple[bytes, float, str] | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry[1] <= self.clock():
            self._drop(name)
            return None
        self._entries.move_to_end(name)
        return entry

    async def get(self, name: str) -> bytes | None:
        entry = self._live(name)
        return entry[0] if entry is not None else None

    async def put(
        self,
        name: str,
        index: str,
        value: bytes,
        expires_at: float,
        *,
        only_if_present: bool = False,
    ) -> bool:
        if only_if_present and self._live(name) is None:
            return False
        self._drop(name)
        while len(self._entries) >= self.max_entries:
            self._drop(next(iter(self._entries)))
        self._entries[name] = (value, expires_at, index)
        self._indexes.setdefault(index, {})[name] = expires_at
        return True

    async def delete(self, name: str, index: str) -> bool:
        return self._drop(name) is not None

    async def take(self, name: str, index: str) -> bytes | None:
        entry = self._live(name)
        if entry is None:
            return None
        self._drop(name)
        return entry[0]

    async def listing(self, index: str, now: float) -> list[tuple[str, bytes, float]]:
        out = []
        for name in list(self._indexes.get(index, ())):
            entry = self._live(name)
            if entry is not None:
                out.append((name, entry[0], entry[1]))
        return out

    async def delete_index(self, index: str) -> int:
        names = list(self._indexes.get(index, ()))
        for name in names:
            self._drop(name)
        return len(names)

    async def aclose(self) -> None:
        self._entries.clear()
        self._indexes.clear()


# ---------------------------------------------------------------------- redis

#: KEYS: entry, index. ARGV: value, expiry (ms), now (ms), "1" to write only over an entry that
#: is there. The entry, its place in the index, the index pruned of expired names and kept as
#: long as its longest-lived entry; 0 (nothing written) when the entry had to be there and is not.
_PUT = """
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[2], KEYS[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[3])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] then redis.call('PEXPIREAT', KEYS[2], top[2]) end
return 1
"""
#: KEYS: entry, index. The entry's value (or false), and it is gone.
_TAKE = """
local value = redis.call('GET', KEYS[1])
if value then redis.call('DEL', KEYS[1]) end
redis.call('ZREM', KEYS[2], KEYS[1])
return value
"""
_DELETE = """
redis.call('ZREM', KEYS[2], KEYS[1])
return redis.call('DEL', KEYS[1])
"""
#: KEYS: index. Every entry it names, and it.
_DELETE_INDEX = """
local names = redis.call('ZRANGE', KEYS[1], 0, -1)
local count = 0
for _, name in ipairs(names) do count = count + redis.call('DEL', name) end
redis.call('DEL', KEYS[1])
return count
"""


class RedisBackend:
    """The store's Redis (``store.url``), shared by every replica; every operation is bounded by
    ``timeout`` and touches one principal's keys only (one hash slot)."""

    shared = True

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 0.5,
        key_prefix: str = "mcp-edge:vault:",
        client: Any = None,
    ) -> None:
        from mcp_edge.store.redis import fast_redis

        self.timeout = timeout
        self.prefix = key_prefix
        self.redis = client or fast_redis(url, timeout)
        self._put = self.redis.register_script(_PUT)
        self._take = self.redis.register_script(_TAKE)
        self._delete = self.redis.register_script(_DELETE)
        self._delete_index = self.redis.register_script(_DELETE_INDEX)

    async def _run(self, op: Any) -> Any:
        import anyio

        try:
            with anyio.fail_after(self.timeout):
                return await op
        except Exception as exc:  # noqa: BLE001  (any failure of the store is "unknown")
            raise VaultUnavailable(type(exc).__name__) from None

    async def get(self, name: str) -> bytes | None:
        value = await self._run(self.redis.get(self.prefix + name))
        return value if isinstance(value, bytes) else None

    async def put(
        self,
        name: str,
        index: str,
        value: bytes,
        expires_at: float,
        *,
        only_if_present: bool = False,
    ) -> bool:
        now_ms = int(time.time() * 1000)
        done = await self._run(
            self._put(
                keys=[self.prefix + name, self.prefix + index],
                args=[
                    value,
                    max(now_ms + 1, int(expires_at * 1000)),
                    now_ms,
                    "1" if only_if_present else "0",
                ],
            )
        )
        return bool(done)

    async def delete(self, name: str, index: str) -> bool:
        gone = await self._run(self._delete(keys=[self.prefix + name, self.prefix + index]))
        return bool(gone)

    async def take(self, name: str, index: str) -> bytes | None:
        value = await self._run(self._take(keys=[self.prefix + name, self.prefix + index]))
        return value if isinstance(value, bytes) else None

    async def listing(self, index: str, now: float) -> list[tuple[str, bytes, float]]:
        entries = await self._run(
            self.redis.zrangebyscore(
                self.prefix + index, int(now * 1000), "+inf", withscores=True, start=0, num=1000
            )
        )
        if not entries:
            return []
        names = [n if isinstance(n, bytes) else str(n).encode() for n, _ in entries]
        values = await self._run(self.redis.mget(names))
        out = []
        for (raw_name, score), value in zip(entries, values, strict=True):
            if isinstance(value, bytes):
                name = (
                    raw_name if isinstance(raw_name, bytes) else str(raw_name).encode()
                ).decode()
                out.append((name[len(self.prefix) :], value, float(score) / 1000))
        return out

    async def delete_index(self, index: str) -> int:
        return int(await self._run(self._delete_index(keys=[self.prefix + index])))

    async def aclose(self) -> None:
        import contextlib

        with contextlib.suppress(Exception):
            await self.redis.aclose()


def build_vault(
    section: StoreSection,
    ring: KeyRing,
    *,
    clock: Callable[[], float] = time.time,
    max_entries: int = 100_000,
) -> SecretVault:
    """The vault of the gateway's ``store:``: in Redis when it is Redis (every replica shares
    it), else in this process's memory."""
    if section.type == "redis":
        assert section.url is not None  # the config validator requires it
        backend: VaultBackend = RedisBackend(
            section.url, timeout=section.timeout_seconds, key_prefix=section.vault_key_prefix
        )
    else:
        backend = MemoryBackend(max_entries=max_entries, clock=clock)
    return SecretVault(ring, backend, clock=clock)
