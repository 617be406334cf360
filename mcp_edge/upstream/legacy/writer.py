"""The answer to one client request as the bridge writes it: JSON, or SSE once a notification
must be relayed (:class:`Writer`); collected instead of sent for a retry another replica
forwarded (:class:`BufferWriter`), counted as it is collected."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import orjson

from mcp_edge.core.errors import RpcError
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import SSE_HEADERS, Send, json_headers, start_response
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.responses import UNCOUNTED_BYTES, over_budget
from mcp_edge.upstream.legacy.errors import AnswerOverBudget


class Writer:
    """The answer to one client request: JSON, or SSE once a notification must be relayed."""

    def __init__(self, send: Send, request_id: Any, reservation: Reservation) -> None:
        self._send = send
        self.request_id = request_id
        self._sse = False
        self.done = False
        #: What the bridge holds of the answer: given back as the answer is handed on (the edge
        #: then counts what it holds of it), so no byte is counted twice.
        self.reservation = reservation

    async def notify(self, message: dict[str, Any]) -> None:
        if self.done:
            return
        if not self._sse:
            self._sse = True
            await start_response(self._send, 200, list(SSE_HEADERS))
        await self._send(
            {
                "type": "http.response.body",
                "body": encode_event(orjson.dumps(message)),
                "more_body": True,
            }
        )

    async def message(
        self, message: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        await self.encoded(orjson.dumps(message), status, headers)

    async def encoded(
        self, body: bytes, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """The response, already JSON (so that nothing else of a large answer is held while
        the client takes it)."""
        if self.done:
            return
        self.done = True
        self.reservation.release()
        if self._sse:
            await self._send(
                {"type": "http.response.body", "body": encode_event(body), "more_body": False}
            )
            return
        extra = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()
        ]
        await start_response(self._send, status, json_headers(len(body), extra))
        await self._send({"type": "http.response.body", "body": body})

    async def result(self, result: dict[str, Any]) -> None:
        await self.message({"jsonrpc": "2.0", "id": self.request_id, "result": result})

    def encode_result(self, result: dict[str, Any]) -> bytes:
        return orjson.dumps({"jsonrpc": "2.0", "id": self.request_id, "result": result})

    async def comment(self) -> None:
        """An SSE comment: keeps a quiet stream's connection alive."""
        if not self.done and self._sse:
            await self._send(
                {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
            )

    async def abort(self) -> None:
        """End an SSE answer without a response: an abrupt close (the client may ask again)."""
        if self.done:
            return
        self.done = True
        if self._sse:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def error(self, err: RpcError) -> None:
        await self.message(err.to_response(self.request_id), err.http_status, err.headers)

    async def raw(
        self,
        status: int,
        content_type: str,
        body: bytes,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        """A whole answer made elsewhere (by the replica holding a parked call)."""
        if self.done:
            return
        self.done = True
        if self._sse:  # notifications already went out: the answer's events follow them
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await start_response(
            self._send,
            status,
            [
                (b"content-type", content_type.encode("latin-1")),
                (b"content-length", b"%d" % len(body)),
                *(headers or ()),
            ],
        )
        await self._send({"type": "http.response.body", "body": body})


class BufferWriter(Writer):
    """Collects an answer instead of sending it (a forwarded retry, answered to the forwarder).

    ``reservation`` counts what the bridge holds of the upstream's answer while it reads it (as
    for any request); ``collected`` what is collected here, past the first ``UNCOUNTED_BYTES``,
    until the caller has sent it on (it keeps ``collected``). What would go over the answer
    budget is not collected: the reply is then the budget's error for the request's id."""

    def __init__(self, request_id: Any, reservation: Reservation, collected: Reservation) -> None:
        self.parts: list[bytes] = []
        self.size = 0
        self.status = 200
        self.content_type = "application/json"
        self.collected = collected
        self.refused = False
        super().__init__(self._collect, request_id, reservation)

    async def _collect(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            for k, v in message["headers"]:
                if k == b"content-type":
                    self.content_type = v.decode("latin-1")
            return
        if self.refused:
            return  # (the error written after the refusal: the reply says it already)
        body = message.get("body", b"")
        size = self.size + len(body)
        if not self.collected.resize(size if size > UNCOUNTED_BYTES else 0):
            self.refused = True
            self.parts.clear()
            self.size = 0
            self.collected.release()
            raise AnswerOverBudget
        self.size = size
        self.parts.append(body)

    def reply(self) -> dict[str, Any]:
        """What was collected, as the forwarder gets it (the parts are given up)."""
        if self.refused:
            error = over_budget()
            return {
                "status": error.http_status,
                "ctype": "application/json",
                "body": error.body(self.request_id).decode(),
                "headers": [[k, v] for k, v in error.headers.items()],
            }
        parts, self.parts = self.parts, []
        body = parts[0] if len(parts) == 1 else b"".join(parts)
        del parts
        return {"status": self.status, "ctype": self.content_type, "body": body.decode()}
