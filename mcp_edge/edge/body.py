"""Reading a request body at the edge: bounded in size, in time, and in memory across requests.

* **size**: a body over ``max_bytes`` is refused (413) as soon as its ``Content-Length`` says so,
  before anything is read (so a client that sent ``Expect: 100-continue`` sends nothing);
* **time**: the whole body must arrive within ``timeout`` seconds of the first read (408), so a
  client trickling its body cannot hold a request open for ever;
* **memory**: every body being read or held by a request in flight is counted against one budget
  per process (:class:`BodyBudget`). A request whose body would not fit gets 503 with
  ``Retry-After`` instead of being read, so N concurrent large bodies cannot take N times their
  size of memory. The bytes stay counted until the request is over (the body is kept until the
  upstream has answered);
* **completeness**: a client that goes away before its body is complete has sent no request: the
  part that arrived is never forwarded, even when it happens to be valid JSON.

Answers have a budget of their own (:class:`AnswerBudget`), spent the same way by the response
side (mcp_edge.edge.responses) and by everything else that holds an answer's bytes for a caller:
one accounting (:data:`HELD_KINDS`, :class:`Reservation`), two pools (see docs/limits.md).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Final

from mcp_edge.core import headers as h
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from mcp_edge.edge.asgi import Receive
from mcp_edge.edge.deadline import Deadline


class BodyRefused(Exception):
    """The body was not (completely) read; ``error`` is the answer, None when nobody is left to
    answer (the client went away)."""

    def __init__(self, error: RpcError | None) -> None:
        super().__init__(error.message if error else "client disconnected")
        self.error = error


#: Everything that holds bytes for a caller, and the pool each draws from: the ``kind`` label of
#: ``mcp_edge_held_bytes`` (``pool`` is the other). A path that holds bytes for a caller takes
#: them with a :class:`Reservation` of its kind, so it is counted, shown and refused the same way.
HELD_KINDS: Final[dict[str, str]] = {
    "request_body": "body",  # a request's body, from Content-Length or as it arrives
    "answer": "answer",  # an upstream answer the edge inspects, until its client took it
    "member_answer": "answer",  # a routed call's answer read from a member (URIs rewritten)
    "member_part": "answer",  # a member's part of a fan-out (list, discover), until merged
    "fan_in": "answer",  # a member's notification on its way into a client's listen stream
    "bridge": "answer",  # what the legacy bridge holds of a 2025-era server's answer
    "forwarded": "answer",  # a forwarded retry's answer, on the replica holding the call and on
    # the one that forwarded it, until sent on
    "list_filter": "answer",  # a list answer read whole to filter it by the route's policy
    "cache_fill": "answer",  # an answer read to fill the edge cache
}


class BodyBudget:
    """Bytes of request bodies held by the requests in flight in this process (the ``body``
    pool). Counted per kind (:data:`HELD_KINDS`); ``on_change`` (when set) is told of every
    change, with the kind and what that kind now holds (a metric that cannot be read on
    demand)."""

    pool = "body"
    default_kind = "request_body"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.in_use = 0
        self.refused = 0
        #: What each kind holds now.
        self.held: dict[str, int] = dict.fromkeys(
            (k for k, pool in HELD_KINDS.items() if pool == self.pool), 0
        )
        self.on_change: Callable[[int], None] | None = None
        self.on_kind_change: Callable[[str, int], None] | None = None

    def try_take(self, n: int, kind: str | None = None) -> bool:
        if self.in_use + n > self.max_bytes:
            self.refused += 1
            return False
        self.in_use += n
        self._changed(kind or self.default_kind, n)
        return True

    def give_back(self, n: int, kind: str | None = None) -> None:
        n = min(n, self.in_use)
        self.in_use -= n
        self._changed(kind or self.default_kind, -n)

    def _changed(self, kind: str, delta: int) -> None:
        now = self.held[kind] = max(0, self.held.get(kind, 0) + delta)
        if self.on_change is not None:
            self.on_change(self.in_use)
        if self.on_kind_change is not None:
            self.on_kind_change(kind, now)


class AnswerBudget(BodyBudget):
    """Bytes of upstream answers held by the requests in flight in this process (the ``answer``
    pool): what the response side holds to inspect, until the client has taken it
    (mcp_edge.edge.responses), and every other kind of :data:`HELD_KINDS` in this pool (member
    answers and parts, fan-in notifications, the bridge's buffers, cache fills)."""

    pool = "answer"
    default_kind = "answer"


class Reservation:
    """What one request (or one path of it: ``kind``, one of :data:`HELD_KINDS`, by default the
    budget's own) holds of the budget; released once, when the request is over."""

    __slots__ = ("_budget", "held", "kind")

    def __init__(self, budget: BodyBudget | None, *, kind: str | None = None) -> None:
        self._budget = budget
        self.held = 0
        if kind is not None and kind not in HELD_KINDS:
            raise ValueError(f"unknown kind of held bytes: {kind!r}")
        self.kind = kind

    def take(self, n: int) -> bool:
        if self._budget is None or n <= 0:
            return True
        if not self._budget.try_take(n, self.kind):
            return False
        self.held += n
        return True

    def resize(self, n: int) -> bool:
        """Hold ``n`` bytes in all: more are taken (False, and nothing taken, when the budget has
        no room for them), fewer given back."""
        if self._budget is None or n == self.held:
            return True
        if n > self.held:
            return self.take(n - self.held)
        self._budget.give_back(self.held - n, self.kind)
        self.held = n
        return True

    def release(self) -> None:
        if self._budget is not None and self.held:
            self._budget.give_back(self.held, self.kind)
            self.held = 0


#: Refused before the body was read, from a client waiting for ``100 Continue``: it will send
#: no body, so the connection cannot carry another request (the server would read it as this
#: one's body). Without the expectation the server reads the rest and drops it, and the
#: connection stays usable.
_CLOSE = {"Connection": "close"}


def too_large(max_bytes: int, *, close: bool = False) -> RpcError:
    return RpcError(
        INVALID_REQUEST,
        f"Request body exceeds {max_bytes} bytes",
        status=413,
        headers=dict(_CLOSE) if close else {},
    )


def too_slow(timeout: float) -> RpcError:
    return RpcError(
        INVALID_REQUEST,
        f"Request body not received within {timeout:g} s",
        {"reason": "body_timeout"},
        status=408,
        headers={"Connection": "close"},
    )


def over_budget(*, close: bool = False) -> RpcError:
    return RpcError(
        INTERNAL_ERROR,
        "The gateway is holding as many request bodies as it may; retry shortly",
        {"reason": "body_budget"},
        status=503,
        headers={"Retry-After": "1", **(_CLOSE if close else {})},
    )


async def read_body(
    headers: h.HeaderIndex,
    receive: Receive,
    *,
    max_bytes: int,
    timeout: float | None,
    reservation: Reservation,
) -> bytes:
    """The whole body, or :class:`BodyRefused`. What it takes of the budget stays in
    ``reservation`` (the caller releases it when the request is over, refused or not)."""
    declared = headers.get(b"content-length")
    expected = int(declared) if declared is not None and declared.isdigit() else None
    if expected is not None:
        waiting = (headers.get(b"expect") or "").lower() == "100-continue"
        if expected > max_bytes:
            raise BodyRefused(too_large(max_bytes, close=waiting))
        if not reservation.take(expected):
            raise BodyRefused(over_budget(close=waiting))
    body = _Body(max_bytes, reservation, counted=expected is not None)
    # Most bodies came with the head and are in hand already: the deadline is armed only when
    # the body has to be waited for (in the same turn of the loop, so it still runs from the
    # first read).
    message, rest = _unless_it_waits(receive())
    if rest is None and body.add(message):
        return body.value()
    try:
        with Deadline(timeout):
            if rest is not None and body.add(await rest):
                return body.value()
            while not body.add(await receive()):
                pass
            return body.value()
    except TimeoutError:
        raise BodyRefused(too_slow(timeout or 0)) from None


class _Body:
    """The body's parts as they arrive, within its bounds."""

    __slots__ = ("chunks", "counted", "max_bytes", "reservation", "size")

    def __init__(self, max_bytes: int, reservation: Reservation, *, counted: bool) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.max_bytes = max_bytes
        self.reservation = reservation
        self.counted = counted

    def add(self, message: Any) -> bool:
        """Take one ``receive`` message; True once the body is complete."""
        if message["type"] == "http.disconnect":
            raise BodyRefused(None)
        chunk = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise BodyRefused(too_large(self.max_bytes))
        if not self.counted and not self.reservation.take(len(chunk)):  # chunked: as it comes
            raise BodyRefused(over_budget())
        self.chunks.append(chunk)
        return not message.get("more_body", False)

    def value(self) -> bytes:
        return b"".join(self.chunks)


def _unless_it_waits(awaitable: Awaitable[Any]) -> tuple[Any, Awaitable[Any] | None]:
    """Run ``awaitable`` until it completes or has to wait: ``(result, None)`` when it completed
    without waiting, else ``(None, the rest of it)`` to be awaited (in the same task)."""
    if type(awaitable) is not types.CoroutineType:  # another kind of awaitable: awaited as it is
        return None, awaitable
    try:
        pending = awaitable.send(None)
    except StopIteration as done:
        return done.value, None
    return None, _resume(awaitable, pending)


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], pending: Any) -> Generator[Any, Any, Any]:
    """The rest of ``coro``, which is waiting on ``pending``: what the task sends or throws in
    (a cancellation) goes on to it, as ``await`` would."""
    while True:
        try:
            sent = yield pending
        except BaseException as exc:
            try:
                pending = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                pending = coro.send(sent)
            except StopIteration as done:
                return done.value
