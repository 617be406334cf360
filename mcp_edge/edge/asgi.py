"""ASGI types, and the one response writer: every ``http.response.start`` the gateway writes
itself (its own answers and errors, and the answers it relays or rewrites) goes through
:func:`start_response`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mcp_edge.core.errors import ERROR_CODE, RpcError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]

__all__ = [
    "ERROR_CODE",
    "SSE_HEADERS",
    "ASGIApp",
    "Headers",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "json_headers",
    "replay_body",
    "send_body",
    "send_empty",
    "send_json",
    "send_rpc_error",
    "send_text",
    "start_response",
]

_JSON = (b"content-type", b"application/json")
_LENGTH = b"content-length"
_EMPTY_LENGTH = (_LENGTH, b"0")
SSE_HEADERS: Headers = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


def json_headers(length: int, extra: Headers | None = None) -> Headers:
    headers = [_JSON, (_LENGTH, b"%d" % length)]
    if extra:
        headers.extend(extra)
    return headers


async def start_response(
    send: Send, status: int, headers: Headers, *, error_code: int | None = None
) -> None:
    """``http.response.start``. ``error_code``: the JSON-RPC error the body carries, when the
    gateway wrote it (read by the metrics, see :data:`ERROR_CODE`)."""
    message: Message = {"type": "http.response.start", "status": status, "headers": headers}
    if error_code is not None:
        message[ERROR_CODE] = error_code
    await send(message)


async def send_body(send: Send, body: bytes, *, more: bool = False) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": more})


async def send_json(send: Send, status: int, body: bytes, headers: Headers | None = None) -> None:
    """A whole JSON answer."""
    await start_response(send, status, json_headers(len(body), headers))
    await send({"type": "http.response.body", "body": body})


async def send_rpc_error(send: Send, error: RpcError, request_id: Any = None) -> None:
    """A JSON-RPC error for ``request_id``, with the HTTP status and headers the error says."""
    body = error.body(request_id)
    extra = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in error.headers.items()]
    await start_response(
        send, error.http_status, json_headers(len(body), extra), error_code=error.code
    )
    await send({"type": "http.response.body", "body": body})


async def send_empty(send: Send, status: int, headers: Headers | None = None) -> None:
    """An answer without a body."""
    await start_response(send, status, [_EMPTY_LENGTH, *(headers or [])])
    await send({"type": "http.response.body", "body": b""})


async def send_text(
    send: Send, status: int, body: bytes, content_type: bytes = b"text/plain; charset=utf-8"
) -> None:
    await start_response(
        send, status, [(b"content-type", content_type), (_LENGTH, b"%d" % len(body))]
    )
    await send({"type": "http.response.body", "body": body})


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
