"""Asking a member: a request derived from the client's, sent to the member's app, its answer
read back as JSON-RPC messages, bounded in size (``limits.max_inspect_bytes``) and in time (the
member's deadline).

A derived request is the client's (its principal, headers, client token and ``_meta``, client
capabilities included: the member sees the client, not the gateway) with its own body: a fresh
id, the method, the params for this member (its own cursor, its own names). ``Mcp-Method`` and
``Mcp-Name`` are set to match the body (the name in the ``=?base64?...?=`` form when it is not
printable ASCII, as mcp_edge.core.headers reads it).

The answer is read with the reader the edge uses (mcp_edge.core.response_reader): one JSON body,
one message per line, or events.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from mcp_edge.core.federation.parts import Missing, MissingReason
from mcp_edge.core.headers import HeaderIndex
from mcp_edge.core.jsonrpc import Message as RpcMessage
from mcp_edge.core.response_reader import End, Problem, Refused, ResponseReader, TooLarge
from mcp_edge.core.response_reader import Final as FinalResponse
from mcp_edge.core.response_reader import Message as ReadMessage
from mcp_edge.edge.asgi import ASGIApp, Message, Scope
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import SCOPE_KEY, RequestContext

#: Reasons of the gateway's own upstream errors that mean the member could not be reached.
UNAVAILABLE_REASONS: Final = frozenset(
    {
        "upstream_unreachable",
        "upstream_exited",
        "upstream_busy",
        "endpoint_gone",
        "upstream_broken_stream",
    }
)
TIMEOUT_REASONS: Final = frozenset({"upstream_timeout"})

_DROPPED: Final = frozenset({b"mcp-method", b"mcp-name", b"content-length"})
_ids = itertools.count(1)
_PREFIX: Final = os.urandom(4).hex()


def fresh_id() -> str:
    """An id of the gateway's own for a derived request (never one a client chose)."""
    return f"mcp-edge-{_PREFIX}-{next(_ids)}"


def header_value(value: str) -> bytes:
    """A header value as MCP headers carry it: printable ASCII as is, else ``=?base64?..?=``."""
    if value.isascii() and value.isprintable() and value == value.strip(" \t"):
        return value.encode("ascii")
    return b"=?base64?" + base64.b64encode(value.encode("utf-8")) + b"?="


def derive(
    scope: Scope,
    ctx: RequestContext,
    doc: dict[str, Any],
    *,
    mcp_name: str | None = None,
    keep_flow: bool = False,
) -> tuple[Scope, RequestContext]:
    """The scope and context of a request for a member: ``doc`` as its body, the client's
    headers with ``Mcp-Method``/``Mcp-Name`` to match. ``keep_flow``: the request IS the
    client's (a routed call): its MRTR flow fields (pinned endpoint, round) stay."""
    method = doc["method"]
    headers = [item for item in scope["headers"] if item[0] not in _DROPPED]
    headers.append((b"mcp-method", header_value(method)))
    if mcp_name is not None:
        headers.append((b"mcp-name", header_value(mcp_name)))
    body = orjson.dumps(doc)
    inner = dict(scope)
    inner["headers"] = headers
    inner["method"] = "POST"
    if keep_flow:
        derived = dataclasses.replace(
            ctx,
            headers=HeaderIndex(headers),
            body=body,
            rewritten_body=None,
            message=doc,
            rpc=RpcMessage(doc),
            rpc_method=method,
            answered_by=None,
        )
    else:
        derived = RequestContext(
            request_uid=ctx.request_uid,
            headers=HeaderIndex(headers),
            loop=ctx.loop,
            modern=True,
            body=body,
            parsed=True,
            message=doc,
            request_id=doc.get("id"),
            rpc=RpcMessage(doc),
            rpc_method=method,
            principal=ctx.principal,
            client_token=ctx.client_token,
        )
    inner[SCOPE_KEY] = derived
    return inner, derived


class Capture:
    """An ASGI ``send`` that reads an answer into JSON-RPC messages (``on_message``), with the
    edge's own reader (mcp_edge.core.response_reader, lenient: every message parsed, none
    refused but what no answer may carry), bounded: a message (a JSON body, a line or an event)
    over ``max_bytes`` ends the reading as ``too large``. An answer a client could not read
    (its framing refused, a line that is not JSON, a request on the stream) ends the reading
    with what came before it; anything that is not a JSON object is left out.

    ``deliver`` (instead of ``on_message``) is awaited for each message, inside the member's
    ``send``: the member is not read further until the message is delivered (backpressure).
    ``reservation``: what the reading holds (the message being read, and the one being
    delivered) is counted there; when the budget has no room the reading ends
    (``over_budget``)."""

    def __init__(
        self,
        on_message: Callable[[Any], None] | None,
        max_bytes: int,
        *,
        reservation: Reservation,
        deliver: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.on_message = on_message
        self.deliver = deliver
        self.max_bytes = max_bytes
        self.reservation = reservation
        self.status = 0
        self.ended = asyncio.Event()
        self.too_large = False
        self.over_budget = False
        self.started = False
        #: Bytes of the longest message read whole (a member's part, for the merged bound).
        self.size = 0
        # (The messages are the caller's to match: the reader's own id matching is not used.)
        self._reader = ResponseReader(None, max_bytes=max_bytes, strict=False)

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.started = True
            self.status = message["status"]
            if isinstance(self._reader.head(self.status, message.get("headers", ())), Refused):
                self._stop()
            return
        if kind != "http.response.body" or self.ended.is_set():
            return
        more = message.get("more_body", False)
        body = message.get("body", b"")
        reader = self._reader
        reservation = self.reservation
        if body:
            need = min(reader.pending + len(body), self.max_bytes + 1)
            if need > reservation.held and not reservation.resize(need):
                self.over_budget = True
                self._stop()
                return
        for ev in reader.feed(body, more):
            if isinstance(ev, (ReadMessage, FinalResponse)):
                if ev.doc is not None:
                    self.size = max(self.size, len(ev.raw))
                    if self.deliver is not None:
                        await self.deliver(ev.doc)
                    elif self.on_message is not None:
                        self.on_message(ev.doc)
            elif isinstance(ev, (End, Problem)):
                self._stop(too_large=isinstance(ev, TooLarge))
                return
            if self.ended.is_set():
                return
        if self.deliver is not None:
            reservation.resize(reader.pending)  # delivered: only what is still being read

    def _stop(self, *, too_large: bool = False) -> None:
        self.too_large = self.too_large or too_large
        self.ended.set()


async def _never_disconnects(closing: asyncio.Event) -> Message:
    await closing.wait()
    return {"type": "http.disconnect"}


@dataclass(slots=True)
class Reply:
    """A member's answer to a derived request: its response message, or why there is none."""

    response: dict[str, Any] | None = None
    missing: MissingReason | None = None
    #: The gateway's own error reason, when the member's adapter made the error.
    reason: str | None = None
    #: Bytes of the member's response as it sent them (its part's share of a merged answer).
    size: int = 0

    @property
    def result(self) -> dict[str, Any] | Missing:
        if self.missing is not None:
            return Missing(self.missing)
        assert self.response is not None
        result = self.response.get("result")
        return result if type(result) is dict else Missing("invalid")


def gateway_reason(response: dict[str, Any]) -> str | None:
    """The ``data.reason`` of an error response, if it has one (the gateway's adapters give
    every error they make one)."""
    error = response.get("error")
    data = error.get("data") if type(error) is dict else None
    reason = data.get("reason") if type(data) is dict else None
    return reason if type(reason) is str else None


def classify(response: dict[str, Any] | None, status: int, too_large: bool) -> Reply:
    if response is None:
        if too_large:
            return Reply(None, "too_large")
        return Reply(None, "unavailable" if status >= 500 or status == 0 else "invalid")
    if "error" in response:
        reason = gateway_reason(response)
        if reason in UNAVAILABLE_REASONS:
            return Reply(response, "unavailable", reason)
        if reason in TIMEOUT_REASONS:
            return Reply(response, "timeout", reason)
        return Reply(response, "error", reason)
    if type(response.get("result")) is not dict:
        return Reply(response, "invalid")
    return Reply(response)


async def ask(
    app: ASGIApp,
    scope: Scope,
    ctx: RequestContext,
    method: str,
    params: dict[str, Any],
    *,
    timeout: float,
    max_bytes: int,
    reservation: Reservation,
) -> Reply:
    """Send ``method`` with ``params`` to a member's app and read its response, within
    ``timeout`` seconds and ``max_bytes`` per message. ``reservation``: what the answer holds
    is counted there (the caller releases it once it is done with the reply);
    :class:`OverBudget` when the budget has no room for it."""
    request_id = fresh_id()
    inner, _ = derive(
        scope, ctx, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    )
    found: list[dict[str, Any]] = []

    def on_message(doc: Any) -> None:
        if not found and doc.get("id") == request_id and ("result" in doc or "error" in doc):
            found.append(doc)
            capture.ended.set()

    capture = Capture(on_message, max_bytes, reservation=reservation)
    closing = asyncio.Event()
    task = asyncio.ensure_future(app(inner, lambda: _never_disconnects(closing), capture))
    ended = asyncio.ensure_future(capture.ended.wait())
    try:
        done, _ = await asyncio.wait(
            {task, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if task in done and not found:
            with contextlib.suppress(asyncio.CancelledError):
                exc = task.exception()
                if exc is not None:
                    return Reply(None, "unavailable", type(exc).__name__)
        if not done:
            return Reply(None, "timeout")
    finally:
        ended.cancel()
        await _close(task, closing)
    if capture.over_budget:
        raise OverBudget
    reply = classify(found[0] if found else None, capture.status, capture.too_large)
    reply.size = capture.size
    return reply


class OverBudget(Exception):
    """The process's answer budget had no room for a member's answer."""


async def _close(task: asyncio.Future[Any], closing: asyncio.Event) -> None:
    """End a member request: the client's side goes away (the adapter cancels upstream), then,
    if it does not return within a moment, the task is cancelled."""
    if task.done():
        with contextlib.suppress(BaseException):
            task.exception()
        return
    closing.set()
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(asyncio.shield(task), 0.5)
    if not task.done():
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
