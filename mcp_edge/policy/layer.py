"""List results filtered to what the caller may use, and tool definition pinning, as a small ASGI
layer between a route's edge middlewares and the rest of its layers (so a result the edge cache answers
is filtered for each caller too).

Installed only on routes with a policy. Requests of other methods pass straight through; the
answers of ``tools/list``, ``prompts/list``, ``resources/list`` and ``resources/templates/list``
(a JSON body, the SSE event or the line of newline-delimited messages with the response for the
request's id, read by :class:`mcp_edge.core.response_reader.ResponseReader`) are parsed, filtered,
marked ``cacheScope: "private"`` (what the caller sees now depends on who it is) and sent on;
every response on the answer is, whatever its id. An answer this layer cannot read on (too
large, a request on the stream, a message that may be the response but is not JSON to its
parser) ends with an error: nothing passes unfiltered. Everything else of the answer passes as
it came: the response inspector outside this layer judges it.

What the layer holds of a list answer (the JSON body or the event being read, then the response
while it is filtered, which may wait on the pin store) is counted in the process's answer budget
as kind ``list_filter``; when it has no room, the client gets 503 ``answer_budget`` (or that
error as the last event of a stream begun), and the rest of the answer is not read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping
from typing import Any

import orjson

from mcp_edge.auth.base import Principal
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.response_reader import (
    End,
    Filler,
    Final,
    Lines,
    Malformed,
    Message,
    Problem,
    Refused,
    ResponseReader,
)
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import get_context
from mcp_edge.edge.responses import UNCOUNTED_BYTES, over_budget
from mcp_edge.observability.logs import event
from mcp_edge.policy.hook import RoutePolicy
from mcp_edge.policy.pins import PinStoreUnavailable
from mcp_edge.policy.rules import LIST_METHODS

#: Largest list answer the layer holds to filter; a larger one is refused (never passed unfiltered).
MAX_LIST_BYTES = 16 * 1024 * 1024


def _may_be_a_result(data: str) -> bool:
    """An event that may be the list's response is parsed (and filtered). A name written with
    escapes (``"\\u0072esult"``) is the same name to a client: such an event is parsed too."""
    return '"result"' in data or "\\u" in data


def _body_may_be_a_result(body: bytes) -> bool:
    return b'"result"' in body or b"\\u" in body


class PolicyListLayer:
    def __init__(
        self,
        app: ASGIApp,
        policy: RoutePolicy,
        *,
        max_bytes: int = MAX_LIST_BYTES,
        budget: AnswerBudget | None = None,
        on_over_budget: Callable[[], None] | None = None,
    ) -> None:
        self.app = app
        self.policy = policy
        self.max_bytes = max_bytes
        #: The process's answer pool (kind ``list_filter``); ``on_over_budget`` counts a refusal.
        self.budget = budget
        self.on_over_budget = on_over_budget
        self.filters = policy.config.has_rules

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        method = ctx.rpc_method
        if (
            scope["type"] != "http"
            or not ctx.modern
            or method not in LIST_METHODS
            or ctx.request_id is None
        ):
            await self.app(scope, receive, send)
            return
        if method != "tools/list" and not self.filters:
            await self.app(scope, receive, send)  # pinning only: nothing to do for other lists
            return
        held = Reservation(self.budget, kind="list_filter")
        try:
            await self.app(
                scope, receive, _Filtering(send, self, method, ctx.principal, ctx.request_id, held)
            )
        finally:
            held.release()

    async def rewrite(
        self, method: str, principal: Principal | None, doc: dict[str, Any]
    ) -> bytes | None:
        """The filtered message, or None when it passes unchanged."""
        result = doc.get("result")
        if not isinstance(result, dict) or result.get("resultType", "complete") != "complete":
            return None
        removed = 0
        if method == "tools/list" and self.policy.pins is not None:
            removed += await self._pin_filter(result)
        if self.filters:
            grants = await self.policy.grants_for(principal, method, result)
            hidden = self.policy.rules.filter_result(principal, method, result, grants)
            if hidden:
                self.policy.metrics.list_hidden.labels(self.policy.route, method, "policy").inc(
                    hidden
                )
            removed += hidden
            # What the caller sees depends on who it is: no shared cache may hand it to another.
            result["cacheScope"] = "private"
        elif not removed:
            return None
        return orjson.dumps(doc)

    async def _pin_filter(self, result: dict[str, Any]) -> int:
        pins = self.policy.pins
        assert pins is not None
        tools = result.get("tools")
        if not isinstance(tools, list):
            return 0
        observed: dict[str, str] = {}
        for tool in tools:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                observed[tool["name"]] = pins.digest(
                    orjson.dumps(tool, option=orjson.OPT_SORT_KEYS), tool
                )
        try:
            changed = await pins.changed(observed)
        except PinStoreUnavailable:
            self.policy.metrics.store_unavailable.labels(self.policy.route).inc()
            return 0
        if not changed:
            return 0
        route = self.policy.route
        for name in sorted(changed):
            self.policy.metrics.pin_changes.labels(route).inc()
            if self.policy._log_once(f"pin:{name}:{observed[name]}"):
                event(
                    logging.WARNING,
                    "tool definition changed; hidden until accepted",
                    route=route,
                    tool=name,
                    digest=observed[name],
                )
        result["tools"] = [
            t for t in tools if not (isinstance(t, dict) and t.get("name") in changed)
        ]
        self.policy.metrics.list_hidden.labels(route, "tools/list", "pinned").inc(len(changed))
        return len(changed)


class _Filtering:
    """Wraps ``send`` for one list request."""

    def __init__(
        self,
        send: Send,
        layer: PolicyListLayer,
        method: str,
        principal: Principal | None,
        request_id: Any,
        reservation: Reservation,
    ) -> None:
        self.send = send
        self.reservation = reservation
        self.layer = layer
        self.method = method
        self.principal = principal
        self.request_id = request_id
        self.mode = "pass"  # pass | json | sse | lines | drain
        self.start: MutableMapping[str, Any] | None = None
        # Lenient: this layer refuses nothing but what it cannot hold; the inspector judges.
        self.reader = ResponseReader(
            request_id,
            max_bytes=layer.max_bytes,
            strict=False,
            body_filter=_body_may_be_a_result,
            event_filter=_may_be_a_result,
        )

    async def __call__(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            head = self.reader.head(message["status"], message.get("headers", []))
            if isinstance(head, Refused) or head.body == "other":
                pass  # not read here (the inspector refuses what it must)
            elif head.body == "json":
                self.mode, self.start = "json", message
                return
            else:
                self.mode = "sse"
            await self.send(message)
            return
        if kind != "http.response.body" or self.mode == "pass":
            await self.send(message)
            return
        if self.mode == "drain":
            return
        more = message.get("more_body", False)
        body = message.get("body", b"")
        # Held while read and filtered: what the reader holds and this piece (the response it
        # completes is filtered before anything else is read).
        if body and not self._hold(self.reader.pending + len(body)):
            await self._over_budget()
            return
        out: list[bytes] = []
        for ev in self.reader.feed(body, more):
            if isinstance(ev, (Final, Message)):
                new = await self._filtered(ev.doc)
                if self.mode == "json":
                    await self._send_json(ev.raw, new)
                    return
                if self.mode == "sse":
                    out.append(ev.raw if new is None else encode_event(new))
                else:  # a line (its JSON text: the line, or the line written again)
                    data = ev.data
                    line = (
                        new if new is not None else data.encode() if isinstance(data, str) else data
                    )
                    out.append(line + b"\n")
            elif isinstance(ev, Filler):
                out.append(ev.raw)
            elif isinstance(ev, End):
                out.append(ev.rest)
            elif isinstance(ev, Lines):
                await self._start_lines()
            elif isinstance(ev, Problem):
                # Too large to filter, or no answer a client may read on (a request on the
                # stream, a line that is not JSON): what follows is never passed unfiltered.
                await self._refuse(out, ev.error if isinstance(ev, Malformed) else None)
                return
        chunk = b"".join(out)
        del out
        self._hold(self.reader.pending)  # (what is sent on is the edge's to count)
        if chunk or not more:
            await self.send({"type": "http.response.body", "body": chunk, "more_body": more})

    def _hold(self, n: int) -> bool:
        return self.reservation.resize(n if n > UNCOUNTED_BYTES else 0)

    async def _over_budget(self) -> None:
        """The budget has no room for the list answer: the client gets its error."""
        self.reservation.release()
        if self.layer.on_over_budget is not None:
            self.layer.on_over_budget()
        event(logging.WARNING, "list refused: answer budget spent", method=self.method)
        await self._refuse([], over_budget())

    async def _filtered(self, doc: dict[str, Any] | None) -> bytes | None:
        """The filtered message, or None when it passes unchanged. Every response on the
        list's answer is filtered, whatever its id: a client may take one whose id only looks
        like the request's (``"1"`` for ``1``) for its answer."""
        if doc is None or "result" not in doc:
            return None
        return await self.layer.rewrite(self.method, self.principal, doc)

    async def _send_json(self, whole: bytes, new: bytes | None) -> None:
        assert self.start is not None
        self.reservation.release()  # (handed on: the edge counts what it holds of it)
        if new is None:
            await self.send(self.start)
            await self.send({"type": "http.response.body", "body": whole})
            return
        headers = [
            (k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(new)).encode()))
        await self.send({**self.start, "headers": headers})
        await self.send({"type": "http.response.body", "body": new})

    async def _start_lines(self) -> None:
        """A JSON body of newline-delimited messages: passed on line by line (the response's
        line filtered), under its own head without a length."""
        assert self.start is not None
        self.mode = "lines"
        headers = [
            (k, v) for k, v in self.start.get("headers", []) if k.lower() != b"content-length"
        ]
        await self.send({**self.start, "headers": headers})

    async def _refuse(self, out: list[bytes], err: RpcError | None = None) -> None:
        if err is None:
            err = RpcError(
                INTERNAL_ERROR,
                "List result too large to filter",
                {"reason": "upstream_response_too_large"},
                status=502,
            )
        if self.mode == "json":
            await send_rpc_error(self.send, err, self.request_id)
        else:  # the answer has begun: its last message is the error
            last = err.body(self.request_id)
            out.append(encode_event(last) if self.mode == "sse" else last + b"\n")
            await self.send(
                {"type": "http.response.body", "body": b"".join(out), "more_body": False}
            )
        self.mode = "drain"
