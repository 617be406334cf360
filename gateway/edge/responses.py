"""The response side of the edge: find the final JSON-RPC response for the client's id, in a JSON
body or as an SSE event, and apply the MRTR rules to it (check, then seal). Everything else streams
through as bytes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.core import mrtr
from gateway.core.errors import INTERNAL_ERROR, RpcError
from gateway.core.sse import SSESplitter, encode_event
from gateway.edge.asgi import Message, Send, send_rpc_error
from gateway.observability.logs import event

#: Turns an InputRequiredResult into what the client gets: the same result with a sealed
#: ``requestState`` or an :class:`RpcError`. Supplied by the guard, which knows the request.
Sealer = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(slots=True)
class Outcome:
    """What happened to the final response, for metrics."""

    input_required: bool = False
    completed: bool = False
    error: RpcError | None = None


def _is_json(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() == b"application/json"


def _is_sse(content_type: bytes) -> bool:
    return content_type.split(b";", 1)[0].strip().lower() == b"text/event-stream"


def _may_be_response(data: str) -> bool:
    """Cheap pre-filter: only an event carrying a result or an error (or escaped keys) can be
    the final response; progress notifications are not parsed."""
    return '"result"' in data or '"error"' in data or "\\" in data


class ResponseInspector:
    """Wraps ``send`` for one request.

    ``mrtr_method``: the request is one of the three that may return input_required; its final
    response is always parsed. Otherwise responses are only scanned for the bytes
    ``input_required`` and parsed when they appear, to refuse an InputRequiredResult there.
    """

    def __init__(
        self,
        send: Send,
        *,
        request_id: Any,
        rpc_method: str,
        mrtr_method: bool,
        sealer: Sealer,
        max_inspect_bytes: int,
        on_violation: Callable[[str], None],
    ) -> None:
        self._send = send
        self._id = request_id
        self._method = rpc_method
        self._mrtr = mrtr_method
        self._sealer = sealer
        self._max = max_inspect_bytes
        self._on_violation = on_violation
        self._mode = "pass"  # pass | json | sse
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._splitter: SSESplitter | None = None
        self.outcome = Outcome()
        self.status: int | None = None

    async def __call__(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            await self._on_start(message)
        elif kind == "http.response.body":
            if self._mode == "json":
                await self._on_json_body(message)
            elif self._mode == "sse":
                await self._on_sse_body(message)
            elif self._mode == "drain":
                return  # the client already got an error; swallow the rest
            else:
                await self._send(message)
        else:
            await self._send(message)

    # ------------------------------------------------------------------ start

    async def _on_start(self, message: Message) -> None:
        self.status = message["status"]
        content_type = b""
        for k, v in message.get("headers", []):
            if k.lower() == b"content-type":
                content_type = v
                break
        if _is_json(content_type):
            self._mode = "json"
            self._start = message
            return
        if _is_sse(content_type):
            self._mode = "sse"
            self._splitter = SSESplitter(self._max)
        await self._send(message)

    # ------------------------------------------------------------------ JSON

    async def _on_json_body(self, message: Message) -> None:
        body = message.get("body", b"")
        if body:
            self._size += len(body)
            if self._size > self._max:
                error = RpcError(INTERNAL_ERROR, "Upstream response too large to inspect",
                                 {"reason": "upstream_response_too_large"}, status=502)  # fmt: skip
                self.outcome.error = error
                await send_rpc_error(self._send, error, self._id)
                self._mode = "drain"
                return
            self._chunks.append(body)
        if message.get("more_body", False):
            return
        whole = b"".join(self._chunks)
        self._chunks = []
        assert self._start is not None
        if not self._mrtr and b"input_required" not in whole:
            await self._send(self._start)
            await self._send({"type": "http.response.body", "body": whole})
            return
        replaced = self._rewrite(whole)
        if replaced is None:
            await self._send(self._start)
            await self._send({"type": "http.response.body", "body": whole})
            return
        status, new_body = replaced
        headers = [
            (k, v) for k, v in self._start.get("headers", []) if k.lower() != b"content-length"
        ]
        headers.append((b"content-length", str(len(new_body)).encode()))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": new_body})

    # ------------------------------------------------------------------ SSE

    async def _on_sse_body(self, message: Message) -> None:
        assert self._splitter is not None
        body = message.get("body", b"")
        more = message.get("more_body", False)
        out: list[bytes] = []
        try:
            events = self._splitter.feed(body) if body else []
        except ValueError:
            events = []
            out.append(self._error_event(RpcError(INTERNAL_ERROR, "Upstream SSE event too large",
                                                  {"reason": "upstream_response_too_large"})))  # fmt: skip
            self._mode = "drain"
            more = False
        for ev in events:
            if ev.data is not None and (
                "input_required" in ev.data or (self._mrtr and _may_be_response(ev.data))
            ):
                replaced = self._rewrite_event(ev.data)
                out.append(ev.raw if replaced is None else replaced)
            else:
                out.append(ev.raw)
        if not more:
            out.append(self._splitter.rest())
        chunk = b"".join(out)
        if chunk or not more:
            await self._send({"type": "http.response.body", "body": chunk, "more_body": more})

    def _error_event(self, error: RpcError) -> bytes:
        self.outcome.error = error
        return encode_event(error.body(self._id))

    def _rewrite_event(self, data: str) -> bytes | None:
        replaced = self._rewrite(data.encode())
        if replaced is None:
            return None
        return encode_event(replaced[1])

    # ------------------------------------------------------------------ rules

    def _rewrite(self, payload: bytes) -> tuple[int, bytes] | None:
        """Apply the rules to one JSON-RPC message; None when it passes unchanged."""
        try:
            doc = orjson.loads(payload)
        except orjson.JSONDecodeError:
            if self._mrtr:
                err = RpcError(INTERNAL_ERROR, "Upstream sent a response that is not valid JSON",
                               {"reason": "upstream_garbage"}, status=502)  # fmt: skip
                self.outcome.error = err
                return err.http_status, err.body(self._id)
            return None
        if not isinstance(doc, dict) or "id" not in doc or doc.get("id") != self._id:
            return None  # a notification, or not the response to our request
        result = doc.get("result")
        if not mrtr.is_input_required(result):
            if self._mrtr and isinstance(result, dict):
                self.outcome.completed = True
            return None
        if not self._mrtr:
            self._on_violation("input_required_on_method")
            event(logging.WARNING, "upstream returned input_required on a method that may not",
                  method=self._method)  # fmt: skip
            err = mrtr.wrong_method_violation(self._method)
            self.outcome.error = err
            return err.http_status, err.body(self._id)
        try:
            sealed = self._sealer(result)
        except RpcError as err:
            if err.code == INTERNAL_ERROR:
                kind = (err.data or {}).get("violation", "invalid") if isinstance(err.data, dict) else "invalid"
                self._on_violation(kind)
                event(logging.WARNING, "upstream InputRequiredResult refused", method=self._method,
                      violation=kind)  # fmt: skip
            self.outcome.error = err
            return err.http_status, err.body(self._id)
        self.outcome.input_required = True
        doc["result"] = sealed
        return 200, orjson.dumps(doc)
