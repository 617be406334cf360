"""The response side of the edge: the final JSON-RPC response for the client's id, in a JSON body
or as an SSE event, gets the MRTR rules (check, then seal). Everything else streams through as
bytes. An ``application/json`` answer that turns out to be newline-delimited messages
(``mcp_edge.core.json_lines``) is relayed as SSE events, as they arrive, under the same rules.
The answer is read by :class:`mcp_edge.core.response_reader.ResponseReader` (framing, messages,
the final response, bounds); this module does the I/O: what the client gets, when, and the
memory it holds.

Upstreams are not trusted to frame their answers well (see ``mcp_edge.core.upstream_rules``): for a
2026-07-28 request, every way an answer can go wrong ends with a JSON-RPC error carrying the
request's id, within bounded memory (``max_inspect_bytes``) and, for the three MRTR methods,
bounded time (:func:`run_inspected`). Once the gateway has ended the client's response, the
inner app's next ``send`` raises :class:`ResponseFinished`, so the upstream stream is closed
instead of drained.

What is held to be inspected is held until the client has taken it, and counted against the
process's :class:`~mcp_edge.edge.body.AnswerBudget` (an answer of up to :data:`UNCOUNTED_BYTES`
is not: its memory is bounded by the connections a process keeps). An answer that would go
over gets 503 and ``-32603`` with ``data.reason: answer_budget`` (:func:`over_budget`), or that
error as the last event of a stream already begun. Large answers reach the client's transport
:data:`SLICE_BYTES` at a time, so the server's flow control makes the gateway wait for a client
that reads slowly instead of buffering its whole answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_edge.core import mrtr
from mcp_edge.core import upstream_rules as rules
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.response_reader import (
    End,
    Event,
    Filler,
    Final,
    Lines,
    Problem,
    Refused,
    ResponseReader,
)
from mcp_edge.core.response_reader import Message as ReadMessage
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    send_rpc_error,
    start_response,
)
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import get_context
from mcp_edge.edge.deadline import Deadline
from mcp_edge.observability.logs import event

#: Turns an InputRequiredResult into what the client gets: the same result with a sealed
#: ``requestState`` or an :class:`RpcError`. Supplied by the flow middleware, which knows the request.
Sealer = Callable[[dict[str, Any]], dict[str, Any]]

#: After the final SSE event of an MRTR method, how long the gateway waits for the upstream to end
#: the stream (SDK servers end it at once) before it sends the response on and closes the stream.
FINAL_EVENT_GRACE_SECONDS = 1.0

#: Set on a body message whose bytes the proxy itself wrote (the error event for a stream that
#: broke), so it is not taken for the upstream sending on after its final response.
GATEWAY_EVENT = "mcp_edge.gateway_event"


#: Largest piece of an answer handed to the client's transport at once. uvicorn waits for a
#: transport holding more than its high-water mark (64 KiB) to drain before the next send: a
#: large answer then waits for the client instead of sitting whole in the transport's buffer.
SLICE_BYTES = 64 * 1024
#: An answer held up to this size is not counted against the answer budget (so small answers
#: are never refused for it); past it, all it holds is.
UNCOUNTED_BYTES = SLICE_BYTES


def over_budget() -> RpcError:
    """The process holds as many answers as it may (``limits.max_inflight_answer_bytes``): like
    the request bodies' budget, 503 with ``Retry-After`` and the generic ``-32603`` (the
    spec's codes -32020..-32099 are its own, -32000..-32019 are not for new implementations)."""
    return RpcError(
        INTERNAL_ERROR,
        "The gateway is holding as many answers as it may; retry shortly",
        {"reason": "answer_budget"},
        status=503,
        headers={"Retry-After": "1"},
    )


class ResponseFinished(Exception):
    """The gateway already ended the client's response; the inner app should stop sending."""


@dataclass(slots=True)
class Outcome:
    """What happened to the final response, for metrics."""

    input_required: bool = False
    completed: bool = False
    error: RpcError | None = None
    #: The JSON-RPC error code the client got for this request, when the gateway read it.
    error_code: Any = None
    #: A complete ``tools/call`` result with ``isError: true``.
    tool_error: bool = False
    #: A ``tools/list`` response as it passed (the JSON text), for the metrics' tool names.
    listing: bytes | str | None = None


def _may_matter(data: str) -> bool:
    """An event of another method's stream is read only when it may say input_required or be
    a JSON-RPC request; the others pass unread."""
    return rules.may_say_input_required_str(data) or (
        rules.may_name_str(data, '"id"') and rules.may_name_str(data, '"method"')
    )


class ResponseInspector:
    """Wraps ``send`` for one 2026-07-28 request.

    ``mrtr_method``: the request is one of the three that may return input_required; its final
    response is always parsed, and held until the upstream ends the stream (nothing may follow
    it). Otherwise responses are only scanned for the bytes ``input_required`` and parsed when
    they appear, to refuse an InputRequiredResult there.
    """

    def __init__(
        self,
        send: Send,
        *,
        request_id: Any,
        rpc_method: str,
        mrtr_method: bool,
        sealer: Sealer | None,
        max_inspect_bytes: int,
        on_violation: Callable[[str], None],
        declared: dict[str, Any] | None = None,
        on_upstream_error: Callable[[str], None] | None = None,
        budget: AnswerBudget | None = None,
        on_over_budget: Callable[[], None] | None = None,
    ) -> None:
        self._send = send
        self._id = request_id
        self._method = rpc_method
        self._mrtr = mrtr_method
        self._listing = rpc_method == "tools/list"
        self._sealer = sealer
        self._max = max_inspect_bytes
        self._on_violation = on_violation
        self._on_upstream_error = on_upstream_error
        self._declared = declared or {}
        self._mode = "pass"  # pass | json | sse | lines (NDJSON, relayed as SSE)
        # Every message of an MRTR method's answer is read; another method's only when it may
        # matter (the JSON body or event may say input_required).
        self._reader = (
            ResponseReader(request_id, max_bytes=max_inspect_bytes)
            if mrtr_method
            else ResponseReader(
                request_id,
                max_bytes=max_inspect_bytes,
                strict=False,
                body_filter=rules.may_say_input_required,
                event_filter=_may_matter,
            )
        )
        self._start: Message | None = None
        self._started = False  # the client got http.response.start
        self._held: bytes | None = None  # the final SSE event of an MRTR method, sent last
        #: What this answer holds of the process's answer budget (released by :meth:`release`).
        self._budget = budget
        self._reservation: Reservation | None = None  # made when an answer is counted
        self._on_over_budget = on_over_budget
        #: Set by :func:`run_inspected`: the request's deadline, shortened once the final event
        #: is held.
        self.deadline: Deadline | None = None
        self.finished = False
        #: The inner app sent its response's start / its last body part; a send raised.
        self.app_started = self.app_ended = self.send_failed = False
        self.outcome = Outcome()
        self.status: int | None = None

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        # What the inner app sent, for mcp_edge.edge.last_resort (as its _Tracked keeps it).
        if kind == "http.response.start":
            self.app_started = True
        elif kind == "http.response.body" and not message.get("more_body", False):
            self.app_ended = True
        try:
            if self.finished:
                raise ResponseFinished
            if kind == "http.response.start":
                refused = self._on_start(message)
                if refused is not None:
                    await self._fail(refused)
                elif self._start is not message:  # a JSON answer's head waits for its body
                    await self._send(message)
                    self._started = True
            elif kind == "http.response.body":
                if self._mode == "json":
                    await self._on_json_body(message)
                elif self._mode == "sse" or self._mode == "lines":
                    await self._on_stream_body(message)
                else:
                    body = message.get("body", b"")
                    if len(body) > SLICE_BYTES:
                        await self._send_body(body, message.get("more_body", False))
                    else:
                        await self._send(message)
                    if not message.get("more_body", False):
                        self.finished = True
            else:
                await self._send(message)
        except BaseException:
            self.send_failed = True
            raise

    # ------------------------------------------------------------------ start

    def _on_start(self, message: Message) -> RpcError | None:
        """Take the answer's head: how its body is read (``_mode``), or why it is refused."""
        self.status = message["status"]
        head = self._reader.head(self.status or 0, message.get("headers", []))
        if isinstance(head, Refused):
            return head.error
        if head.body == "json":
            self._mode = "json"
            self._start = message
        elif head.body == "sse":
            self._mode = "sse"
        return None

    # ------------------------------------------------------------------ ending

    async def _fail(self, error: RpcError, *, kind: str | None = None) -> None:
        """End the client's response with ``error`` for the request's id."""
        self.outcome.error = error
        self.outcome.error_code = error.code
        self._held = None
        self.release()
        self._count(error, kind)
        if not self._started:
            await send_rpc_error(self._send, error, self._id)
        elif self._mode in ("sse", "lines"):
            await self._send(
                {
                    "type": "http.response.body",
                    "body": encode_event(error.body(self._id)),
                    "more_body": False,
                }
            )
        else:  # a body of another type has begun: no JSON-RPC message can be added to it
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        self._started = True
        self.finished = True

    # ------------------------------------------------------------------ memory

    def _hold(self, n: int) -> bool:
        """Count ``n`` bytes held for this answer in all (none while ``n`` is at most
        :data:`UNCOUNTED_BYTES`); False when the budget has no room for them."""
        reservation = self._reservation
        if reservation is None:
            if n <= UNCOUNTED_BYTES:
                return True
            reservation = self._reservation = Reservation(self._budget)
        return reservation.resize(n if n > UNCOUNTED_BYTES else 0)

    async def _refuse_over_budget(self) -> None:
        if self._on_over_budget is not None:
            self._on_over_budget()
        event(logging.WARNING, "answer refused: answer budget spent", method=self._method)
        await self._fail(over_budget())

    def release(self) -> None:
        """Give back what the answer held of the budget (the request is over)."""
        if self._reservation is not None:
            self._reservation.release()

    async def _send_body(self, body: bytes, more: bool) -> None:
        """``body`` to the client, at most :data:`SLICE_BYTES` per send (each send waits while
        the client's transport holds more than its high-water mark)."""
        end = len(body)
        if end <= SLICE_BYTES:
            await self._send({"type": "http.response.body", "body": body, "more_body": more})
            return
        for start in range(0, end, SLICE_BYTES):
            stop = start + SLICE_BYTES
            last = stop >= end
            await self._send(
                {
                    "type": "http.response.body",
                    "body": body[start:stop],
                    "more_body": more or not last,
                }
            )

    def _count(self, error: RpcError, kind: str | None) -> None:
        data = error.data if isinstance(error.data, dict) else {}
        if "violation" in data:
            self._on_violation(data["violation"])
            event(
                logging.WARNING,
                "upstream answer refused",
                method=self._method,
                violation=data["violation"],
            )
        elif str(data.get("reason", "")).startswith("upstream_"):
            if self._on_upstream_error is not None:
                self._on_upstream_error(kind or data["reason"].removeprefix("upstream_"))
            event(
                logging.WARNING,
                "upstream answer refused",
                method=self._method,
                reason=data["reason"],
            )
        elif error.code == INTERNAL_ERROR:  # the sealer's refusals (rounds, ...)
            self._on_violation("invalid")

    async def expire(self, seconds: float) -> None:
        """The request's deadline passed: send the held final response, or the timeout error."""
        if self.finished:
            return
        if self._held is not None:
            held, self._held = self._held, None
            await self._send_body(held, False)
            self.finished = True
            return
        await self._fail(rules.final_response_timeout(seconds), kind="final_response_timeout")

    # ------------------------------------------------------------------ JSON

    async def _on_json_body(self, message: Message) -> None:
        body = message.get("body", b"")
        more = message.get("more_body", False)
        reader = self._reader
        if body:
            size = reader.pending + len(body)
            # (Past max_inspect_bytes the reader refuses it as too large.)
            if UNCOUNTED_BYTES < size <= self._max and not self._hold(size):
                await self._refuse_over_budget()
                return
        events = reader.feed(body, more)
        if not events:
            return
        found = events[0]
        kind = type(found)
        if kind is not Final and kind is not ReadMessage:
            if kind is Lines:
                rest = list(events[1:])
                del events, found  # (the lines' own events are all that is kept of them)
                await self._to_lines(rest, more)
            else:
                assert isinstance(found, Problem)
                await self._fail(found.error)
            return
        # The whole body: the final response, or (another method's) a body passing unread.
        assert self._start is not None and isinstance(found, (Final, ReadMessage))
        whole = found.raw
        assert isinstance(whole, bytes)
        replaced: tuple[int, bytes] | None = None
        if kind is Final:
            assert isinstance(found, Final)
            try:
                if self._mrtr:
                    replaced = self._apply_final(found.doc, whole)
                    if replaced is None and found.claimed:
                        replaced = self.status or 200, orjson.dumps(found.doc)
                elif mrtr.is_input_required(found.doc.get("result")):
                    raise mrtr.wrong_method_violation(self._method)
            except RpcError as err:
                await self._fail(err)
                return
        # What was parsed is not needed to send the answer: from here only its JSON is held
        # (the one copy the budget counts), until the client has taken it.
        del events, found
        if replaced is not None:
            del whole
            status, new_body = replaced
            del replaced
            headers = [
                (k, v) for k, v in self._start.get("headers", []) if k.lower() != b"content-length"
            ]
            headers.append((b"content-length", str(len(new_body)).encode()))
            await start_response(self._send, status, headers)
            self._started = True
            await self._send_body(new_body, False)
            self.finished = True
            self.release()
            return
        # The answer passes as the upstream sent it.
        if self._listing:
            self.outcome.listing = whole
        await self._send(self._start)
        self._started = True
        if len(whole) > SLICE_BYTES:
            await self._send_body(whole, False)
            self.release()
        else:  # (no coroutine of its own for what is sent at once)
            await self._send({"type": "http.response.body", "body": whole})
        self.finished = True

    # ------------------------------------------------------------------ NDJSON

    async def _to_lines(self, events: list[Event], more: bool) -> None:
        """The JSON body is newline-delimited messages: relayed as SSE, one event per line,
        from the bytes held so far on (``events``: the reader's events after its
        :class:`Lines`)."""
        assert self._start is not None
        self._mode = "lines"
        drop = (b"content-type", b"content-length")
        headers = [(k, v) for k, v in self._start.get("headers", []) if k.lower() not in drop]
        headers.append((b"content-type", b"text/event-stream"))
        present = {k.lower() for k, _ in headers}
        headers += [
            (k, v)
            for k, v in ((b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no"))
            if k not in present
        ]
        await start_response(self._send, self.status or 200, headers)
        self._started = True
        if not self._hold(self._holding()):
            await self._refuse_over_budget()
            return
        out, error = self._gather(events)
        del events
        await self._relay(out, error, more)

    # ------------------------------------------------------------------ SSE

    async def _on_stream_body(self, message: Message) -> None:
        """A piece of an SSE stream (or of newline-delimited messages relayed as SSE)."""
        body = message.get("body", b"")
        more = message.get("more_body", False)
        events = self._reader.feed(body, more, own=message.get(GATEWAY_EVENT, False))
        if body and not self._hold(self._holding()):
            await self._refuse_over_budget()
            return
        out, error = self._gather(events)
        del events  # (what was parsed of them is not needed to send them on)
        await self._relay(out, error, more)

    def _gather(self, events: Sequence[Event]) -> tuple[list[bytes], RpcError | None]:
        """What the client gets of a stream's events: each as it came, a response for another
        id dropped, the final response of an MRTR method held until the stream ends (nothing
        may follow it); and the error that ends the stream after them, if one does (a problem,
        a refused final response)."""
        out: list[bytes] = []
        mrtr_method = self._mrtr
        for ev in events:
            if isinstance(ev, Filler):
                if self._held is None:  # (keep-alives after the final response: dropped)
                    out.append(ev.raw)
            elif isinstance(ev, Final):
                if self._listing and isinstance(ev.data, str) and '"result"' in ev.data:
                    self.outcome.listing = ev.data  # (checked to be the response when read)
                try:
                    if mrtr_method:
                        self._hold_final(ev)
                    elif mrtr.is_input_required(ev.doc.get("result")):
                        raise mrtr.wrong_method_violation(self._method)
                    else:
                        out.append(ev.raw)
                except RpcError as err:
                    return out, err
            elif isinstance(ev, End):
                if mrtr_method:
                    assert self._held is not None  # (else the reader ended early)
                    out.append(self._held)
                    self._held = None
                else:
                    out.append(ev.rest)
            elif isinstance(ev, Problem):
                return out, ev.error
            elif not isinstance(ev, Lines):  # a message
                if self._listing and isinstance(ev.data, str) and '"result"' in ev.data:
                    self.outcome.listing = ev.data
                # An MRTR method's response for another id is never the client's.
                if not (mrtr_method and ev.is_response):
                    out.append(ev.raw)
        return out, None

    async def _relay(self, out: list[bytes], error: RpcError | None, more: bool) -> None:
        """Send ``out`` (then ``error``, which ends the stream) to the client; what is sent is
        held, and counted, until the client has taken it."""
        if error is not None:
            await self._flush(out)
            await self._fail(error)
            return
        chunk = out[0] if len(out) == 1 else b"".join(out)
        del out
        if len(chunk) > SLICE_BYTES:
            if not self._hold(len(chunk) + self._holding()):
                await self._refuse_over_budget()
                return
            await self._send_body(chunk, more)
        elif chunk or not more:
            await self._send({"type": "http.response.body", "body": chunk, "more_body": more})
        del chunk
        if not more:
            self.finished = True
            self.release()
        elif not self._hold(self._holding()):  # the final event, now held
            await self._refuse_over_budget()

    def _holding(self) -> int:
        """Bytes a stream's answer holds: incomplete events (and lines), the final event."""
        n = len(self._held) if self._held is not None else 0
        return n + self._reader.pending

    async def _flush(self, out: list[bytes]) -> None:
        chunk = b"".join(out)
        if chunk:
            await self._send_body(chunk, True)

    def _hold_final(self, final: Final) -> None:
        """An MRTR method's final response: checked (and sealed), then held until the stream
        ends; raises RpcError to refuse it."""
        replaced = self._apply_final(final.doc, final.data)
        if replaced is not None:
            self._held = encode_event(replaced[1])
        else:
            self._held = encode_event(orjson.dumps(final.doc)) if final.claimed else final.raw
        self._shorten_deadline()

    def _shorten_deadline(self) -> None:
        if self.deadline is None:
            return
        when = asyncio.get_running_loop().time() + FINAL_EVENT_GRACE_SECONDS
        current = self.deadline.when()
        if current is None or when < current:
            self.deadline.reschedule(when)

    # ------------------------------------------------------------------ rules

    def _apply_final(self, doc: dict[str, Any], raw: bytes | str) -> tuple[int, bytes] | None:
        """The final response of an MRTR method, for this request's id: check it, seal an
        InputRequiredResult. None when it passes unchanged; raises RpcError to refuse it."""
        if rules.may_repeat_keys(raw) and rules.has_duplicate_keys(raw):
            raise rules.duplicate_keys()
        result = doc.get("result")
        if not isinstance(result, dict):
            error = doc.get("error")
            if isinstance(error, dict):
                self.outcome.error_code = error.get("code")
            return None
        kind = rules.result_kind(result, self._declared)
        if kind != mrtr.INPUT_REQUIRED:
            self.outcome.completed = True
            self.outcome.tool_error = result.get("isError") is True
            return None
        assert self._sealer is not None  # every MRTR method's inspector has one
        sealed = self._sealer(result)  # raises RpcError (-32603 violation, -32021)
        self.outcome.input_required = True
        doc["result"] = sealed
        return 200, orjson.dumps(doc)


async def run_inspected(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    inspector: ResponseInspector,
    timeout: float | None,
) -> None:
    """Call the inner app with the inspector as its ``send``, within ``timeout`` seconds (the
    bound on an MRTR method's final response; None for other methods). Past it, the inner app
    is cancelled (the proxy closes the upstream stream: a cancellation) and the client gets the
    held final response or a timeout error for its id."""
    try:
        if timeout:
            with Deadline(timeout, get_context(scope).loop) as deadline:
                inspector.deadline = deadline
                await app(scope, receive, inspector)
        else:
            await app(scope, receive, inspector)
    except TimeoutError:
        if inspector.deadline is None or not inspector.deadline.expired():
            raise
        await inspector.expire(timeout or 0)
    except Exception:
        # The client's response is complete (an error, or the final response); the inner app
        # failed on the send that followed it (ResponseFinished) or on the way out.
        if not inspector.finished:
            raise
    finally:
        inspector.release()
