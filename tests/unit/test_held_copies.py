"""What is held of an answer is what is counted (mcp_edge.edge.responses, mcp_edge.upstream.federation):
while a client takes nothing of a large answer, the gateway holds one copy of it (its JSON, as it
will be sent), and the answer budget counts that copy once. Before, the parse of the final
response stayed alive beside the JSON (twice the answer, counted once), an SSE answer whose final
event came with its end was held three times and counted not at all, and a routed call's answer
was held three times and counted twice (the member's part of the route and the edge).

Measured with tracemalloc on the live allocations (the current size, not the peak: orjson
reserves more than it writes, which a peak would count), while the client's ``send`` waits."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from mcp_edge.core.federation.names import MemberNames, Namespace
from mcp_edge.core.jsonrpc import Message as RpcMessage
from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.edge.responses import ResponseInspector
from mcp_edge.upstream.federation.answers import CallAnswer
from mcp_edge.upstream.federation.report import FederationMetrics, Reporter
from mcp_edge.upstream.federation.route import FederatedRoute, Seat
from mcp_edge.upstream.member import Member

N = 4 * 2**20
CHUNK = 64 * 1024
TEXT = "0123456789abcdef" * (N // 16)
ANSWER = orjson.dumps(
    {"jsonrpc": "2.0", "id": 1, "result": {"contents": [{"uri": "big://x", "text": TEXT}]}}
)

Send = Callable[[Any], Awaitable[None]]


def inspector(send: Send, budget: AnswerBudget) -> ResponseInspector:
    return ResponseInspector(
        send,
        request_id=1,
        rpc_method="resources/read",
        mrtr_method=True,
        sealer=lambda result: result,
        max_inspect_bytes=2 * N,
        on_violation=lambda violation: None,
        budget=budget,
    )


async def held_while_the_client_waits(
    target: Send, body: bytes, content_type: bytes, *, until: Callable[[], bool]
) -> int:
    """Bytes allocated and still alive once ``target`` has been sent ``body`` (in pieces, the
    last one ending it) and ``until()`` holds: the client's ``send`` never returns."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]

        async def upstream() -> None:
            start = {"type": "http.response.start", "status": 200}
            await target({**start, "headers": [(b"content-type", content_type)]})
            for i in range(0, len(body), CHUNK):
                piece = body[i : i + CHUNK]
                await target(
                    {
                        "type": "http.response.body",
                        "body": piece,
                        "more_body": i + CHUNK < len(body),
                    }
                )

        task = asyncio.ensure_future(upstream())
        for _ in range(1000):
            if until():
                break
            await asyncio.sleep(0.001)
        held = tracemalloc.get_traced_memory()[0] - base
        task.cancel()
        return held
    finally:
        tracemalloc.stop()


def a_client_that_takes_nothing() -> tuple[Send, list[int]]:
    """A client ``send`` that waits for ever once a body part comes (its sizes in the list)."""
    got: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            got.append(len(message["body"]))
            await asyncio.Event().wait()

    return send, got


async def test_a_json_answer_is_held_once_and_counted_once_while_its_client_waits():
    budget = AnswerBudget(8 * N)
    send, got = a_client_that_takes_nothing()
    held = await held_while_the_client_waits(
        inspector(send, budget), ANSWER, b"application/json", until=lambda: bool(got)
    )
    assert held < 1.3 * N  # before: the JSON and its parse (2x)
    assert budget.held["answer"] == len(ANSWER)


async def test_an_sse_answer_ended_by_its_final_event_is_held_once_and_counted_once():
    budget = AnswerBudget(8 * N)
    send, got = a_client_that_takes_nothing()
    held = await held_while_the_client_waits(
        inspector(send, budget), encode_event(ANSWER), b"text/event-stream", until=lambda: bool(got)
    )
    assert held < 1.3 * N  # before: the event, its text and its parse (3x), none counted
    assert budget.held["answer"] >= len(ANSWER)


async def test_a_routed_calls_answer_passes_to_the_edge_held_once_and_counted_once():
    budget = AnswerBudget(8 * N)
    send, got = a_client_that_takes_nothing()
    member = Member("big", "r/big", "http", lambda *a: None)  # type: ignore[arg-type,return-value]
    answer = CallAnswer(
        inspector(send, budget),
        outer=RequestContext(request_id=1),
        inner=RequestContext(),
        member=member,
        namespace=Namespace([MemberNames("big", "")]),  # (unprefixed: passed as it came)
        method="resources/read",
        max_bytes=2 * N,
        on_dropped=lambda dropped: None,
        reservation=Reservation(budget, kind="member_answer"),
    )
    held = await held_while_the_client_waits(
        answer, ANSWER, b"application/json", until=lambda: bool(got)
    )
    assert held < 1.3 * N  # before: the member's copy, the bytes handed on, the edge's parse
    assert budget.held == {**budget.held, "answer": len(ANSWER), "member_answer": 0}


async def test_a_merged_list_is_sent_with_the_members_parts_given_back():
    budget = AnswerBudget(8 * N)
    tools = [{"name": f"t{i}", "description": "d" * 1000, "inputSchema": {}} for i in range(300)]

    async def member_app(scope: Any, receive: Any, send: Any) -> None:
        request_id = scope[SCOPE_KEY].request_id
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    route = FederatedRoute(
        route="r",
        audience="gw/r",
        seats=[Seat(Member("docs", "r/docs", "http", member_app), 2.0)],
        namespace=Namespace([MemberNames("docs", "docs")]),
        ring=KeyRing([parse_key_spec(generate_key())]),
        reporter=Reporter("r", FederationMetrics(CollectorRegistry())),
        max_bytes=2 * N,
        budget=budget,
    )
    doc = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    ctx = RequestContext(modern=True, request_id=1, rpc=RpcMessage(doc), message=doc)
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [], SCOPE_KEY: ctx}
    parts_while_sent: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            parts_while_sent.append(budget.held["member_part"])

    await route(scope, lambda: asyncio.Event().wait(), send)  # type: ignore[arg-type,return-value]
    assert parts_while_sent == [0]  # before: still held (and counted) while the client took it
    assert budget.in_use == 0


async def test_a_cache_fill_stays_counted_until_the_entry_is_stored():
    from mcp_edge.cache.layer import CacheMetrics, EdgeCacheLayer
    from mcp_edge.cache.store import Entry, MemoryCache

    budget = AnswerBudget(8 * N)
    result = {"resultType": "complete", "ttlMs": 60_000, "cacheScope": "public", "pad": "x" * N}
    answer = orjson.dumps({"jsonrpc": "2.0", "id": 5, "result": result})
    while_stored: list[int] = []

    class SlowStore(MemoryCache):
        async def put(self, key: str, entry: Entry, now_ms: int) -> None:
            while_stored.append(budget.held["cache_fill"])  # (as Redis's round trip would)
            await super().put(key, entry, now_ms)

    async def upstream(scope: Any, receive: Any, send: Any) -> None:
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})

    cache = SlowStore(8 * N)
    layer = EdgeCacheLayer(
        upstream,
        gateway_id="g",
        route="r",
        backend=cache,
        metrics=CacheMetrics(CollectorRegistry()),
        max_entry_bytes=2 * N,
        budget=budget,
    )
    doc = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}
    ctx = RequestContext(
        request_id=5,
        modern=True,
        rpc=RpcMessage(doc),
        message=doc,
        rpc_method="tools/list",
        body=orjson.dumps(doc),
        parsed=True,
    )
    scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"", "headers": []}

    async def send(message: Any) -> None:
        pass

    await layer({**scope, SCOPE_KEY: ctx}, lambda: None, send)  # type: ignore[arg-type]
    assert len(cache) == 1 and while_stored and while_stored[0] >= N  # before: 0
    assert budget.in_use == 0
