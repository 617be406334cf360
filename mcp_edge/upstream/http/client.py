"""The proxy's upstream client: pooled HTTP/1.1 keep-alive connections on asyncio transports,
responses parsed by httptools (the llhttp parser uvicorn uses on the server side).

Why not aiohttp here (it stays for the gateway's other HTTP calls): a general client's request
and response objects, header multidicts, payload writers and tracing hooks cost about 0.25 ms of
CPU per small call on this path, more than the ASGI server itself (``bench/results/layers.md``).
This client does only what a reverse proxy needs: send one request with the bytes and headers it
is given, hand back the status, raw headers and body chunks as they arrive, and keep the
connection for the next request when the answer was read to its end.

Errors: :class:`UpstreamConnectError` (could not connect, or the connection dropped before the
response head), :class:`UpstreamProtocolError` (not HTTP/1.x), :class:`UpstreamStreamError`
(dropped mid-body), ``TimeoutError`` (connect or read timeout), ``ValueError`` (a header that
cannot be sent).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httptools

#: Body bytes buffered from one response before reading from the upstream pauses (the client
#: side is slower); reading resumes below the low mark.
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class UpstreamError(Exception):
    """The upstream request failed."""


class UpstreamConnectError(UpstreamError):
    """No connection, or it closed before the response head arrived."""


class UpstreamProtocolError(UpstreamError):
    """The upstream did not answer with well-formed HTTP/1.x."""


class UpstreamStreamError(UpstreamError):
    """The connection dropped before the response body was complete."""


@dataclass(frozen=True, slots=True)
class Origin:
    scheme: str
    host: str
    port: int
    #: Request target: path and query, as sent on the request line.
    target: bytes


def parse_url(url: str) -> Origin:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, parts.hostname, port, target.encode("latin-1"))


class UpstreamResponse:
    """One response: ``status`` and ``raw_headers`` once the head arrived; the body through
    :meth:`chunks`. End with :meth:`release` (the connection goes back to the pool if the body
    was read to its end) or :meth:`close` (the connection is dropped)."""

    __slots__ = (
        "_buffer",
        "_conn",
        "_done",
        "_error",
        "_paused",
        "_pool",
        "_size",
        "_waiter",
        "raw_headers",
        "status",
    )

    def __init__(self, conn: _Connection, pool: UpstreamClient) -> None:
        self._conn: _Connection | None = conn
        self._pool = pool
        self.status = 0
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self._buffer: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._done = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    @property
    def finished(self) -> bool:
        """The whole body arrived and was handed out (the chunk just read was the last)."""
        return self._done and not self._buffer and self._error is None

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        for k, v in self.raw_headers:
            if k.lower() == name:
                return v
        return None

    async def read(self) -> bytes | None:
        """The next body chunk as it arrives; None once the body is complete."""
        while True:
            if self._buffer:
                chunk = self._buffer.popleft()
                self._size -= len(chunk)
                if self._paused and self._size < LOW_WATER and self._conn is not None:
                    self._paused = False
                    self._conn.resume()
                return chunk
            if self._error is not None:
                raise self._error
            if self._done:
                return None
            await self._wait()

    async def chunks(self) -> Any:
        """Body chunks as they arrive (an async iterator)."""
        while (chunk := await self.read()) is not None:
            yield chunk

    async def _wait(self) -> None:
        loop = self._pool.loop
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(self._pool.read_timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- from the connection

    def _on_body(self, chunk: bytes) -> None:
        self._buffer.append(chunk)
        self._size += len(chunk)
        if self._size > HIGH_WATER and not self._paused and self._conn is not None:
            self._paused = True
            self._conn.pause()
        self._wake()

    def _on_complete(self) -> None:
        self._done = True
        self._wake()

    def _on_error(self, error: BaseException) -> None:
        if not self._done and self._error is None:
            self._error = error
        self._wake()

    # -- ending

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and self._error is None and not self._paused and conn.reusable():
            self._pool._put(conn)
        else:
            self._pool._discard(conn)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool._discard(conn)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("upstream read timed out"))


class _Connection(asyncio.Protocol):
    """One keep-alive connection; httptools calls the ``on_*`` methods while parsing."""

    def __init__(self, origin_key: tuple[str, str, int]) -> None:
        self.key = origin_key
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.head: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self._interim = False
        self._keep_alive = False
        #: The response ends when the connection does (no Content-Length, not chunked).
        self._until_close = False

    # -- transport events

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None or response._done:  # bytes nobody asked for: the connection is done
            self._abort()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamProtocolError("the upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"malformed upstream response: {exc}"))

    def eof_received(self) -> bool:
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        head = self.head
        if head is not None and not head.done():
            head.set_exception(
                UpstreamConnectError("the upstream closed the connection before answering")
            )
        response = self.response
        if response is not None:
            if self._until_close and head is not None and head.done():
                response._on_complete()
            else:
                response._on_error(
                    UpstreamStreamError("the upstream closed the connection mid-response")
                )

    # -- parser callbacks

    def _current(self) -> UpstreamResponse | None:
        """The response being parsed; None once it is complete (anything after it is a second
        answer to one request: the connection is not used again)."""
        response = self.response
        if response is not None and response._done:
            self.closed = True
            return None
        return response

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self._current()
        if response is not None and not self._interim:
            response.raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        response = self._current()
        if response is None:
            return
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # 1xx: informational, the real answer follows
            self._interim = True
            return
        response.status = status
        self._until_close = _delimited_by_close(response.raw_headers)
        if self.head is not None and not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        response = self._current()
        if response is not None and not self._interim:
            response._on_body(body)

    def on_message_complete(self) -> None:
        response = self._current()
        if response is None:
            return
        if self._interim:
            self._interim = False
            response.raw_headers.clear()
            return
        # Read here: once the callback returns, the parser has reset its state for the next message.
        self._keep_alive = self.parser.should_keep_alive()
        response._on_complete()

    # -- helpers

    def _fail(self, error: BaseException) -> None:
        if self.head is not None and not self.head.done():
            self.head.set_exception(error)
        if self.response is not None:
            self.response._on_error(error)
        self._abort()

    def _abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def reusable(self) -> bool:
        return not self.closed and not self._until_close and self._keep_alive


def _delimited_by_close(headers: list[tuple[bytes, bytes]]) -> bool:
    for k, v in headers:
        k = k.lower()
        if k == b"content-length" or (k == b"transfer-encoding" and b"chunked" in v.lower()):
            return False
    return True


class UpstreamClient:
    """A pool of keep-alive connections per origin. Create it inside the running event loop."""

    def __init__(
        self,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 300.0,
        max_connections: int = 512,
        keepalive_seconds: float = 4.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.keepalive_seconds = keepalive_seconds
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._slots = asyncio.Semaphore(max_connections)
        self._origins: dict[str, Origin] = {}
        self._closed = False

    def origin(self, url: str) -> Origin:
        origin = self._origins.get(url)
        if origin is None:
            origin = parse_url(url)
            if len(self._origins) > 4096:  # URLs carry query strings: keep the cache bounded
                self._origins.clear()
            self._origins[url] = origin
        return origin

    async def request(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> UpstreamResponse:
        """Send the request; return once the response head arrived. ``headers`` must hold
        ``host`` and no framing headers (the length is set here)."""
        origin = self.origin(url)
        head = _encode_head(
            method,
            origin.target,
            headers,
            len(body) if body or method not in ("GET", "DELETE") else None,
        )
        await self._slots.acquire()
        conn: _Connection | None = None
        try:
            conn = await self._connection(origin)
            response = UpstreamResponse(conn, self)
            conn.response = response
            head_done = conn.head = self.loop.create_future()
            assert conn.transport is not None
            conn.transport.write(head + body if body else head)
            timer = self.loop.call_later(self.read_timeout, _expire, head_done)
            try:
                await head_done
            finally:
                timer.cancel()
            return response
        except BaseException:
            if conn is not None:
                conn.response = None
                self._discard(conn)
            else:
                self._slots.release()
            raise

    async def _connection(self, origin: Origin) -> _Connection:
        key = (origin.scheme, origin.host, origin.port)
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self.keepalive_seconds:
                conn.parser = httptools.HttpResponseParser(conn)
                conn._until_close = conn._keep_alive = False
                return conn
            conn._abort()
        tls = None
        if origin.scheme == "https":
            tls = self._ssl or _default_tls()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await self.loop.create_connection(
                    lambda: _Connection(key),
                    origin.host,
                    origin.port,
                    ssl=tls,
                    server_hostname=origin.host if tls else None,
                )
        except OSError as exc:
            raise UpstreamConnectError(
                f"cannot connect to the upstream: {exc.strerror or exc}"
            ) from exc
        return conn

    def _put(self, conn: _Connection) -> None:
        conn.response = None
        conn.head = None
        if self._closed:
            conn._abort()
        else:
            conn.idle_since = time.monotonic()
            self._idle.setdefault(conn.key, []).append(conn)
        self._slots.release()

    def _discard(self, conn: _Connection) -> None:
        conn.response = None
        conn.head = None
        conn._abort()
        self._slots.release()

    async def close(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn._abort()
        self._idle.clear()


def _encode_head(
    method: str, target: bytes, headers: list[tuple[bytes, bytes]], length: int | None
) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (method.encode("ascii"), target)]
    lines.extend(k + b": " + v for k, v in headers)
    if length is not None:
        lines.append(b"content-length: %d" % length)
    lines.append(b"\r\n")
    head = b"\r\n".join(lines)
    # Each header is one line: a CR, LF or NUL inside a name or value would split it.
    if head.count(b"\n") != len(lines) or head.count(b"\r") != len(lines) or b"\0" in head:
        raise ValueError("a request header holds a line break or NUL")
    return head


_TLS: ssl.SSLContext | None = None


def _default_tls() -> ssl.SSLContext:
    global _TLS
    if _TLS is None:
        _TLS = ssl.create_default_context()
    return _TLS
