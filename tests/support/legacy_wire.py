"""Raw-HTTP helpers for talking to a 2025-era (handshake, session, SSE) MCP endpoint.

Every HTTP request goes over a connection of its own (a fresh `httpx.AsyncClient`), so an
answer POST never shares a socket with the stream it answers, and closing an event stream
really closes its TCP connection (the server only notices a dropped stream when the socket
closes). Every wait is bounded: clients carry timeouts, and reading the next SSE event takes
a timeout too.

    session = await LegacySession.open(url)                    # initialize + initialized
    async with session.stream(rpc("c1", "tools/call", {...})) as call:
        ask = await call.next_message()                       # e.g. elicitation/create
        assert (await session.answer(ask["id"], {...})).status_code == 202
        final = await call.response("c1")                      # its result
    await session.delete()
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Self

import httpx

LEGACY_VERSION = "2025-11-25"
ACCEPT_BOTH = "application/json, text/event-stream"
DEFAULT_CAPABILITIES: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {"listChanged": True},
}


def rpc(request_id: int | str, method: str, params: dict[str, Any] | None = None) -> dict:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def notification(method: str, params: dict[str, Any] | None = None) -> dict:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool_call(
    request_id: int | str,
    name: str,
    arguments: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
) -> dict:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if meta:
        params["_meta"] = meta
    return rpc(request_id, "tools/call", params)


def accept(content: dict[str, Any]) -> dict:
    return {"action": "accept", "content": content}


def is_response(message: dict | None, request_id: Any = None) -> bool:
    if not isinstance(message, dict) or "method" in message:
        return False
    if "result" not in message and "error" not in message:
        return False
    return request_id is None or message.get("id") == request_id


def is_server_request(message: dict | None, method: str | None = None) -> bool:
    return (
        isinstance(message, dict)
        and "method" in message
        and "id" in message
        and (method is None or message["method"] == method)
    )


def text_of(response: dict) -> str:
    """The first text content of a tools/call result message."""
    assert "result" in response, response
    return response["result"]["content"][0]["text"]


# ---- SSE ------------------------------------------------------------------------------------


@dataclass
class SseEvent:
    data: str = ""
    id: str | None = None
    event: str | None = None
    retry: int | None = None

    @property
    def message(self) -> Any:
        return json.loads(self.data) if self.data.strip() else None

    @property
    def is_priming(self) -> bool:
        """An event with an id and no data: the resumption cursor a 1.x server with an event
        store sends first on a stream."""
        return self.id is not None and not self.data.strip()


async def parse_sse(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """Events of an SSE body (only what this protocol uses: data, id, event, retry)."""
    current = SseEvent()
    seen = False
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if seen:
                current.data = "\n".join(data)
                yield current
            current, seen, data = SseEvent(), False, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        seen = True
        if name == "data":
            data.append(value)
        elif name == "id":
            current.id = value
        elif name == "event":
            current.event = value
        elif name == "retry":
            with contextlib.suppress(ValueError):
                current.retry = int(value)
    if seen:
        current.data = "\n".join(data)
        yield current


_END = object()


class EventStream:
    """An open HTTP response read as SSE by a background task; owns its own connection."""

    def __init__(self, http: httpx.AsyncClient, response: httpx.Response) -> None:
        self.http = http
        self.raw = response
        self.events: list[SseEvent] = []  # everything read so far, in order
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())
        self.ended = False

    @property
    def status_code(self) -> int:
        return self.raw.status_code

    @property
    def headers(self) -> httpx.Headers:
        return self.raw.headers

    async def _read(self) -> None:
        try:
            if self.raw.headers.get("content-type", "").startswith("text/event-stream"):
                async for event in parse_sse(self.raw.aiter_lines()):
                    self.events.append(event)
                    await self._queue.put(event)
            else:  # a JSON (or error) body: one pseudo-event carrying it
                body = (await self.raw.aread()).decode()
                event = SseEvent(data=body)
                self.events.append(event)
                await self._queue.put(event)
        except (httpx.HTTPError, asyncio.CancelledError) as exc:
            await self._queue.put(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            await self._queue.put(_END)

    async def next_event(self, timeout: float = 10.0) -> SseEvent:
        """The next event; TimeoutError if none comes in time, EOFError once the stream ended."""
        if self.ended:
            raise EOFError("stream ended")
        item = await asyncio.wait_for(self._queue.get(), timeout)
        if item is _END:
            self.ended = True
            raise EOFError("stream ended")
        if isinstance(item, BaseException):
            self.ended = True
            raise EOFError(f"stream failed: {item!r}")  # noqa: TRY004
        return item

    async def next_message(self, timeout: float = 10.0) -> dict:
        """The next event that carries a JSON-RPC message (priming events are skipped)."""
        while True:
            event = await self.next_event(timeout)
            if event.message is not None:
                return event.message

    async def next_message_event(self, timeout: float = 10.0) -> SseEvent:
        """Like next_message, but the whole event (to see its id)."""
        while True:
            event = await self.next_event(timeout)
            if event.message is not None:
                return event

    async def response(self, request_id: Any = None, timeout: float = 10.0) -> dict:
        """Read until a JSON-RPC response (for `request_id`, if given); fails on a
        server->client request, which the caller should have handled."""
        while True:
            message = await self.next_message(timeout)
            if is_response(message, request_id):
                return message
            assert not is_server_request(message), f"unexpected server request {message}"

    async def body_text(self, timeout: float = 2.0) -> str:
        """The body of a non-SSE answer (an error, say), for assertion messages."""
        with contextlib.suppress(Exception):
            return (await self.next_event(timeout)).data
        return ""

    async def aclose(self) -> None:
        """Close the stream and its TCP connection at once (a hard close, as a crash would)."""
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._reader
        with contextlib.suppress(Exception):
            await self.raw.aclose()
        with contextlib.suppress(Exception):
            await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def new_client(timeout: float = 10.0) -> httpx.AsyncClient:
    """A client of its own (its own connection pool), with every timeout bounded."""
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=5.0))


async def open_stream(
    method: str, url: str, *, headers: dict[str, str], json_body: Any = None, timeout: float = 10.0
) -> EventStream:
    """Send a request on a new connection and return its (streamed) response."""
    http = new_client(timeout)
    try:
        request = http.build_request(method, url, headers=headers, json=json_body)
        response = await http.send(request, stream=True)
    except BaseException:
        await http.aclose()
        raise
    return EventStream(http, response)


# ---- sessions -------------------------------------------------------------------------------


@dataclass
class LegacySession:
    """A 2025-era session seen from the client: URL, Mcp-Session-Id and negotiated version."""

    url: str
    session_id: str | None
    protocol_version: str = LEGACY_VERSION
    initialize_result: dict = field(default_factory=dict)
    initialize_content_type: str = ""
    extra_headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 10.0

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        capabilities: dict[str, Any] | None = None,
        version: str = LEGACY_VERSION,
        extra_headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> LegacySession:
        """initialize, then notifications/initialized (which must get 202)."""
        init = rpc(
            0,
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": DEFAULT_CAPABILITIES if capabilities is None else capabilities,
                "clientInfo": {"name": "legacy-wire-tests", "version": "0"},
            },
        )
        headers = {
            "Content-Type": "application/json",
            "Accept": ACCEPT_BOTH,
            **(extra_headers or {}),
        }
        async with await open_stream(
            "POST", url, headers=headers, json_body=init, timeout=timeout
        ) as s:
            assert s.status_code == 200, (s.status_code, await s.body_text())
            content_type = s.headers.get("content-type", "")
            answer = await s.response(0, timeout=timeout)
            session = cls(
                url=url,
                session_id=s.headers.get("mcp-session-id"),
                protocol_version=answer["result"]["protocolVersion"],
                initialize_result=answer["result"],
                initialize_content_type=content_type,
                extra_headers=dict(extra_headers or {}),
                timeout=timeout,
            )
        r = await session.post(notification("notifications/initialized"))
        assert r.status_code == 202, (r.status_code, r.text)
        return session

    def headers(self, **extra: str) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": ACCEPT_BOTH,
            "MCP-Protocol-Version": self.protocol_version,
            **self.extra_headers,
        }
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        h.update(extra)
        return h

    async def post(self, message: Any, timeout: float | None = None) -> httpx.Response:
        """POST one message on a new connection and read the whole answer (for notifications,
        answers to server requests, and quick requests answered with JSON)."""
        async with new_client(timeout or self.timeout) as http:
            return await http.post(self.url, headers=self.headers(), json=message)

    async def answer(self, request_id: Any, result: dict[str, Any]) -> httpx.Response:
        """Answer a server->client request (expect 202)."""
        return await self.post({"jsonrpc": "2.0", "id": request_id, "result": result})

    def stream(self, message: Any, timeout: float | None = None) -> _Opening:
        """POST a request on a new connection and read its answer as a stream:
        `async with session.stream(msg) as s: ...` (closed hard on exit)."""
        return _Opening(
            open_stream(
                "POST",
                self.url,
                headers=self.headers(),
                json_body=message,
                timeout=timeout or self.timeout,
            )
        )

    def get_stream(
        self, last_event_id: str | None = None, timeout: float | None = None
    ) -> _Opening:
        """GET the standalone stream, or resume one with Last-Event-ID."""
        headers = self.headers(Accept="text/event-stream")
        headers.pop("Content-Type")
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        return _Opening(
            open_stream("GET", self.url, headers=headers, timeout=timeout or self.timeout)
        )

    async def request(
        self, request_id: Any, method: str, params: dict[str, Any] | None = None
    ) -> dict:
        """A request that needs nothing from the client: its JSON-RPC response (SSE or JSON)."""
        async with self.stream(rpc(request_id, method, params)) as s:
            assert s.status_code == 200, (s.status_code, await s.body_text())
            return await s.response(request_id)

    async def call_tool(
        self, request_id: Any, name: str, arguments: dict[str, Any] | None = None
    ) -> dict:
        return await self.request(
            request_id, "tools/call", {"name": name, "arguments": arguments or {}}
        )

    async def delete(self) -> httpx.Response:
        async with new_client(self.timeout) as http:
            headers = self.headers()
            headers.pop("Content-Type")
            return await http.delete(self.url, headers=headers)


class _Opening:
    """Awaitable and async context manager around a stream being opened."""

    def __init__(self, opening: Any) -> None:
        self._opening = opening
        self._stream: EventStream | None = None

    def __await__(self):
        return self._opening.__await__()

    async def __aenter__(self) -> EventStream:
        self._stream = await self._opening
        return self._stream

    async def __aexit__(self, *exc: object) -> None:
        if self._stream is not None:
            await self._stream.aclose()
