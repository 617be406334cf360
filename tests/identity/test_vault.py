"""The secret vault: sealed values under keyed-hash names, in memory and in a real Redis."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mcp_edge.core.seal import KeyRing, StateKey, generate_key, parse_key_spec
from mcp_edge.identity.vault import (
    MemoryBackend,
    RedisBackend,
    SecretVault,
    Slot,
    VaultUnavailable,
    entry_name,
)
from tests.conftest import require
from tests.scale.cluster import REDIS_SERVER, RedisServer

ALICE = '["jwt-sub","https://idp.example","alice"]'
BOB = '["jwt-sub","https://idp.example","bob"]'


def ring(*keys: StateKey) -> KeyRing:
    return KeyRing(list(keys) or [parse_key_spec(generate_key())])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require(REDIS_SERVER is not None, "redis-server")
    server = RedisServer(tmp_path_factory.mktemp("vault-redis"))
    server.start()
    try:
        server.wait()
        yield server.url
    finally:
        server.stop()


@pytest.fixture(params=["memory", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[object]:
    if request.param == "memory":
        yield MemoryBackend()
        return
    url = request.getfixturevalue("redis_url")
    redis = RedisBackend(url, timeout=2.0, key_prefix=f"test-vault:{id(request)}:")
    yield redis
    await redis.aclose()


async def test_put_get_take_delete(backend):
    vault = SecretVault(ring(), backend)
    slot = Slot("grant", ALICE, "route/tickets")
    assert await vault.get(slot) is None
    await vault.put(slot, b"secret-value", 60)
    assert await vault.get(slot) == b"secret-value"
    assert await vault.get(Slot("grant", BOB, "route/tickets")) is None
    assert await vault.get(Slot("grant", ALICE, "route/other")) is None
    assert await vault.get(Slot("exchange", ALICE, "route/tickets")) is None
    assert await vault.take(slot) == b"secret-value"
    assert await vault.take(slot) is None  # single use
    await vault.put(slot, b"again", 60)
    assert await vault.delete(slot) is True
    assert await vault.get(slot) is None


async def test_a_replacement_is_written_only_while_the_entry_is_there(backend):
    """What a renewal writes never brings back an entry deleted meanwhile (one step of the
    store: Redis checks and writes in one script)."""
    vault = SecretVault(ring(), backend)
    slot = Slot("grant", ALICE, "route/tickets")
    assert await vault.put(slot, b"renewed", 60, only_if_present=True) is False
    assert await vault.get(slot) is None
    await vault.put(slot, b"first", 60)
    assert await vault.put(slot, b"renewed", 60, only_if_present=True) is True
    assert await vault.get(slot) == b"renewed"
    await vault.delete(slot)
    assert await vault.put(slot, b"again", 60, only_if_present=True) is False
    assert await vault.get(slot) is None and await vault.list("grant", ALICE) == []


async def test_names_and_values_say_nothing(redis_url):
    """What Redis holds: neither the principal id, the member, nor the value in clear; a value
    copied under another entry's name does not open."""
    import redis.asyncio as aioredis

    prefix = "test-vault-clear:"
    keys_ring = ring()
    vault = SecretVault(keys_ring, RedisBackend(redis_url, timeout=2.0, key_prefix=prefix))
    await vault.put(Slot("exchange", ALICE, "route/tickets", "aud"), b"eyJ-the-token", 60)
    await vault.put(Slot("exchange", BOB, "route/tickets", "aud"), b"bobs-token", 60)
    client = aioredis.Redis.from_url(redis_url)
    try:
        keys = [k async for k in client.scan_iter(match=prefix + "*")]
        assert len(keys) == 4  # two entries, two indexes
        dump = b" ".join(keys)
        for key in keys:
            if await client.type(key) == b"string":
                dump += await client.get(key)
        for clear in (b"alice", b"bob", b"tickets", b"eyJ-the-token", b"bobs-token", b"aud"):
            assert clear not in dump
        # Bob's sealed value put under Alice's name reads as absent, not as Bob's token.
        alice = Slot("exchange", ALICE, "route/tickets", "aud")
        alice_name = (prefix + entry_name(keys_ring.current, alice)).encode()
        bob_name = (
            prefix + entry_name(keys_ring.current, Slot("exchange", BOB, "route/tickets", "aud"))
        ).encode()
        assert alice_name in keys and bob_name in keys
        await client.set(alice_name, await client.get(bob_name))
        assert await vault.get(alice) is None
    finally:
        await client.aclose()
        await vault.aclose()


async def test_expiry_and_listing(backend):
    clock = Clock()
    vault = SecretVault(ring(), backend, clock=clock)
    clock.now = time.time()  # both backends expire entries by the wall clock
    await vault.put(Slot("grant", ALICE, "r/a"), b"a", 60)
    await vault.put(Slot("grant", ALICE, "r/b"), b"b", 120)
    await vault.put(Slot("grant", BOB, "r/a"), b"x", 60)
    listed = await vault.list("grant", ALICE)
    assert sorted(item.value for item in listed) == [b"a", b"b"]
    assert all(item.expires_at > clock.now for item in listed)
    one = next(item for item in listed if item.value == b"a")
    assert await vault.delete_ref("grant", ALICE, one.ref) is True
    assert await vault.delete_ref("grant", BOB, one.ref) is False  # another principal's name
    assert [i.value for i in await vault.list("grant", ALICE)] == [b"b"]
    assert await vault.delete_all("grant", ALICE) == 1
    assert await vault.list("grant", ALICE) == []
    assert [i.value for i in await vault.list("grant", BOB)] == [b"x"]


async def test_memory_entries_expire_and_are_bounded():
    clock = Clock()
    backend = MemoryBackend(max_entries=2, clock=clock)
    vault = SecretVault(ring(), backend, clock=clock)
    await vault.put(Slot("exchange", ALICE, "m"), b"1", 10)
    clock.now += 11
    assert await vault.get(Slot("exchange", ALICE, "m")) is None
    for n in range(3):
        await vault.put(Slot("exchange", ALICE, f"m{n}"), b"%d" % n, 60)
    assert len(backend) == 2
    assert await vault.get(Slot("exchange", ALICE, "m0")) is None  # least recently used went
    assert await vault.get(Slot("exchange", ALICE, "m2")) == b"2"


async def test_rotation_finds_and_moves_entries_of_an_older_key():
    backend = MemoryBackend()
    old, new = parse_key_spec(generate_key()), parse_key_spec(generate_key())
    slot = Slot("grant", ALICE, "r/a")
    await SecretVault(ring(old), backend).put(slot, b"granted", 60)
    rotated = SecretVault(ring(new, old), backend)
    assert await rotated.get(slot) == b"granted"
    assert await backend.get(entry_name(new, slot)) is not None  # moved under the new key
    assert await backend.get(entry_name(old, slot)) is None
    assert await SecretVault(ring(new), backend).get(slot) == b"granted"  # old key retired
    assert await SecretVault(ring(parse_key_spec(generate_key())), backend).get(slot) is None


async def test_a_dead_redis_is_unavailable_not_absent(tmp_path: Path):
    from tests.support.processes import free_port

    vault = SecretVault(ring(), RedisBackend(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5))
    with pytest.raises(VaultUnavailable):
        await vault.get(Slot("grant", ALICE, "r"))
    with pytest.raises(VaultUnavailable):
        await vault.put(Slot("grant", ALICE, "r"), b"v", 60)
    await vault.aclose()


def test_slot_kinds_and_repr_hide_the_principal():
    with pytest.raises(ValueError):
        Slot("Bad Kind", ALICE, "m")
    assert "alice" not in repr(Slot("grant", ALICE, "m"))
