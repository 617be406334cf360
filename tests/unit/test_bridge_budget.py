"""What the legacy bridge holds of an answer is counted in the process's answer budget (an SSE
event or a JSON body as it arrives, a local server's response), and the standalone stream of a
session: what it hands a call, and what it answers itself between calls."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy.http_session import AnswerOverBudget, EventStream
from mcp_edge.upstream.legacy.standalone import Standalone
from mcp_edge.upstream.stdio.process import CallStream, StdioInstance
from mcp_edge.upstream.stdio.spec import StdioSpec
from tests.unit.test_bridge_parts import _Response

MIB = 2**20


def result(request_id: str, size: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"text": "x" * size}}


def sse(message: dict[str, Any], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n".encode() if event_id else b""
    return head + b"data: " + orjson.dumps(message) + b"\n\n"


def pieces(data: bytes, size: int = 64 * 1024) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def test_an_sse_answer_is_counted_as_it_arrives_and_refused_past_the_budget():
    budget = AnswerBudget(2 * MIB)
    big = EventStream(
        _Response("text/event-stream", pieces(sse(result("a", 3 * MIB)))),  # type: ignore[arg-type]
        8 * MIB,
        Reservation(budget),
    )
    with pytest.raises(AnswerOverBudget):
        await big.next()
    assert budget.in_use <= 2 * MIB  # refused before it was held whole
    big.reservation.release()
    fits = EventStream(
        _Response("text/event-stream", pieces(sse(result("b", MIB)))),  # type: ignore[arg-type]
        8 * MIB,
        Reservation(budget),
    )
    item = await fits.next()
    assert item is not None and item[1]["id"] == "b"
    assert budget.in_use > MIB  # held until the bridge hands it on
    fits.reservation.release()
    assert budget.in_use == 0


async def test_a_json_answer_is_counted_as_it_arrives_and_a_small_one_not_at_all():
    budget = AnswerBudget(MIB)
    body = orjson.dumps(result("a", 2 * MIB))
    stream = EventStream(_Response("application/json", pieces(body)), 8 * MIB, Reservation(budget))  # type: ignore[arg-type]
    with pytest.raises(AnswerOverBudget):
        await stream.next()
    stream.reservation.release()
    small = EventStream(
        _Response("application/json", [orjson.dumps(result("b", 10))]),  # type: ignore[arg-type]
        8 * MIB,
        Reservation(budget),
    )
    assert (await small.next()) is not None and budget.in_use == 0  # under UNCOUNTED_BYTES


async def test_a_local_servers_response_that_does_not_fit_is_dropped_at_once():
    instance = StdioInstance("r", 0, StdioSpec(command=("true",)), Metrics())
    budget = AnswerBudget(MIB)
    for call_id, size, fits in (("big", 2 * MIB, False), ("ok", MIB // 2, True)):
        stream = CallStream(instance, call_id, None, Reservation(budget))
        instance.calls[call_id] = stream
        await instance._dispatch(result(call_id, size), size + 50)
        if fits:
            assert (await stream.next()) is not None and budget.in_use > UNCOUNTED_BYTES
        else:
            with pytest.raises(AnswerOverBudget):
                await stream.next()
        stream.reservation.release()
    assert budget.in_use == 0


class _Side:
    """A standalone stream: the messages a test puts in, as an EventStream gives them."""

    def __init__(self) -> None:
        self.items: asyncio.Queue[tuple[str | None, Any] | None] = asyncio.Queue()
        self.consumed_id: str | None = None
        self.before_last: str | None = None
        self.last_size = 0

    async def next(self) -> tuple[str | None, Any] | None:
        item = await self.items.get()
        self.before_last = self.consumed_id
        if item is not None and item[0] is not None:
            self.consumed_id = item[0]
        return item

    def close(self) -> None:
        pass


def ask(request_id: int, method: str = "roots/list") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_standalone_stream_answers_between_calls_and_hands_a_call_its_requests():
    side = _Side()
    posted: list[dict[str, Any]] = []

    async def post(message: dict[str, Any]) -> None:
        posted.append(message)

    answered: set[str] = set()
    standalone = Standalone(
        side,
        post=post,
        capabilities={"roots": {}},
        answered=answered,
        reservation=Reservation(None),
    )
    # No call in flight: answered at once, by the table (ping: empty; roots, declared: -32603).
    await side.items.put(("e1", ask(1, "ping")))
    await side.items.put(("e2", ask(2)))
    await settle()
    assert posted[0] == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert posted[1]["id"] == 2 and posted[1]["error"]["code"] == -32603
    # A call that may ask is in flight: handed to it, not answered; the resume point is before it.
    standalone.attach()
    await side.items.put(("e3", ask(3)))
    await side.items.put(("e4", ask(4)))
    await standalone.wait()
    await settle()
    assert standalone.resume_id == "e2" and standalone.handed == 2
    assert standalone.take() == ("e3", ask(3)) and standalone.resume_id == "e3"
    # The call ends: what it did not take is answered here; a replayed request never again.
    standalone.detach()
    await settle()
    assert [m["id"] for m in posted] == [1, 2, 4]
    await side.items.put(("e2", ask(2)))
    await settle()
    assert [m["id"] for m in posted] == [1, 2, 4]
    await side.items.put(None)
    await settle()
    assert standalone.ended
    standalone.close()


async def test_what_a_local_server_writes_for_a_call_waits_counted_and_past_the_budget_ends_it():
    """Log messages (and questions) for the call holding the process's lease wait in its queue
    while its client takes nothing: counted as they wait; one that does not fit ends the call
    with the budget's error (before: queued without a bound, uncounted)."""
    instance = StdioInstance("r", 0, StdioSpec(command=("true",)), Metrics())
    budget = AnswerBudget(MIB)
    stream = CallStream(instance, "c", None, Reservation(budget))
    instance.calls["c"] = stream
    instance.holder = stream
    note = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x" * 200_000}}
    for _ in range(4):
        await instance._dispatch(note, 200_050)
    assert budget.in_use == 4 * 200_050  # waiting, counted
    for _ in range(20):
        await instance._dispatch(note, 200_050)
    assert budget.in_use <= MIB
    for _ in range(5):
        assert (await stream.next()) == (None, note)
    with pytest.raises(AnswerOverBudget):
        await stream.next()
    stream.reservation.release()
    assert budget.in_use == 0


async def test_a_listen_stream_on_a_local_server_keeps_only_what_it_relays():
    instance = StdioInstance("r", 0, StdioSpec(command=("true",)), Metrics())
    listener = instance.listen()
    padded = {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "file:///a", "pad": "x" * MIB},
    }
    await instance._dispatch(padded, MIB + 100)
    assert (await listener.next()) == (
        None,
        {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "file:///a"},
        },
    )  # (before: the whole MiB, 256 of them per listener)


async def test_what_the_standalone_stream_hands_a_call_waits_counted():
    side = _Side()
    budget = AnswerBudget(MIB)

    async def post(message: dict[str, Any]) -> None:
        pass

    standalone = Standalone(
        side, post=post, capabilities={}, answered=set(), reservation=Reservation(budget)
    )
    standalone.attach()
    side.last_size = 300_000
    for i in range(3):
        await side.items.put((f"e{i}", ask(i, "sampling/createMessage")))
    await settle()
    assert standalone.handed == 3 and budget.in_use == 900_000  # (before: none counted)
    await side.items.put(("e3", ask(3, "sampling/createMessage")))  # no room for it
    await settle()
    assert standalone.ended and standalone.handed == 3
    assert standalone.take() is not None and budget.in_use == 600_000
    standalone.close()
    assert budget.in_use == 0


async def test_a_stream_closed_after_a_refusal_keeps_nothing_it_read():
    """What is done with a call once its answer was refused (its cancellation, posted in the
    background, may wait on a busy server) holds none of the answer (before: the part read so
    far stayed with the stream until then: 8 of 14 refused answers in bench.answer_rss --bridge)."""

    class Response(_Response):
        def close(self) -> None:
            pass

    budget = AnswerBudget(2 * MIB)
    stream = EventStream(
        Response("text/event-stream", pieces(sse(result("a", 3 * MIB)))),  # type: ignore[arg-type]
        8 * MIB,
        Reservation(budget),
    )
    with pytest.raises(AnswerOverBudget):
        await stream.next()
    stream.close()
    assert stream._splitter.pending == 0  # (the event's bytes read so far: given up)


async def test_a_forwarded_retrys_answer_is_collected_counted_and_refused_past_the_budget():
    from mcp_edge.upstream.legacy.writer import BufferWriter

    budget = AnswerBudget(MIB)
    reading, collected = (
        Reservation(budget, kind="forwarded"),
        Reservation(budget, kind="forwarded"),
    )
    fits = BufferWriter(5, reading, collected)
    await fits.encoded(orjson.dumps(result("a", MIB // 2)))
    assert budget.held["forwarded"] > MIB // 2  # collected, counted until the caller sends it
    assert orjson.loads(fits.reply()["body"])["id"] == "a"
    collected.release()
    big = BufferWriter(6, reading, collected)
    with pytest.raises(AnswerOverBudget):
        await big.encoded(orjson.dumps(result("b", 2 * MIB)))
    reply = big.reply()
    assert reply["status"] == 503 and ["Retry-After", "1"] in reply["headers"]
    assert orjson.loads(reply["body"]) == {
        "jsonrpc": "2.0",
        "id": 6,
        "error": {
            "code": -32603,
            "message": "The gateway is holding as many answers as it may; retry shortly",
            "data": {"reason": "answer_budget"},
        },
    }
    assert budget.in_use == 0
