"""The listen fan-in (mcp_edge.upstream.federation.listen) ends whole: when the client leaves,
every member stream is closed and nothing it started is left pending (a task left waiting on a
member's queue would be destroyed pending by the garbage collector, an error in the log, for
every listen stream that ever ended). When the process drains, the same, and the client's
stream ends normally, without a response."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson

from mcp_edge.core.federation.names import MemberNames, Namespace
from mcp_edge.core.jsonrpc import Message
from mcp_edge.edge.body import AnswerBudget
from mcp_edge.edge.context import RequestContext
from mcp_edge.edge.draining import Draining
from mcp_edge.upstream.federation.listen import ACKNOWLEDGED, MAX_ACK_ITEMS, SUBSCRIPTION_ID, FanIn
from mcp_edge.upstream.member import Member

ACK = {
    "jsonrpc": "2.0",
    "method": ACKNOWLEDGED,
    "params": {"notifications": {"toolsListChanged": True}},
}


def member(name: str, closed: list[str]) -> Member:
    """A member whose listen stream acknowledges, then stays open until its client leaves."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        body = b"data: " + orjson.dumps(ACK) + b"\n\n"
        await send({"type": "http.response.body", "body": body, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        closed.append(name)

    return Member(name, f"r/{name}", "http", app)


def fan_in_route(members: list[Member], draining: Draining | None = None) -> Any:
    return SimpleNamespace(
        route="r",
        seats=[SimpleNamespace(member=m, timeout=2.0) for m in members],
        by_name={m.name: SimpleNamespace(member=m, timeout=2.0) for m in members},
        namespace=Namespace([MemberNames("docs", "docs"), MemberNames("web", "web")]),
        max_bytes=100_000,
        reporter=None,
        on_list_changed=None,
        draining=draining,
        budget=None,
        on_over_budget=None,
    )


def test_the_client_leaving_closes_every_member_stream_and_leaves_no_task():
    closed: list[str] = []
    members = [member("docs", closed), member("web", closed)]
    route = fan_in_route(members)
    request = {
        "jsonrpc": "2.0",
        "id": "sub-1",
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}},
    }
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(b"accept", b"text/event-stream")],
    }
    sent: list[Any] = []

    async def go() -> set[asyncio.Task[Any]]:
        acked = asyncio.Event()

        async def send(message: Any) -> None:
            sent.append(message)
            if message["type"] == "http.response.body":
                acked.set()

        async def receive() -> Any:
            await acked.wait()  # the client leaves once acknowledged
            return {"type": "http.disconnect"}

        ctx = RequestContext(modern=True, request_id="sub-1", rpc=Message(request))
        await asyncio.wait_for(FanIn(route, scope, receive, send, ctx).run(), 10)
        await asyncio.sleep(0)  # what was cancelled runs its last step
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    left = asyncio.run(go())
    assert not left, left
    assert sorted(closed) == ["docs", "web"]
    (data,) = [line for line in sent[1]["body"].splitlines() if line.startswith(b"data:")]
    ack = orjson.loads(data.removeprefix(b"data:"))
    assert ack["method"] == ACKNOWLEDGED
    assert ack["params"]["notifications"] == {"toolsListChanged": True}
    assert ack["params"]["_meta"][SUBSCRIPTION_ID] == "sub-1"


def test_draining_ends_the_stream_closes_every_member_stream_and_leaves_no_task():
    closed: list[str] = []
    draining = Draining()
    route = fan_in_route([member("docs", closed), member("web", closed)], draining)
    request = {
        "jsonrpc": "2.0",
        "id": "sub-2",
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}},
    }
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    sent: list[Any] = []

    async def go() -> set[asyncio.Task[Any]]:
        async def send(message: Any) -> None:
            sent.append(message)
            if message["type"] == "http.response.body" and message.get("more_body"):
                draining.begin()  # acknowledged: the process begins draining

        async def receive() -> Any:
            await asyncio.Event().wait()  # the client never leaves
            raise AssertionError

        ctx = RequestContext(modern=True, request_id="sub-2", rpc=Message(request))
        await asyncio.wait_for(FanIn(route, scope, receive, send, ctx).run(), 10)
        await asyncio.sleep(0)
        return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}

    left = asyncio.run(go())
    assert not left, left
    assert sorted(closed) == ["docs", "web"]
    assert [m["type"] for m in sent] == [
        "http.response.start",
        "http.response.body",
        "http.response.body",
    ]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


# ---------------------------------------------------------------- linear, and counted


class Poison:
    """An item a member's acknowledgement holds that must never be read (hashing or comparing
    it fails the test)."""

    def __hash__(self) -> int:
        raise AssertionError("an item past MAX_ACK_ITEMS was read")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("an item past MAX_ACK_ITEMS was read")


def test_the_acknowledgement_is_a_lookup_per_uri_read_and_reads_a_bounded_number():
    route = fan_in_route([member("docs", []), member("web", [])])
    asked = ["docs+file:///a", "docs+file:///a", "web+file:///b", "docs+file:///c"]
    request = {
        "jsonrpc": "2.0",
        "id": "sub-3",
        "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": asked}},
    }
    ctx = RequestContext(modern=True, request_id="sub-3", rpc=Message(request))
    fan_in = FanIn(route, {}, None, None, ctx)  # type: ignore[arg-type]
    filters = fan_in._filters()
    assert filters == {
        "docs": {"resourceSubscriptions": ["file:///a", "file:///c"]},
        "web": {"resourceSubscriptions": ["file:///b"]},
    }
    # What each member was asked is a mapping (a lookup per URI it names), never a list.
    assert all(isinstance(v, dict) for v in fan_in._asked.values())
    made_up = [f"file:///made-up/{i}" for i in range(MAX_ACK_ITEMS - 2)]
    fan_in._acked = {
        "docs": {
            "notifications": {
                "resourceSubscriptions": [*made_up, "file:///c", {"not": "a uri"}, Poison()]
            }
        },
        "web": {"notifications": {"resourceSubscriptions": ["file:///b", "file:///z"]}},
    }
    # Only what the client asked and a member honours, as the client spelt it.
    assert fan_in.honoured() == {"resourceSubscriptions": ["docs+file:///c", "web+file:///b"]}


def test_a_notification_the_budget_has_no_room_for_ends_the_clients_stream_with_its_error():
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"d": "x" * 50_000}}

    async def loud(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for doc in (ACK, note):
            body = b"data: " + orjson.dumps(doc) + b"\n\n"
            await send({"type": "http.response.body", "body": body, "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass

    budget = AnswerBudget(100_000)
    assert budget.try_take(70_000)  # others hold most of it
    refused: list[int] = []
    route = fan_in_route([Member("docs", "r/docs", "http", loud)])
    route.budget, route.on_over_budget = budget, lambda: refused.append(1)
    request = {
        "jsonrpc": "2.0",
        "id": "sub-4",
        "method": "subscriptions/listen",
        "params": {"notifications": {"toolsListChanged": True}},
    }
    sent: list[Any] = []

    async def go() -> None:
        async def send(message: Any) -> None:
            sent.append(message)

        async def receive() -> Any:
            await asyncio.Event().wait()  # the client never leaves
            raise AssertionError

        ctx = RequestContext(modern=True, request_id="sub-4", rpc=Message(request))
        await asyncio.wait_for(FanIn(route, {"headers": []}, receive, send, ctx).run(), 10)

    asyncio.run(go())
    last = sent[-1]
    assert last["more_body"] is False
    (data,) = [line for line in last["body"].splitlines() if line.startswith(b"data:")]
    error = orjson.loads(data.removeprefix(b"data:"))
    assert error["id"] == "sub-4" and error["error"]["data"] == {"reason": "answer_budget"}
    assert refused == [1] and budget.in_use == 70_000
