"""A store failure of any kind is a store failure: whatever the Redis client raises (redis-py's
cluster client has raised ``RuntimeError`` and ``AttributeError`` a second into a failover) or
answers (a reply that is not the command's), each feature does what it documents for a store
that is out: a single-use state or approval is refused with ``503 state_store_unavailable`` and
``Retry-After`` (or let through with ``store.fail_open``), a budget is ``budget_store_unavailable``
(the rate limiter's fail-open or fail-closed), a pin is unknown, the cache misses."""

from __future__ import annotations

import time
from typing import Any

import pytest
from limits.aio.storage import MemoryStorage

from mcp_edge.cache.store import Entry, MemoryCache, RedisCache
from mcp_edge.core.errors import RpcError
from mcp_edge.core.seal import StateRejected
from mcp_edge.observability.metrics import Metrics
from mcp_edge.policy.pins import PinStoreUnavailable, RedisPins
from mcp_edge.ratelimit.limiter import BudgetStore, BudgetStoreUnavailable
from mcp_edge.store import StoreMetrics, StoreUnavailable, make_replay_guard
from mcp_edge.store.redis_store import RedisStore

URL = "redis://127.0.0.1:1/0"  # never opened: every test hands in its client
FAILURES = [
    RuntimeError("Cannot execute command: the node is being reinitialized"),
    AttributeError("'NoneType' object has no attribute 'host'"),
    KeyError("slot"),
    IndexError("list index out of range"),
]
IDS = ["RuntimeError", "AttributeError", "KeyError", "IndexError"]


class Pipeline:
    def __init__(self, client: FailingClient) -> None:
        self.client = client

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self

    async def execute(self) -> list[Any]:
        return await self.client.answer()


class FailingClient:
    """A Redis client whose every command raises ``failure``, or answers ``reply``."""

    def __init__(self, failure: BaseException | None = None, reply: Any = None) -> None:
        self.failure = failure
        self.reply = reply

    async def answer(self) -> Any:
        if self.failure is not None:
            raise self.failure
        return self.reply

    def pipeline(self, transaction: bool = True) -> Pipeline:
        return Pipeline(self)

    def __getattr__(self, name: str) -> Any:
        async def command(*args: Any, **kwargs: Any) -> Any:
            return await self.answer()

        return command


def guard(store: Any, *, fail_open: bool = False) -> Any:
    return make_replay_guard(
        store,
        route="r",
        leeway_seconds=5,
        fail_open=fail_open,
        metrics=StoreMetrics(Metrics().registry),
    )


def expires() -> int:
    return int(time.time()) + 60


def assert_store_refusal(err: RpcError) -> None:
    assert (err.code, err.http_status) == (-32603, 503)
    assert err.data == {"reason": "state_store_unavailable"}
    assert err.headers == {"Retry-After": "1"}


@pytest.mark.parametrize("spend_replicas", [0, 1], ids=["set", "set-and-wait"])
@pytest.mark.parametrize("failure", FAILURES, ids=IDS)
async def test_whatever_the_client_raises_a_spend_is_unknown(
    failure: BaseException, spend_replicas: int
) -> None:
    store = RedisStore(URL, client=FailingClient(failure), spend_replicas=spend_replicas)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable, match=type(failure).__name__):
        await store.consume("j", expires())
    assert await store.ping() is False
    # The single-use state (and the approval, spent the same way) is refused as documented.
    with pytest.raises(RpcError) as caught:
        await guard(store)("j", expires())
    assert_store_refusal(caught.value)
    await guard(store, fail_open=True)("j", expires())  # store.fail_open: let through


@pytest.mark.parametrize(
    ("spend_replicas", "reply"),
    [
        (1, [None, b"+garbage"]),  # WAIT answered with something else than a count
        (1, [None, None]),
        (1, [None]),
        (0, 42),  # SET ... GET answered with something else than the old value
        (0, ["x"]),
    ],
    ids=["wait-bytes", "wait-none", "wait-missing", "set-int", "set-list"],
)
async def test_an_answer_that_is_not_the_commands_reply_is_unknown(
    spend_replicas: int, reply: Any
) -> None:
    store = RedisStore(URL, client=FailingClient(reply=reply), spend_replicas=spend_replicas)  # type: ignore[arg-type]
    with pytest.raises(StoreUnavailable):
        await store.consume("j", expires())
    with pytest.raises(RpcError) as caught:
        await guard(store)("j", expires())
    assert_store_refusal(caught.value)


@pytest.mark.parametrize("failure", FAILURES, ids=IDS)
async def test_any_store_raising_anything_is_refused_as_documented(failure: BaseException) -> None:
    class Broken:
        async def consume(self, jti: str, expires_at: int) -> None:
            raise failure

        async def aclose(self) -> None:
            return None

    with pytest.raises(RpcError) as caught:
        await guard(Broken())("j", expires())
    assert_store_refusal(caught.value)

    class Spent(Broken):
        async def consume(self, jti: str, expires_at: int) -> None:
            raise StateRejected("replayed")

    with pytest.raises(StateRejected, match="replayed"):  # an answer, not a failure
        await guard(Spent())("j", expires())


@pytest.mark.parametrize("failure", FAILURES, ids=IDS)
async def test_budgets_pins_and_the_cache_treat_it_as_the_store_being_out(
    failure: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    budgets = BudgetStore(MemoryStorage(), "moving-window")

    async def raising(*args: Any, **kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(budgets.limiter, "hit", raising)
    monkeypatch.setattr(budgets.storage, "incr", raising)
    with pytest.raises(BudgetStoreUnavailable):
        await budgets.first_use("k", 10)

    pins = RedisPins(URL, client=FailingClient(failure))  # type: ignore[arg-type]
    with pytest.raises(PinStoreUnavailable):
        await pins.read("scope", ["t"])

    errors: list[str] = []
    cache = RedisCache(
        URL, MemoryCache(1 << 20), on_error=errors.append, client=FailingClient(failure)
    )  # type: ignore[arg-type]
    assert await cache.get("k", 0) is None
    await cache.put("k", Entry(10_000, "public", "r", b"{}"), 0)
    cache.forgettable("r/m")  # a federated member's: stored in a pipeline, forgotten from Redis
    await cache.put("k", Entry(10_000, "public", "r/m", b"{}"), 0)
    await cache.invalidate("r/m")
    assert errors == ["get", "put", "put", "invalidate"]


async def test_a_cache_entry_that_is_garbage_is_a_miss() -> None:
    errors: list[str] = []
    cache = RedisCache(
        URL,
        MemoryCache(1 << 20),
        on_error=errors.append,
        client=FailingClient(reply=b"v1 99999999999999 \xff\xfe x\n{}"),  # type: ignore[arg-type]
    )
    assert await cache.get("k", 0) is None
    assert errors == ["get"]
