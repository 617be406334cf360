"""Reading a request body: size, deadline, the in-flight budget, and a client that goes away."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mcp_edge.core.headers import HeaderIndex
from mcp_edge.edge.body import BodyBudget, BodyRefused, Reservation, read_body


def scope(content_length: int | None = None, expect: bool = False) -> dict[str, Any]:
    headers = []
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    if expect:
        headers.append((b"expect", b"100-continue"))
    return {"type": "http", "headers": headers}


def receiver(*messages: dict[str, Any], then_wait: bool = False):
    queue = list(messages)
    calls = {"n": 0}

    async def receive() -> dict[str, Any]:
        calls["n"] += 1
        if queue:
            return queue.pop(0)
        if then_wait:
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    receive.calls = calls  # type: ignore[attr-defined]
    return receive


def chunk(body: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def read(sc, rcv, *, max_bytes=100, timeout=None, budget=None):
    reservation = Reservation(budget)
    try:
        return await read_body(
            HeaderIndex(sc["headers"]),
            rcv,
            max_bytes=max_bytes,
            timeout=timeout,
            reservation=reservation,
        ), reservation
    except BodyRefused as refused:
        return refused, reservation


async def test_whole_body_in_chunks():
    body, _ = await read(scope(6), receiver(chunk(b"abc", True), chunk(b"def")))
    assert body == b"abcdef"


async def test_declared_too_large_is_refused_before_reading():
    rcv = receiver(chunk(b"x"))
    refused, _ = await read(scope(101), rcv)
    assert refused.error.http_status == 413 and rcv.calls["n"] == 0
    assert (
        "Connection" not in refused.error.headers
    )  # the rest is read and dropped; the connection stays
    refused, _ = await read(scope(101, expect=True), receiver())
    assert refused.error.headers == {"Connection": "close"}  # the client sends no body: close


async def test_chunked_body_over_the_limit_is_refused_as_it_comes():
    refused, _ = await read(scope(None), receiver(chunk(b"x" * 60, True), chunk(b"x" * 60)))
    assert refused.error.http_status == 413


async def test_a_client_gone_mid_body_sent_no_request():
    """Even when what arrived is a whole JSON document, it is not a request: nothing to forward."""
    refused, _ = await read(scope(50), receiver(chunk(b'{"jsonrpc":"2.0","id":1}', True)))
    assert isinstance(refused, BodyRefused) and refused.error is None


async def test_a_body_that_does_not_arrive_in_time():
    refused, _ = await read(scope(10), receiver(chunk(b"abc", True), then_wait=True), timeout=0.05)
    assert refused.error.http_status == 408 and refused.error.data == {"reason": "body_timeout"}
    assert refused.error.headers == {"Connection": "close"}


async def test_a_first_message_that_has_to_be_waited_for_is_still_read_in_time():
    """The body is not in hand yet: the first read waits, under the deadline."""

    async def late() -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return chunk(b"abc")

    body, _ = await read(scope(3), late, timeout=5)
    assert body == b"abc"

    async def never() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return chunk(b"abc")

    refused, _ = await read(scope(3), never, timeout=0.05)
    assert refused.error.http_status == 408


async def test_a_cancellation_while_the_first_message_is_awaited_stays_a_cancellation():
    started = asyncio.Event()

    async def waiting() -> dict[str, Any]:
        started.set()
        await asyncio.sleep(3600)
        return chunk(b"abc")

    task = asyncio.ensure_future(read(scope(3), waiting, timeout=5))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_body_in_hand_arms_no_deadline_and_one_to_wait_for_does():
    """Most bodies come with the head: no timer is armed for them (mcp_edge.edge.timers)."""
    from mcp_edge.edge.timers import wheel

    armed = wheel(asyncio.get_running_loop())._buckets
    seen: list[int] = []

    async def in_hand() -> dict[str, Any]:
        seen.append(len(armed))
        return chunk(b"abc")

    async def to_wait_for() -> dict[str, Any]:
        await asyncio.sleep(0)
        seen.append(sum(len(bucket) for bucket in armed.values()))
        return chunk(b"abc")

    assert (await read(scope(3), in_hand, timeout=30))[0] == b"abc"
    assert (await read(scope(3), to_wait_for, timeout=30))[0] == b"abc"
    assert seen == [0, 1] and not armed


async def test_a_receive_that_is_not_a_coroutine_is_awaited_as_it_is():
    loop = asyncio.get_running_loop()

    def receive() -> asyncio.Future[dict[str, Any]]:
        future = loop.create_future()
        loop.call_soon(future.set_result, chunk(b"abc"))
        return future

    body, _ = await read(scope(3), receive, timeout=5)
    assert body == b"abc"


async def test_budget_counts_declared_and_chunked_bodies_until_released():
    budget = BodyBudget(100)
    body, first = await read(scope(60), receiver(chunk(b"x" * 60)), budget=budget)
    assert body == b"x" * 60 and budget.in_use == 60
    refused, second = await read(scope(50), receiver(chunk(b"x" * 50)), budget=budget)
    assert refused.error.http_status == 503 and refused.error.headers["Retry-After"] == "1"
    assert refused.error.code == -32603 and refused.error.data == {"reason": "body_budget"}
    assert budget.in_use == 60 and budget.refused == 1
    second.release()
    assert budget.in_use == 60
    refused, third = await read(
        scope(None), receiver(chunk(b"x" * 30, True), chunk(b"x" * 30)), budget=budget
    )
    assert (
        refused.error.http_status == 503 and third.held == 30
    )  # what was taken stays until released
    third.release()
    first.release()
    first.release()  # once only
    assert budget.in_use == 0
    body, fourth = await read(scope(100), receiver(chunk(b"x" * 100)), budget=budget)
    assert body == b"x" * 100 and budget.in_use == 100
    fourth.release()


async def test_no_budget_means_no_accounting():
    body, reservation = await read(scope(5), receiver(chunk(b"hello")))
    assert body == b"hello" and reservation.held == 0


@pytest.mark.parametrize("declared", ["abc", "-1", "+5", ""])
async def test_odd_content_length_values_are_left_to_the_server(declared):
    """uvicorn refuses them before the app runs; here they only mean 'not declared'."""
    sc = {"type": "http", "headers": [(b"content-length", declared.encode())]}
    body, _ = await read(sc, receiver(chunk(b"ok")))
    assert body == b"ok"


def test_expect_is_answered_at_the_edge_not_forwarded():
    """The gateway has the whole body before it calls the upstream: an upstream that ignores
    Expect would otherwise keep the call waiting for a 100 Continue it never sends."""
    from mcp_edge.core.headers import upstream_request_headers

    out = upstream_request_headers(
        [(b"expect", b"100-continue"), (b"mcp-method", b"tools/list")], upstream_host="u:1"
    )
    assert (b"mcp-method", b"tools/list") in out and all(k != b"expect" for k, _ in out)
