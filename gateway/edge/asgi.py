"""Small ASGI helpers for answering without an upstream."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway.core.errors import RpcError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    all_headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode())]
    if headers:
        all_headers.extend(headers)
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


#: Key of the JSON-RPC error code on the ``http.response.start`` of an error the gateway wrote
#: itself (servers ignore keys they do not know), read by the guard for its metrics.
ERROR_CODE = "mcp_edge.error_code"


async def send_rpc_error(send: Send, error: RpcError, request_id: Any = None) -> None:
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    body = error.body(request_id)
    headers = [*JSON_HEADERS, (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers,
                ERROR_CODE: error.code})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


async def send_plain_json(send: Send, status: int, doc: Any) -> None:
    await send_json(send, status, orjson.dumps(doc))


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` once, then defers to the real one (disconnects)."""
    sent = False

    async def _receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return _receive


async def read_body(receive: Receive, *, limit: int | None = None) -> bytes | None:
    """The whole request body; None if the client went away first, or it grew past ``limit``."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)

