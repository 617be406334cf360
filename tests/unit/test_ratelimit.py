"""Rate limits: the sans-I/O rules, the budget store on the ``limits`` memory backend, and the
ASGI layer behind a guard's context (MRTR retries counted once, notifications and legacy
responses free, a dead Redis failing open or closed)."""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest
from limits.aio.storage import MemoryStorage

from mcp_edge.auth.base import Principal
from mcp_edge.edge.context import get_context
from mcp_edge.observability.metrics import Metrics
from mcp_edge.ratelimit.config import RateLimitSection, RouteRateLimits
from mcp_edge.ratelimit.limiter import (
    BudgetStore,
    BudgetStoreUnavailable,
    QuietMemoryStorage,
    RateLimitLayer,
    RateLimitMetrics,
    build_budget_store,
)
from mcp_edge.ratelimit.rules import (
    RATE_LIMITED,
    RoutePolicy,
    describe,
    legacy_demand,
    parse_rates,
    principal_key,
    rate_limited_error,
    retry_after_seconds,
)
from mcp_edge.server.config import ConfigError, GatewayConfig, load_config
from mcp_edge.store.config import StoreSection

# ---------------------------------------------------------------- rules


@pytest.mark.parametrize(
    "spec,expected",
    [
        ("60/minute", ["60/minute"]),
        ("10 per second", ["10/second"]),
        ("5/second; 100/hour", ["5/second", "100/hour"]),
        ("5/10 seconds", ["5/10 seconds"]),
    ],
)
def test_rates_parse_and_read_back(spec, expected):
    assert [describe(i) for i in parse_rates(spec)] == expected


@pytest.mark.parametrize("spec", ["", "60", "sixty/minute", "60/fortnight", "minute/60"])
def test_bad_rates_are_refused(spec):
    with pytest.raises(ValueError, match="is not a rate"):
        parse_rates(spec)


def test_the_code_is_outside_every_reserved_range():
    assert (
        not -32768 <= RATE_LIMITED <= -32000
    )  # JSON-RPC's reserved band, incl. the spec's -32020..-32099
    err = rate_limited_error(
        RoutePolicy("gw", "r", RouteRateLimits(per_principal="2/minute")).route_budgets[0], 7
    )
    assert err.http_status == 429 and err.headers == {"Retry-After": "7"}
    assert err.to_response(5) == {
        "jsonrpc": "2.0",
        "id": 5,
        "error": {
            "code": RATE_LIMITED,
            "message": "Rate limit exceeded (2/minute); retry in 7 s",
            "data": {
                "reason": "rate_limited",
                "budget": "principal",
                "limit": "2/minute",
                "retryAfterSeconds": 7,
            },
        },
    }


def test_retry_after_rounds_up_and_is_at_least_one_second():
    assert retry_after_seconds(100.2, 100.0) == 1
    assert retry_after_seconds(130.01, 100.0) == 31
    assert retry_after_seconds(90.0, 100.0) == 1


def test_policy_checks_name_route_budget_and_hashed_principal():
    limits = RouteRateLimits.model_validate(
        {
            "per_principal": "60/minute",
            "global": "1000/minute",
            "tools": {"search": "10/minute", "pay": {"global": "5/minute"}},
        }
    )
    policy = RoutePolicy("gw", "tools", limits)
    alice = principal_key("alice")
    assert alice != principal_key("bob") and "alice" not in alice
    checks = policy.checks(alice, 1, {"search": 1})
    assert [(c.budget.kind, c.identifiers, c.cost) for c in checks] == [
        ("principal", ("gw", "tools", "principal", alice), 1),
        ("global", ("gw", "tools", "global"), 1),
        ("tool", ("gw", "tools", "tool", "search", alice), 1),
    ]
    assert [c.budget.kind for c in policy.checks(alice, 1, {"pay": 1})] == [
        "principal",
        "global",
        "tool_global",
    ]
    assert policy.checks(alice, 0, {}) == []  # a notification spends nothing
    batch = policy.checks(alice, 3, {"search": 2})
    assert [c.cost for c in batch] == [3, 3, 2]


def test_legacy_demand_counts_requests_not_responses_or_notifications():
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a"}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "a"}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 9, "result": {"action": "accept"}},  # an answer to the server
    ]
    requests, tools = legacy_demand(batch)
    assert requests == 3 and tools == {"a": 2}
    assert legacy_demand({"jsonrpc": "2.0", "id": 9, "result": {}}) == (0, {})
    assert legacy_demand(None) == (0, {})


def test_config_validates_rates_and_names_the_field(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes:\n  - upstream: http://x/mcp\n"
        "    rate_limits: {per_principal: lots}\n"
    )
    with pytest.raises(
        ConfigError, match=r"routes\.0\.rate_limits\.per_principal: .*'lots' is not a rate"
    ):
        load_config(str(cfg), env={})
    ok = GatewayConfig.model_validate(
        {
            "routes": [
                {
                    "upstream": "http://x/mcp",
                    "rate_limits": {"global": "10/second", "tools": {"t": "1/minute"}},
                }
            ]
        }
    )
    route = ok.routes[0].rate_limits
    assert (
        route.global_ == "10/second"
        and route.tools["t"].per_principal == "1/minute"
        and route.enabled
    )
    assert (
        not GatewayConfig.model_validate({"routes": [{"upstream": "http://x/mcp"}]})
        .routes[0]
        .rate_limits.enabled
    )
    assert ok.rate_limits.fail_open is True and ok.rate_limits.strategy == "moving-window"


# ---------------------------------------------------------------- budget store (limits, memory)


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window"])
async def test_memory_budget_refuses_the_request_after_the_budget(strategy):
    store = BudgetStore(MemoryStorage(), strategy)
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="3/minute"))
    alice, bob = principal_key("alice"), principal_key("bob")
    assert [await store.spend(policy.checks(alice, 1, {})) for _ in range(3)] == [None, None, None]
    refused = await store.spend(policy.checks(alice, 1, {}))
    assert refused is not None and refused.budget.kind == "principal"
    # moving window: when the oldest request leaves it; sliding window: its (aligned) window ends.
    low = 55 if strategy == "moving-window" else 1
    assert low <= await store.retry_after(refused) <= 60
    assert await store.spend(policy.checks(bob, 1, {})) is None  # per principal


async def test_a_request_refused_by_one_budget_spends_none_of_the_others():
    store = BudgetStore(MemoryStorage(), "moving-window")
    policy = RoutePolicy(
        "gw",
        "r",
        RouteRateLimits.model_validate(
            {"per_principal": "3/minute", "tools": {"slow": "1/minute"}}
        ),
    )
    me = principal_key("me")
    assert await store.spend(policy.checks(me, 1, {"slow": 1})) is None
    for _ in range(3):
        refused = await store.spend(policy.checks(me, 1, {"slow": 1}))
        assert refused is not None and refused.budget.kind == "tool"
    # The three refused calls did not spend the route budget: two other requests still fit.
    assert await store.spend(policy.checks(me, 1, {})) is None
    assert await store.spend(policy.checks(me, 1, {})) is None
    assert (await store.spend(policy.checks(me, 1, {}))).budget.kind == "principal"


async def test_the_quiet_memory_storage_still_hooks_the_librarys_sweeper(monkeypatch):
    """QuietMemoryStorage overrides a private method of limits' MemoryStorage: fail loudly if a
    new version of the library renames it (the budgets would work, but cost 0.8 ms a request)."""
    assert hasattr(MemoryStorage, "_MemoryStorage__schedule_expiry")
    sweeps = []

    async def counting(self):
        sweeps.append(1)

    monkeypatch.setattr(MemoryStorage, "_MemoryStorage__schedule_expiry", counting)
    store = BudgetStore(QuietMemoryStorage(sweep_seconds=3600), "moving-window")
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="100/minute"))
    for _ in range(20):
        assert await store.spend(policy.checks(principal_key("a"), 1, {})) is None
    assert len(sweeps) == 1  # the library would have swept 20 times


async def test_first_use_is_once_per_key():
    store = BudgetStore(MemoryStorage(), "moving-window")
    assert await store.first_use("retry/x", 60) is True
    assert await store.first_use("retry/x", 60) is False
    assert await store.first_use("retry/y", 60) is True


def _dead_redis_url() -> str:
    with socket.socket() as s:  # a port nothing listens on: connection refused, at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


async def test_unreachable_redis_is_unavailable_not_an_exception_leak():
    store = build_budget_store(
        RateLimitSection(timeout_seconds=0.5), StoreSection(type="redis", url=_dead_redis_url())
    )
    policy = RoutePolicy("gw", "r", RouteRateLimits(per_principal="3/minute"))
    try:
        with pytest.raises(BudgetStoreUnavailable):
            await store.spend(policy.checks(principal_key("a"), 1, {}))
        with pytest.raises(BudgetStoreUnavailable):
            await store.first_use("retry/x", 5)
    finally:
        await store.aclose()


# ---------------------------------------------------------------- the layer


class Upstream:
    """An inner app that counts what reaches it and answers 200."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send) -> None:
        message = await receive()
        self.bodies.append(message.get("body", b""))
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b"{}"})


def request_scope(
    *,
    modern=True,
    method="POST",
    request_id: Any = 1,
    principal="alice",
    tool=None,
    retry_state: str | None = None,
    retry_round: int = 1,
) -> dict[str, Any]:
    headers = [(b"mcp-protocol-version", b"2026-07-28")]
    if tool is not None:
        headers += [(b"mcp-method", b"tools/call"), (b"mcp-name", tool.encode())]
    scope = {"type": "http", "method": method, "path": "/mcp", "headers": headers}
    ctx = get_context(scope)
    ctx.modern, ctx.request_id, ctx.principal = modern, request_id, Principal(principal)
    ctx.rpc_method = "tools/call" if tool is not None else "tools/list"
    if retry_state is not None:
        ctx.retry_round, ctx.retry_state_id, ctx.retry_state_expires = (
            retry_round,
            retry_state,
            2_000_000_000,
        )
    return scope


async def call(layer, scope, body: bytes = b"{}") -> tuple[int, dict[str, str], Any]:
    sent = False
    out: dict[str, Any] = {}
    ctx = get_context(scope)  # as the edge leaves it: the body read and parsed
    ctx.body, ctx.message, ctx.parsed = body, orjson.loads(body), True

    async def receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
        else:
            out["body"] = orjson.loads(message["body"])

    await layer(scope, receive, send)
    return out["status"], out["headers"], out["body"]


def make_layer(
    limits: dict[str, Any],
    *,
    store: BudgetStore | None = None,
    fail_open=True,
    retries_spend_once=True,
) -> tuple[RateLimitLayer, Upstream, RateLimitMetrics]:
    upstream = Upstream()
    metrics = RateLimitMetrics(Metrics().registry)
    layer = RateLimitLayer(
        upstream,
        route="r",
        policy=RoutePolicy("gw", "r", RouteRateLimits.model_validate(limits)),
        budgets=store or build_budget_store(RateLimitSection(), StoreSection()),
        metrics=metrics,
        fail_open=fail_open,
        retries_spend_once=retries_spend_once,
        retries_per_unit=RouteRateLimits.model_validate(limits).retries_per_unit,
    )
    return layer, upstream, metrics


def decisions(metrics: RateLimitMetrics) -> dict[str, float]:
    return {
        s.labels["decision"]: s.value
        for m in metrics.requests.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.value
    }


async def test_over_budget_gets_its_own_id_429_and_retry_after():
    layer, upstream, metrics = make_layer({"per_principal": "2/minute"})
    for rid in (1, 2):
        assert (await call(layer, request_scope(request_id=rid)))[0] == 200
    status, headers, body = await call(layer, request_scope(request_id="third"))
    assert status == 429 and 55 <= int(headers["retry-after"]) <= 60
    assert body["id"] == "third" and body["error"]["code"] == RATE_LIMITED
    assert body["error"]["data"]["budget"] == "principal"
    assert len(upstream.bodies) == 2  # the refused request never went on
    assert decisions(metrics) == {"allowed": 2, "limited": 1}


async def test_a_verified_retry_is_free_once_then_counts_again():
    layer, upstream, metrics = make_layer({"per_principal": "2/minute"})
    assert (await call(layer, request_scope()))[0] == 200  # round 1 of a flow: 1 spent
    for rid in range(10):  # ten retries of ten rounds (each round's state is new): free
        assert (await call(layer, request_scope(request_id=rid, retry_state=f"state-{rid}")))[
            0
        ] == 200
    # The same state presented again spends like any request: 1 left, then refused.
    assert (await call(layer, request_scope(retry_state="state-3")))[0] == 200
    assert (await call(layer, request_scope(retry_state="state-3")))[0] == 429
    assert decisions(metrics) == {"allowed": 2, "retry": 10, "limited": 1}


@pytest.mark.parametrize("retries_per_unit", [0, 1, 3])
@pytest.mark.parametrize("single_use", [False, True])
async def test_one_unit_buys_at_most_its_retries_per_unit_then_each_round_spends(
    retries_per_unit, single_use
):
    limits = {"per_principal": "3/minute", "retries_per_unit": retries_per_unit}
    layer, upstream, metrics = make_layer(limits, retries_spend_once=not single_use)
    statuses = [(await call(layer, request_scope()))[0]]  # a flow's first request: 1 spent
    for n in range(1, 17):  # its retries, each with the state of the round before
        statuses.append(
            (await call(layer, request_scope(request_id=n, retry_state=f"s{n}", retry_round=n)))[0]
        )
    # The flow's first request and N retries on one unit, then one round per unit, 3 units in all.
    calls = 1 + retries_per_unit + 2
    assert statuses == [200] * calls + [429] * (17 - calls)
    assert len(upstream.bodies) == calls
    expected = {"allowed": 3, "retry": retries_per_unit, "limited": 17 - calls}
    assert decisions(metrics) == {k: v for k, v in expected.items() if v}


def test_retries_per_unit_defaults_low():
    assert RouteRateLimits.model_validate({"per_principal": "1/minute"}).retries_per_unit == 3
    with pytest.raises(ValueError):
        RouteRateLimits.model_validate({"retries_per_unit": -1})


async def test_on_single_use_routes_every_verified_retry_is_free():
    layer, _, metrics = make_layer({"per_principal": "1/minute"}, retries_spend_once=False)
    assert (await call(layer, request_scope()))[0] == 200
    for _ in range(3):  # (the guard itself refuses a replay on such routes)
        assert (await call(layer, request_scope(retry_state="s")))[0] == 200
    assert decisions(metrics) == {"allowed": 1, "retry": 3}


async def test_tool_budget_from_the_checked_mcp_name_header():
    layer, _, metrics = make_layer({"tools": {"slow": "1/minute"}})
    assert (await call(layer, request_scope(tool="slow")))[0] == 200
    status, _, body = await call(layer, request_scope(tool="slow", request_id=7))
    assert status == 429 and body["error"]["data"]["tool"] == "slow"
    assert (await call(layer, request_scope(tool="fast")))[0] == 200
    assert (await call(layer, request_scope()))[0] == 200  # not a tools/call


async def test_notifications_spend_nothing():
    layer, upstream, _ = make_layer({"per_principal": "1/minute"})
    for _ in range(3):
        assert (await call(layer, request_scope(request_id=None)))[0] == 200
    assert (await call(layer, request_scope()))[0] == 200
    assert len(upstream.bodies) == 4


async def test_legacy_batches_spend_per_request_and_the_body_goes_on_intact():
    layer, upstream, _ = make_layer({"per_principal": "3/minute", "tools": {"a": "5/minute"}})
    batch = orjson.dumps(
        [
            {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "a"}}
            for i in range(2)
        ]
    )
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 9, "result": {"action": "accept"}})
    assert (await call(layer, request_scope(modern=False, request_id=None), batch))[0] == 200
    assert upstream.bodies[-1] == batch
    for _ in range(3):  # answers to the server's questions are free
        assert (await call(layer, request_scope(modern=False, request_id=9), answer))[0] == 200
    assert (await call(layer, request_scope(modern=False, request_id=None), batch))[
        0
    ] == 429  # 2 + 2 > 3


async def test_budget_store_down_fails_open_by_default_and_closed_when_configured():
    url = _dead_redis_url()
    for fail_open in (True, False):
        store = build_budget_store(
            RateLimitSection(timeout_seconds=0.5), StoreSection(type="redis", url=url)
        )
        layer, upstream, metrics = make_layer(
            {"per_principal": "1/minute"}, store=store, fail_open=fail_open
        )
        try:
            results = [await call(layer, request_scope(request_id=i)) for i in range(3)]
        finally:
            await store.aclose()
        if fail_open:
            assert [r[0] for r in results] == [200, 200, 200] and len(upstream.bodies) == 3
            assert decisions(metrics) == {"store_unavailable_allowed": 3}
        else:
            assert [r[0] for r in results] == [503] * 3 and not upstream.bodies
            assert results[0][1]["retry-after"] == "1"
            assert results[2][2]["id"] == 2
            assert results[2][2]["error"]["data"] == {"reason": "rate_limit_store_unavailable"}
            assert decisions(metrics) == {"store_unavailable_refused": 3}
