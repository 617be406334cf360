"""The native moving-window budgets (mcp_edge.ratelimit.memory): exact window edges with an injected
clock, all-or-nothing budgets, and the same decisions as limits' memory storage; an MRTR retry's
first use counted the same way too."""

from __future__ import annotations

import random

import pytest
from limits.aio.storage import MemoryStorage

from mcp_edge.ratelimit.config import RateLimitSection, RouteRateLimits
from mcp_edge.ratelimit.limiter import BudgetStore, MemoryBudgetStore, build_budget_store
from mcp_edge.ratelimit.memory import FirstUses, MovingWindows
from mcp_edge.ratelimit.rules import RoutePolicy, principal_key
from mcp_edge.store.config import StoreSection


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


ME, YOU = principal_key("me"), principal_key("you")


def test_n_allowed_then_refused_until_the_oldest_leaves_the_window():
    clock = Clock()
    windows = MovingWindows(clock=clock)
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="3/10 seconds"))
    t0 = clock.now
    for dt in (0.0, 1.0, 2.0):
        clock.now = t0 + dt
        assert windows.spend(policy.checks(ME, 1, {})) is None
    clock.now = t0 + 9.999
    refused = windows.spend(policy.checks(ME, 1, {}))
    assert refused is not None and refused.budget.kind == "principal"
    assert windows.reset_at(refused) == t0 + 10.0
    clock.now = t0 + 10.0  # the spend at t0 is no longer in the last 10 seconds
    assert windows.spend(policy.checks(ME, 1, {})) is None
    assert windows.spend(policy.checks(ME, 1, {})) is not None  # t0+1, t0+2, t0+10 in the window
    clock.now = t0 + 11.0
    assert windows.spend(policy.checks(ME, 1, {})) is None
    assert windows.spend(policy.checks(YOU, 1, {})) is None  # per principal


def test_a_cost_counts_its_units_and_a_cost_over_the_budget_never_fits():
    clock = Clock()
    windows = MovingWindows(clock=clock)
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="5/minute"))
    assert windows.spend(policy.checks(ME, 3, {})) is None
    assert windows.spend(policy.checks(ME, 3, {})) is not None  # 3 + 3 > 5
    assert windows.spend(policy.checks(ME, 2, {})) is None  # 3 + 2 = 5
    assert windows.spend(policy.checks(YOU, 6, {})) is not None
    assert windows.reset_at(policy.checks(YOU, 6, {})[0]) == clock.now + 60  # nothing spent


def test_two_budgets_are_all_or_nothing():
    clock = Clock()
    windows = MovingWindows(clock=clock)
    policy = RoutePolicy(
        "gw",
        "r",
        RouteRateLimits.model_validate({"per_principal": "2/minute", "global": "3/minute"}),
    )
    assert windows.spend(policy.checks(ME, 1, {})) is None
    assert windows.spend(policy.checks(ME, 1, {})) is None
    for _ in range(3):  # refused by its own budget: the global one is not spent
        assert windows.spend(policy.checks(ME, 1, {})).budget.kind == "principal"
    assert windows.spend(policy.checks(YOU, 1, {})) is None
    refused = windows.spend(policy.checks(YOU, 1, {}))
    assert refused is not None and refused.budget.kind == "global"
    # ... and the refusal by the global budget spent none of YOU's own: after the window both fit.
    clock.now += 60
    assert windows.spend(policy.checks(YOU, 1, {})) is None
    assert windows.spend(policy.checks(YOU, 1, {})) is None


def test_idle_windows_are_swept():
    clock = Clock()
    windows = MovingWindows(clock=clock, sweep_seconds=5)
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="3/second"))
    for i in range(100):
        assert windows.spend(policy.checks(principal_key(f"p{i}"), 1, {})) is None
    assert len(windows) == 100
    clock.now += 6
    assert windows.spend(policy.checks(ME, 1, {})) is None
    assert len(windows) == 1


def test_the_memory_store_is_native_for_the_moving_window_only():
    assert type(build_budget_store(RateLimitSection(), StoreSection())) is MemoryBudgetStore
    assert (
        type(build_budget_store(RateLimitSection(strategy="sliding-window"), StoreSection()))
        is BudgetStore
    )


@pytest.mark.parametrize("seed", range(5))
async def test_the_same_decisions_and_retry_after_as_limits_memory_storage(seed, monkeypatch):
    """Random traffic of three callers on two budgets and a tool budget, the clock moving by
    uneven steps: every decision and Retry-After equal those of limits' memory storage."""
    import limits.aio.storage.memory as limits_memory

    clock = Clock()

    class FakeTime:
        @staticmethod
        def time() -> float:
            return clock.now

    monkeypatch.setattr(limits_memory, "time", FakeTime)
    reference = BudgetStore(MemoryStorage(), "moving-window", clock=clock)
    native = MemoryBudgetStore(clock=clock)
    policy = RoutePolicy(
        "gw",
        "r",
        RouteRateLimits.model_validate(
            {
                "per_principal": "4/2 seconds; 6/10 seconds",
                "global": "9/3 seconds",
                "tools": {"t": "2/5 seconds"},
            }
        ),
    )
    rng = random.Random(seed)
    callers = [principal_key(p) for p in ("a", "b", "c")]
    outcomes = []
    for _ in range(600):
        clock.now += rng.choice((0.0, 0.013, 0.1, 0.37, 1.3))
        tools = {"t": 1} if rng.random() < 0.3 else {}
        checks = policy.checks(rng.choice(callers), rng.choice((1, 1, 1, 2)), tools)
        expected, got = await reference.spend(checks), await native.spend(checks)
        assert got == expected
        if got is not None:
            assert await native.retry_after(got) == await reference.retry_after(expected)
        outcomes.append(got is None)
    assert any(outcomes) and not all(outcomes)


def test_a_key_is_a_first_use_once_within_its_time_to_live():
    clock = Clock()
    uses = FirstUses(clock=clock, sweep_seconds=5)
    t0 = clock.now
    assert uses.first("retry/a", 60)
    assert not uses.first("retry/a", 60)
    assert uses.first("retry/b", 60)
    clock.now = t0 + 59.999  # presenting it again does not extend its life
    assert not uses.first("retry/a", 60)
    clock.now = t0 + 60.0
    assert uses.first("retry/a", 60)  # its time to live is over: a new first use
    assert not uses.first("retry/a", 60)


def test_first_uses_forget_expired_keys():
    clock = Clock()
    uses = FirstUses(clock=clock, sweep_seconds=5)
    for i in range(100):
        assert uses.first(f"retry/{i}", 2)
    assert len(uses) == 100
    clock.now += 10  # the next look sweeps: only the new key is left
    assert uses.first("retry/new", 2)
    assert len(uses) == 1


@pytest.mark.parametrize("seed", range(3))
async def test_first_use_answers_as_limits_memory_storage(seed, monkeypatch):
    """The same answers as ``limits``' counter with an expiry (``incr(...) == 1``), both on one
    injected clock, over random keys, lives and pauses (some landing exactly on an expiry)."""
    import limits.aio.storage.memory as library_memory

    rng = random.Random(seed)
    clock = Clock()
    monkeypatch.setattr(library_memory.time, "time", clock)
    native = MemoryBudgetStore(clock=clock)
    library = BudgetStore(MemoryStorage(), "moving-window")
    for _ in range(300):
        key = f"retry/{rng.randrange(5)}"
        ttl = rng.choice((1, 2, 3))
        assert await native.first_use(key, ttl) == await library.first_use(key, ttl), key
        if rng.random() < 0.3:
            clock.now += rng.choice((0.5, 1.0, 2.0, 2.5))
