"""A routed call's answer on its way from the member to the client.

Relayed as the member's adapter sends it (JSON or SSE, streamed), except the final response for
the request's id, which is read only when it may need a change:

- an error the member's adapter made (it carries ``data.reason``: the member unreachable, timed
  out, its process exited...) gets ``data.member``, the member's configured name, and what the
  client asked for (``data.name``, the federated tool or prompt name, or ``data.uri``); it also marks
  the member down (any other answer marks it up: a member that answers again is used at once);
- a result whose URIs the member's prefix must be put on (``resources/read`` contents,
  ``tools/call`` and ``prompts/get`` resource links and embedded resources: only when the bytes
  hold ``"uri"``, never for the unprefixed member) is rewritten (mcp_edge.core.federation.rewrite).

A JSON body is held to be read only up to ``max_bytes`` (then relayed as it is), and what is
held (the JSON body, an SSE event being read) is counted against the process's answer budget
(``Reservation`` of kind ``member_answer``): when it has no room, the client gets 503 ``-32603``
``data.reason: answer_budget`` for its id (or that error as the last event of a stream begun).
What is handed on is given back as it is handed on, in the same step as the edge counts what it
holds of it (no byte is held twice, nor counted twice).

The bytes are only a pre-check: an answer is parsed when it may hold the final response
(``"result"`` or ``"error"``) and, on a member with a prefix, rewritten when it may hold a URI
(``"uri"``); a key written with a JSON escape (``"\\u0075ri"``) is the same key to a client, so
an answer with any ASCII letter written as an escape is read as "may hold" too
(mcp_edge.core.upstream_rules.may_name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import orjson

from mcp_edge.core.federation.names import Namespace
from mcp_edge.core.federation.parts import Dropped
from mcp_edge.core.federation.rewrite import (
    federate_call_result,
    federate_prompt_result,
    federate_read_result,
)
from mcp_edge.core.sse import SSESplitter, encode_event
from mcp_edge.core.upstream_rules import may_name
from mcp_edge.edge.asgi import Message, Send, send_rpc_error
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import RequestContext
from mcp_edge.edge.responses import GATEWAY_EVENT, ResponseFinished, over_budget
from mcp_edge.upstream.federation.reader import UNAVAILABLE_REASONS, gateway_reason
from mcp_edge.upstream.member import Member

_REWRITERS: Final = {
    "tools/call": federate_call_result,
    "prompts/get": federate_prompt_result,
    "resources/read": federate_read_result,
}


class CallAnswer:
    """The ``send`` a member's app answers a routed call through."""

    def __init__(
        self,
        send: Send,
        *,
        outer: RequestContext,
        inner: RequestContext,
        member: Member,
        namespace: Namespace,
        method: str,
        max_bytes: int,
        on_dropped: Callable[[list[Dropped]], None],
        reservation: Reservation,
        asked: tuple[str, str] | None = None,
        on_over_budget: Callable[[], None] | None = None,
    ) -> None:
        self.send = send
        self.asked = {asked[0]: asked[1]} if asked is not None else {}
        self.outer = outer
        self.inner = inner
        self.member = member
        self.namespace = namespace
        self.request_id = outer.request_id
        self.max_bytes = max_bytes
        self.on_dropped = on_dropped
        self.rewrite = _REWRITERS.get(method) if namespace.prefix(member.name) else None
        self._start: Message | None = None
        #: The JSON body's parts so far, and their size.
        self._parts: list[bytes] = []
        self._size = 0
        self._sse: SSESplitter | None = None
        self._passing = False
        self._seen = False
        self._reservation = reservation
        self._on_over_budget = on_over_budget
        self._refused = False

    @property
    def refused(self) -> bool:
        """The client got the budget's error (the member's answer was cut off)."""
        return self._refused

    def release(self) -> None:
        """What the answer held of the budget goes back (the call is over)."""
        self._reservation.release()

    def _hold(self, n: int) -> bool:
        return self._reservation.resize(n)

    async def _refuse(self) -> None:
        """The budget has no room for what the member's answer holds: the client's answer is the
        budget's error; the member's stream is closed (its next ``send`` raises)."""
        self._refused = True
        self._parts.clear()
        self._size = 0
        self.release()
        if self._on_over_budget is not None:
            self._on_over_budget()
        error = over_budget()
        if self._sse is not None:
            await self.send(
                {
                    "type": "http.response.body",
                    "body": encode_event(error.body(self.request_id)),
                    "more_body": False,
                    GATEWAY_EVENT: True,
                }
            )
        else:
            await send_rpc_error(self.send, error, self.request_id)
        raise ResponseFinished

    async def __call__(self, message: Message) -> None:
        if self._refused:
            raise ResponseFinished
        kind = message["type"]
        if kind == "http.response.start":
            # The endpoint that answered, before anything is sealed (the flow's affinity).
            self.outer.answered_by = self.inner.answered_by
            ctype = b""
            for k, v in message.get("headers", ()):
                if k.lower() == b"content-type":
                    ctype = v.split(b";", 1)[0].strip().lower()
            if ctype == b"text/event-stream":
                self._sse = SSESplitter(self.max_bytes)
                await self.send(message)
            elif ctype == b"application/json":
                self._start = message
            else:
                self._passing = True
                self._mark(None)
                await self.send(message)
            return
        if kind != "http.response.body":
            await self.send(message)
            return
        if self._passing:
            await self.send(message)
            return
        if self._sse is not None:
            await self._sse_body(message)
            return
        await self._json_body(message)

    # ------------------------------------------------------------ JSON

    async def _json_body(self, message: Message) -> None:
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if body:
            self._parts.append(body)
            self._size += len(body)
        if self._size > self.max_bytes:
            await self._flush_held(more)
            return
        if not self._hold(self._size):
            await self._refuse()
        if more:
            return
        parts, self._parts, self._size = self._parts, [], 0
        whole = parts[0] if len(parts) == 1 else b"".join(parts)
        del parts, body, message
        changed = self._changed(whole)
        start = self._start
        assert start is not None
        if changed is not None:
            whole = changed
            del changed
            headers = [
                (k, b"%d" % len(whole) if k.lower() == b"content-length" else v)
                for k, v in start.get("headers", ())
            ]
            start = {**start, "headers": headers}
        await self.send(start)
        # Given back as the edge takes it (in the same step: it counts what it holds of it).
        self.release()
        await self.send({"type": "http.response.body", "body": whole, "more_body": False})

    async def _flush_held(self, more: bool) -> None:
        """The body is over ``max_bytes``: relayed as it comes from here on (the edge counts
        what it holds of it)."""
        assert self._start is not None
        self._passing = True
        self._mark(None)
        await self.send(self._start)
        parts, self._parts, self._size = self._parts, [], 0
        self.release()
        held = parts[0] if len(parts) == 1 else b"".join(parts)
        del parts
        await self.send({"type": "http.response.body", "body": held, "more_body": more})

    # ------------------------------------------------------------ SSE

    async def _sse_body(self, message: Message) -> None:
        assert self._sse is not None
        more = message.get("more_body", False)
        body = message.get("body", b"")
        if body and not self._hold(self._sse.pending + len(body)):
            await self._refuse()
        try:
            events = self._sse.feed(body)
            if not more:
                events += self._sse.finish()
        except ValueError:  # an event over the bound: relayed as it is from here on
            self._passing = True
            await self.send({**message, "body": self._sse.rest() + message.get("body", b"")})
            return
        out: list[bytes] = []
        for ev in events:
            changed = self._changed(ev.data.encode() if ev.data else b"", sse=True)
            out.append(
                ev.raw if changed is None else b"event: message\r\ndata: " + changed + b"\r\n\r\n"
            )
        del events
        if not more:
            out.append(self._sse.rest())
        chunk = out[0] if len(out) == 1 else b"".join(out)
        del out
        # What is handed on is the edge's to count (from the same step on).
        self._hold(self._sse.pending)
        if chunk or not more:
            extra = {GATEWAY_EVENT: True} if message.get(GATEWAY_EVENT) else {}
            await self.send(
                {"type": "http.response.body", "body": chunk, "more_body": more, **extra}
            )

    # ------------------------------------------------------------ the final response

    def _changed(self, data: bytes, *, sse: bool = False) -> bytes | None:
        """The final response's new bytes, or None to relay it as it came."""
        if self._seen or not may_name(data, b'"result"', b'"error"'):
            return None
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            if not sse:
                self._mark(None)
            return None
        if type(doc) is not dict or doc.get("id") != self.request_id:
            return None
        self._seen = True
        if "error" in doc:
            reason = gateway_reason(doc)
            self._mark(reason)
            if reason is None:
                return None
            error = doc["error"]
            return orjson.dumps(
                {
                    **doc,
                    "error": {
                        **error,
                        "data": {**error["data"], "member": self.member.name, **self.asked},
                    },
                }
            )
        self._mark(None)
        if self.rewrite is None or not may_name(data, b'"uri"'):
            return None
        result, dropped = self.rewrite(self.namespace, self.member.name, doc.get("result"))
        if dropped:
            self.on_dropped(dropped)
        if result is doc.get("result"):
            return None
        return orjson.dumps({**doc, "result": result})

    def _mark(self, reason: str | None) -> None:
        if reason in UNAVAILABLE_REASONS:
            self.member.health.mark(False, reason)
        else:
            self.member.health.mark(True)
