"""Per-route switches for clients that need the gateway to bend the spec a little.

``missing_capability_status``: the spec sends ``-32021`` (a missing client capability) with HTTP
400. go-sdk v1.7 clients treat any 400 as a broken transport and drop the connection, so the
``-32021`` never reaches the caller (fixed in later go-sdk releases). A route serving such
clients can send it with HTTP 200 instead. The switch is applied where the response is written,
so it covers every ``-32021`` the route produces: the edge's own (an upstream InputRequiredResult
asking for what the request did not declare), the legacy bridge's (a 2025-era server asking
mid-call), and one the upstream itself sends. In an SSE stream the status is 200 already.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from mcp_edge.core.errors import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send

#: A -32021 error body is small; a larger 400 JSON answer passes unexamined.
_MAX_EXAMINED = 64 * 1024


class RouteCompat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: HTTP status of ``-32021`` responses: 400 (the spec) or 200 (go-sdk v1.7 clients).
    missing_capability_status: Literal[400, 200] = 400


class CompatMiddleware:
    """Applies a route's compat switches to every answer it gives (composed only on routes that
    set one)."""

    def __init__(self, app: ASGIApp, *, missing_capability_status: int = 400) -> None:
        self.app = app
        self.status = missing_capability_status

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, missing_capability_status(send, self.status))


def missing_capability_status(send: Send, status: int) -> Send:
    """Wrap ``send`` so that a JSON ``-32021`` answer sent with HTTP 400 goes out with ``status``.

    Only a 400 with a JSON body is held back (until its body is complete, at most 64 KiB);
    everything else passes as it comes."""
    if status == 400:
        return send
    held: dict[str, Any] = {}
    parts: list[bytes] = []

    async def wrapped(message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if message["status"] == 400 and _is_json(message.get("headers", [])):
                held["start"] = message
                return
        elif kind == "http.response.body" and "start" in held:
            parts.append(message.get("body", b""))
            more = message.get("more_body", False)
            size = sum(len(p) for p in parts)
            if more and size <= _MAX_EXAMINED:
                return
            start = held.pop("start")
            body = b"".join(parts)
            parts.clear()
            if not more and _is_missing_capability(body):
                start = {**start, "status": status}
            await send(start)
            await send({"type": "http.response.body", "body": body, "more_body": more})
            return
        await send(message)

    return wrapped


def _is_json(headers: Any) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


def _is_missing_capability(body: bytes) -> bool:
    if b"-32021" not in body:
        return False
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    error = doc.get("error") if isinstance(doc, dict) else None
    return isinstance(error, dict) and error.get("code") == MISSING_REQUIRED_CLIENT_CAPABILITY
