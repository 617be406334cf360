"""What the fixture servers' request-logging wrappers share: the request's body read whole, then
handed on to the wrapped app as if it were still unread.

Standard library only, and imported as a sibling module (``from body_replay import ...``): the
servers run as scripts (their own directory first on ``sys.path``), some in the isolated ``mcp``
1.x environment. (``legacy_server.py`` keeps its own copy: the stdio tests may run a copy of that
one file as another user.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]


async def read_body(receive: Receive) -> tuple[bytes, bool]:
    """The request's body, and whether it came whole (False: the client went away first, and the
    body is what came before)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), False
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), True


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the wrapped app ``body`` first, then what the client sends."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
