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
"""

from __future__ import annotations

from typing import Any

from gateway.core import headers as h
from gateway.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from gateway.edge.asgi import Receive
from gateway.edge.deadline import Deadline


class BodyRefused(Exception):
    """The body was not (completely) read; ``error`` is the answer, None when nobody is left to
    answer (the client went away)."""

    def __init__(self, error: RpcError | None) -> None:
        super().__init__(error.message if error else "client disconnected")
        self.error = error


class BodyBudget:
    """Bytes of request bodies held by the requests in flight in this process."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.in_use = 0
        self.refused = 0

    def try_take(self, n: int) -> bool:
        if self.in_use + n > self.max_bytes:
            self.refused += 1
            return False
        self.in_use += n
        return True

    def give_back(self, n: int) -> None:
        self.in_use = max(0, self.in_use - n)


class Reservation:
    """What one request holds of the budget; released once, when the request is over."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: BodyBudget | None) -> None:
        self._budget = budget
        self.held = 0

    def take(self, n: int) -> bool:
        if self._budget is None or n <= 0:
            return True
        if not self._budget.try_take(n):
            return False
        self.held += n
        return True

    def release(self) -> None:
        if self._budget is not None and self.held:
            self._budget.give_back(self.held)
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
    try:
        with Deadline(timeout):
            return await _receive_all(receive, max_bytes, reservation, counted=expected is not None)
    except TimeoutError:
        raise BodyRefused(too_slow(timeout or 0)) from None


async def _receive_all(
    receive: Receive, max_bytes: int, reservation: Reservation, *, counted: bool
) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            raise BodyRefused(None)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_bytes:
            raise BodyRefused(too_large(max_bytes))
        if not counted and not reservation.take(len(chunk)):  # chunked: counted as it comes
            raise BodyRefused(over_budget())
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
