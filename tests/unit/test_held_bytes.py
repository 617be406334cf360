"""One accounting for every byte held for a caller (mcp_edge.edge.body): each path that holds
an answer's bytes draws from the process's answer budget under its kind, is refused the same
way when it has no room, and gives back what it took. (Held while it happens, through real
processes: tests/integration/test_federation_boundaries.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from mcp_edge.cache.layer import CacheMetrics, EdgeCacheLayer
from mcp_edge.cache.store import MemoryCache
from mcp_edge.core.federation.lists import MERGE_OVERHEAD, fit_parts
from mcp_edge.core.federation.names import MemberNames, Namespace
from mcp_edge.core.federation.parts import Missing
from mcp_edge.core.jsonrpc import Message as RpcMessage
from mcp_edge.edge.body import HELD_KINDS, AnswerBudget, BodyBudget, Reservation
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.edge.responses import ResponseFinished
from mcp_edge.observability.metrics import Metrics, watch_answer_budget, watch_held
from mcp_edge.upstream.federation.answers import CallAnswer
from mcp_edge.upstream.federation.reader import OverBudget, ask
from mcp_edge.upstream.member import Member

NS = Namespace([MemberNames("docs", "docs"), MemberNames("web", "web")])
BIG = 200_000


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def json_answer(doc: Any) -> list[dict[str, Any]]:
    body = orjson.dumps(doc)
    return [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        },
        {"type": "http.response.body", "body": body[: len(body) // 2], "more_body": True},
        {"type": "http.response.body", "body": body[len(body) // 2 :], "more_body": False},
    ]


def big_result(request_id: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {"contents": [{"uri": "file:///a", "text": "x" * BIG}]},
    }


def test_every_kind_draws_from_one_pool_and_is_shown_by_kind():
    assert set(HELD_KINDS.values()) == {"body", "answer"}
    answers, bodies = AnswerBudget(10 * BIG), BodyBudget(10 * BIG)
    metrics = Metrics(CollectorRegistry())
    watch_answer_budget(metrics, answers)
    watch_held(metrics, bodies)
    held = {
        kind: Reservation(answers if pool == "answer" else bodies, kind=kind)
        for kind, pool in HELD_KINDS.items()
    }
    for i, reservation in enumerate(held.values(), 1):
        assert reservation.take(i * 100)
    text = generate_latest(metrics.registry).decode()
    for i, (kind, pool) in enumerate(HELD_KINDS.items(), 1):
        assert f'mcp_edge_held_bytes{{kind="{kind}",pool="{pool}"}} {float(i * 100)}' in text
    assert answers.in_use == sum(
        i * 100 for i, k in enumerate(HELD_KINDS, 1) if HELD_KINDS[k] == "answer"
    )
    for reservation in held.values():
        reservation.release()
    assert answers.in_use == bodies.in_use == 0 and set(answers.held.values()) == {0}
    with pytest.raises(ValueError):
        Reservation(answers, kind="made_up")


# ---------------------------------------------------------------- a routed call's answer


def call_answer(budget: AnswerBudget, sent: list[Any], refusals: list[int]) -> CallAnswer:
    async def send(message: Any) -> None:
        sent.append(message)

    member = Member("web", "r/web", "http", lambda *a: None)  # type: ignore[arg-type,return-value]
    return CallAnswer(
        send,
        outer=RequestContext(request_id=7),
        inner=RequestContext(),
        member=member,
        namespace=NS,
        method="resources/read",
        max_bytes=10 * BIG,
        on_dropped=lambda d: None,
        reservation=Reservation(budget, kind="member_answer"),
        on_over_budget=lambda: refusals.append(1),
    )


def test_a_routed_calls_answer_is_counted_while_it_is_held_and_given_back():
    budget = AnswerBudget(10 * BIG)
    sent: list[Any] = []
    answer = call_answer(budget, sent, [])
    start, first, last = json_answer(big_result(7))

    async def go() -> None:
        await answer(start)
        await answer(first)
        assert budget.held["member_answer"] == len(first["body"])  # held, counted
        await answer(last)

    run(go())
    assert budget.in_use == 0
    assert orjson.loads(sent[-1]["body"])["result"]["contents"][0]["uri"] == "web+file:///a"


def test_a_routed_calls_answer_over_the_budget_gets_the_budgets_error():
    budget = AnswerBudget(BIG)
    assert budget.try_take(BIG - 1000)  # others hold nearly all of it
    sent: list[Any] = []
    refusals: list[int] = []
    answer = call_answer(budget, sent, refusals)
    start, first, last = json_answer(big_result(7))

    async def go() -> None:
        await answer(start)
        with pytest.raises(ResponseFinished):
            await answer(first)
        with pytest.raises(ResponseFinished):
            await answer(last)  # the member's next send: its stream is closed

    run(go())
    assert sent[0]["status"] == 503 and refusals == [1]
    body = orjson.loads(sent[1]["body"])
    assert body["id"] == 7 and body["error"]["data"] == {"reason": "answer_budget"}
    assert budget.held["member_answer"] == 0


# ---------------------------------------------------------------- a member's part of a list


def asking(messages: list[dict[str, Any]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        request_id = scope[SCOPE_KEY].request_id
        for message in messages:
            if message["type"] == "http.response.body":
                body = message["body"].replace(b'"id":0', b'"id":' + orjson.dumps(request_id))
                message = {**message, "body": body}
            await send(message)

    return app


def ask_with(budget: AnswerBudget) -> Any:
    scope = {"type": "http", "headers": [], "path": "/"}
    doc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    ctx = RequestContext(request_id=1, rpc=RpcMessage(doc), message=doc)
    reservation = Reservation(budget, kind="member_part")
    app = asking(json_answer(big_result(0)))
    return reservation, ask(
        app, scope, ctx, "tools/list", {}, timeout=5, max_bytes=10 * BIG, reservation=reservation
    )


def test_a_members_part_is_counted_until_its_caller_is_done_with_it():
    budget = AnswerBudget(10 * BIG)
    reservation, asked = ask_with(budget)
    reply = run(asked)
    assert reply.missing is None and reply.size > BIG
    assert budget.held["member_part"] >= BIG  # the parsed part is still in hand
    reservation.release()
    assert budget.in_use == 0


def test_a_members_part_over_the_budget_is_refused_not_held():
    budget = AnswerBudget(BIG)
    assert budget.try_take(BIG - 1000)
    reservation, asked = ask_with(budget)
    with pytest.raises(OverBudget):
        run(asked)
    assert budget.held["member_part"] == 0


def test_parts_get_room_in_configuration_order_and_one_too_large_is_missing():
    parts = [("docs", {"tools": []}), ("web", {"tools": []}), ("more", Missing("timeout"))]
    bound = 10_000 + MERGE_OVERHEAD
    assert fit_parts(parts, [6000, 6000, 0], bound) == [
        ("docs", {"tools": []}),
        ("web", Missing("too_large")),
        ("more", Missing("timeout")),
    ]
    # A small page after a large one that did not fit still has room.
    assert fit_parts(parts[:2], [20_000, 6000], bound) == [
        ("docs", Missing("too_large")),
        ("web", {"tools": []}),
    ]


# ---------------------------------------------------------------- cache fills


def test_a_cache_fill_draws_from_the_budget_and_passes_the_answer_on_when_it_has_no_room():
    registry = CollectorRegistry()
    metrics = CacheMetrics(registry)
    result = {"resultType": "complete", "ttlMs": 60_000, "cacheScope": "public", "pad": "x" * BIG}

    async def upstream(scope: Any, receive: Any, send: Any) -> None:
        for message in json_answer({"jsonrpc": "2.0", "id": 5, "result": result}):
            await send(message)
            if message.get("more_body"):
                seen.append(budget.held["cache_fill"])

    doc = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}

    def fill(budget: AnswerBudget) -> tuple[list[Any], MemoryCache]:
        cache = MemoryCache(10 * BIG)
        layer = EdgeCacheLayer(
            upstream,
            gateway_id="g",
            route="r",
            backend=cache,
            metrics=metrics,
            max_entry_bytes=10 * BIG,
            budget=budget,
        )
        ctx = RequestContext(
            request_id=5,
            modern=True,
            rpc=RpcMessage(doc),
            message=doc,
            rpc_method="tools/list",
            body=orjson.dumps(doc),
            parsed=True,
        )
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/",
            "query_string": b"",
            "headers": [],
            SCOPE_KEY: ctx,
        }
        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        run(layer(scope, lambda: None, send))  # type: ignore[arg-type]
        return sent, cache

    seen: list[int] = []
    budget = AnswerBudget(10 * BIG)
    _, cache = fill(budget)
    assert seen and seen[0] > 0 and len(cache) == 1 and budget.in_use == 0

    seen.clear()
    budget = AnswerBudget(BIG)
    assert budget.try_take(BIG - 1000)
    sent, cache = fill(budget)
    assert len(cache) == 0 and seen == [0]
    assert b"".join(
        m.get("body", b"") for m in sent if m["type"] == "http.response.body"
    ) == orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": result})
    text = generate_latest(registry).decode()
    assert 'mcp_edge_cache_not_stored_total{reason="budget",route="r"} 1.0' in text


# ---------------------------------------------------------------- a list filtered by policy


def test_a_list_filtered_by_policy_is_counted_while_read_and_refused_when_it_does_not_fit():
    from mcp_edge.auth.base import Principal
    from mcp_edge.policy.layer import PolicyListLayer
    from tests.unit.test_response_paths import route_policy

    tools = {"tools": [{"name": "get_weather", "description": "x" * BIG}, {"name": "secret"}]}
    answer = json_answer({"jsonrpc": "2.0", "id": 3, "result": tools})

    def filtered(budget: AnswerBudget) -> tuple[list[Any], list[int], list[int]]:
        seen: list[int] = []
        refusals: list[int] = []

        async def upstream(scope: Any, receive: Any, send: Any) -> None:
            for message in answer:
                await send(message)
                seen.append(budget.held["list_filter"])

        sent: list[Any] = []

        async def send(message: Any) -> None:
            sent.append(message)

        layer = PolicyListLayer(
            upstream,
            route_policy(),
            max_bytes=10 * BIG,
            budget=budget,
            on_over_budget=lambda: refusals.append(1),
        )
        ctx = RequestContext(
            modern=True, request_id=3, rpc_method="tools/list", principal=Principal(id="alice")
        )
        run(layer({"type": "http", "headers": [], SCOPE_KEY: ctx}, None, send))  # type: ignore[arg-type]
        return sent, seen, refusals

    budget = AnswerBudget(10 * BIG)
    sent, seen, refusals = filtered(budget)
    assert seen[1] >= BIG // 2 and budget.in_use == 0 and not refusals  # (before: not counted)
    assert [t["name"] for t in orjson.loads(sent[-1]["body"])["result"]["tools"]] == ["get_weather"]
    budget = AnswerBudget(BIG)
    assert budget.try_take(BIG - 1000)
    sent, _, refusals = filtered(budget)
    assert sent[0]["status"] == 503 and refusals == [1]
    assert orjson.loads(sent[1]["body"])["error"]["data"] == {"reason": "answer_budget"}
    assert budget.held["list_filter"] == 0
