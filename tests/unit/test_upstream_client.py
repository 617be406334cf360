"""The proxy's pooled HTTP/1.1 client (mcp_edge.upstream.http.client).

Against a real server (uvicorn serving the benchmark's light MCP upstream): answers, and one
keep-alive connection reused across requests. Against small raw servers, for what no real server
does on purpose: chunked and connection-delimited bodies, interim 1xx answers, two answers for one
request, connections dropped before or during the answer, garbage, silence (timeouts), a body
larger than the buffer read slowly, the connection limit, keep-alive expiry, and request framing
as the server sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest
import uvicorn

from bench.light import app as light_app
from mcp_edge.upstream.http.client import (
    UpstreamClient,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamStreamError,
)

pytestmark = pytest.mark.timeout(30)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """An asyncio server running ``handler`` per connection, counting connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.server: asyncio.base_events.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            try:
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                self.tasks.discard(task)
                writer.close()

        self.server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.sleep(0)

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/mcp"


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head and its body (by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return head, body


def answering(*responses: bytes, close: bool = False) -> Handler:
    """Answer every request on the connection with the same bytes."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            for r in responses:
                writer.write(r)
            await writer.drain()
            if close:
                return

    return handler


OK_BODY = b'{"ok":true}'
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(OK_BODY),
    OK_BODY,
)
HEADERS = [(b"content-type", b"application/json"), (b"host", b"upstream")]


@contextlib.asynccontextmanager
async def client(**kwargs: float) -> AsyncIterator[UpstreamClient]:
    c = UpstreamClient(**kwargs)  # type: ignore[arg-type]
    try:
        yield c
    finally:
        await c.close()


async def fetch(
    c: UpstreamClient, url: str, body: bytes = b"{}", method: str = "POST"
) -> tuple[int, bytes]:
    response = await c.request(method, url, list(HEADERS), body)
    try:
        data = b"".join([chunk async for chunk in response.chunks()])
    finally:
        response.release()
    return response.status, data


def idle_count(c: UpstreamClient) -> int:
    return sum(len(v) for v in c._idle.values())


# ---------------------------------------------------------------------------- a real server


@pytest.fixture
async def light_url() -> AsyncIterator[str]:
    config = uvicorn.Config(
        light_app, host="127.0.0.1", port=0, lifespan="off", log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve())
    try:
        for _ in range(200):
            if server.started:
                break
            await asyncio.sleep(0.02)
        assert server.started
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


async def test_answers_from_a_real_server_on_one_reused_connection(light_url: str) -> None:
    opened = 0
    async with client() as c:
        loop = asyncio.get_running_loop()
        original = loop.create_connection

        async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal opened
            opened += 1
            return await original(*args, **kwargs)

        loop.create_connection = counting  # type: ignore[method-assign]
        try:
            for rid in range(1, 6):
                body = orjson.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": rid,
                        "method": "tools/call",
                        "params": {"name": "small"},
                    }
                )
                status, data = await fetch(c, light_url, body)
                assert status == 200
                assert orjson.loads(data)["id"] == rid
                assert idle_count(c) == 1
        finally:
            del loop.create_connection
    assert opened == 1


# ---------------------------------------------------------------------------- framing


async def test_chunked_body_is_dechunked_and_the_connection_reused() -> None:
    chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with RawServer(answering(chunked)) as server, client() as c:
        assert await fetch(c, server.url) == (200, b"hello world")
        assert await fetch(c, server.url) == (200, b"hello world")
    assert server.connections == 1


async def test_body_ended_by_close_is_complete_and_not_pooled() -> None:
    until_close = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nall of it"
    async with RawServer(answering(until_close, close=True)) as server, client() as c:
        assert await fetch(c, server.url) == (200, b"all of it")
        assert idle_count(c) == 0


async def test_interim_100_is_skipped() -> None:
    interim = b"HTTP/1.1 100 Continue\r\nx-interim: yes\r\n\r\n"
    async with RawServer(answering(interim, OK)) as server, client() as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        try:
            assert response.status == 200
            assert response.header(b"x-interim") is None
            assert response.header(b"content-type") == b"application/json"
            assert b"".join([x async for x in response.chunks()]) == OK_BODY
        finally:
            response.release()


async def test_connection_close_answer_is_not_reused() -> None:
    closing = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
    async with RawServer(answering(closing, close=True)) as server, client() as c:
        assert await fetch(c, server.url) == (200, b"ok")
        assert idle_count(c) == 0
        assert await fetch(c, server.url) == (200, b"ok")
    assert server.connections == 2


async def test_a_second_answer_to_one_request_does_not_replace_the_first() -> None:
    second = b"HTTP/1.1 500 Oops\r\ncontent-length: 3\r\nx-second: 1\r\n\r\nbad"
    async with RawServer(answering(OK + second)) as server, client() as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        try:
            body = b"".join([x async for x in response.chunks()])
            await asyncio.sleep(0.05)  # let anything else on the wire arrive
            assert (response.status, body) == (200, OK_BODY)
            assert response.header(b"x-second") is None
        finally:
            response.release()
        assert idle_count(c) == 0


async def test_request_framing_as_the_server_sees_it() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            seen.append(await read_request(reader))
            writer.write(OK)
            await writer.drain()

    async with RawServer(handler) as server, client() as c:
        await fetch(c, server.url + "?a=1&b=2", b'{"x":1}')
        await fetch(c, server.url, b"", method="GET")
    post_head, post_body = seen[0]
    lines = post_head.split(b"\r\n")
    assert lines[0] == b"POST /mcp?a=1&b=2 HTTP/1.1"
    assert [x for x in lines if x.lower().startswith(b"content-length:")] == [b"content-length: 7"]
    assert post_body == b'{"x":1}'
    get_head, _ = seen[1]
    assert get_head.startswith(b"GET /mcp HTTP/1.1\r\n")
    assert b"content-length" not in get_head.lower()


async def test_header_with_a_line_break_or_nul_is_refused_before_sending() -> None:
    async with RawServer(answering(OK)) as server, client() as c:
        for bad in (b"a\r\nx-injected: 1", b"a\nb", b"a\0b"):
            with pytest.raises(ValueError):
                await c.request("POST", server.url, [*HEADERS, (b"x-bad", bad)], b"{}")
        assert server.connections == 0
        assert await fetch(c, server.url) == (200, OK_BODY)  # no slot was leaked


# ---------------------------------------------------------------------------- failures


async def test_closed_before_answering_is_a_connect_error() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async with RawServer(hang_up) as server, client() as c:
        with pytest.raises(UpstreamConnectError):
            await c.request("POST", server.url, list(HEADERS), b"{}")


async def test_closed_mid_body_is_a_stream_error() -> None:
    short = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly part"
    async with RawServer(answering(short, close=True)) as server, client() as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        try:
            with pytest.raises(UpstreamStreamError):
                async for _ in response.chunks():
                    pass
        finally:
            response.release()
        assert idle_count(c) == 0


async def test_garbage_is_a_protocol_error() -> None:
    async with RawServer(answering(b"hello\r\n\r\n")) as server, client() as c:
        with pytest.raises(UpstreamProtocolError):
            await c.request("POST", server.url, list(HEADERS), b"{}")


async def test_refused_connection_is_a_connect_error() -> None:
    async with RawServer(answering(OK)) as server:
        url = server.url
    async with client() as c:
        with pytest.raises(UpstreamConnectError):
            await c.request("POST", url, list(HEADERS), b"{}")


async def test_silent_server_times_out_before_the_head() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(10)

    async with RawServer(silent) as server, client(read_timeout=0.3) as c:
        with pytest.raises(TimeoutError):
            await c.request("POST", server.url, list(HEADERS), b"{}")


async def test_stalled_body_times_out_while_reading() -> None:
    stall = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nsome"

    async def stalling(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(stall)
        await writer.drain()
        await asyncio.sleep(10)

    async with RawServer(stalling) as server, client(read_timeout=0.3) as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        got = b""
        try:
            with pytest.raises(TimeoutError):
                async for chunk in response.chunks():
                    got += chunk
        finally:
            response.close()
        assert got == b"some"


# ---------------------------------------------------------------------------- flow and the pool


async def test_large_body_read_slowly_arrives_whole_and_in_order() -> None:
    payload = bytes(range(256)) * (2 * 1024 * 1024 // 256)
    big = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload
    async with RawServer(answering(big)) as server, client() as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        parts = []
        try:
            async for chunk in response.chunks():
                parts.append(chunk)
                await asyncio.sleep(0.001)  # a slow consumer: reading from the upstream pauses
        finally:
            response.release()
        assert b"".join(parts) == payload
        assert idle_count(c) == 1  # read to its end: the connection is kept


async def test_connection_limit_makes_the_next_request_wait() -> None:
    async with RawServer(answering(OK)) as server, client(max_connections=1) as c:
        first = await c.request("POST", server.url, list(HEADERS), b"{}")
        second = asyncio.ensure_future(fetch(c, server.url))
        await asyncio.sleep(0.1)
        assert not second.done()
        async for _ in first.chunks():
            pass
        first.release()
        assert await asyncio.wait_for(second, 5) == (200, OK_BODY)
    assert server.connections == 1


async def test_idle_connection_past_keepalive_is_not_reused() -> None:
    async with RawServer(answering(OK)) as server, client(keepalive_seconds=0.05) as c:
        await fetch(c, server.url)
        await asyncio.sleep(0.1)
        await fetch(c, server.url)
    assert server.connections == 2


async def test_close_and_early_release_drop_the_connection() -> None:
    async def slow_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.write(b"ok")
            await writer.drain()

    async with RawServer(slow_body) as server, client() as c:
        response = await c.request("POST", server.url, list(HEADERS), b"{}")
        response.close()
        assert idle_count(c) == 0
        unread = await c.request("POST", server.url, list(HEADERS), b"{}")
        unread.release()  # the body is still coming: the connection cannot carry another request
        assert idle_count(c) == 0
        assert await fetch(c, server.url) == (200, b"ok")
        assert idle_count(c) == 1
        await c.close()
        assert idle_count(c) == 0
    assert server.connections == 3
