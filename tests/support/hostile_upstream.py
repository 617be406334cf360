"""A deliberately broken 2026-07-28 "server" speaking raw HTTP/1.1, for what no real server does:
answers framed wrongly, streams that never end, responses for the wrong id, compressed bodies the
gateway did not ask for, requests on a response stream.

Each ``tools/call`` is answered by the script named like the tool (``params.name``), any other
method by the script named like the method. Scripts that stream forever note when the gateway
closed the connection (``closed``), so tests can prove the upstream stream was cancelled.
Runs on its own event loop in a daemon thread; ``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

Script = Callable[["Exchange"], Awaitable[None]]

ELICIT = {
    "method": "elicitation/create",
    "params": {"message": "Which colour?", "requestedSchema": {"type": "object", "properties": {}}},
}
INPUT_REQUIRED = {
    "resultType": "input_required",
    "inputRequests": {"colour": ELICIT},
    "requestState": "plain",
}
COMPLETE = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def progress(n: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": n},
    }


def sse_event(doc: Any) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(doc).encode() + b"\r\n\r\n"


class Exchange:
    """One request and the raw connection to answer it on."""

    def __init__(
        self,
        server: HostileUpstream,
        doc: dict[str, Any],
        name: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.doc = doc
        self.id = doc.get("id")
        self.name = name
        self.reader = reader
        self.writer = writer
        self.keep_alive = True

    async def json(
        self,
        body: bytes,
        *,
        status: int = 200,
        content_type: bytes | None = b"application/json",
        headers: tuple[bytes, ...] = (),
    ) -> None:
        head = [b"HTTP/1.1 %d X" % status, b"Content-Length: %d" % len(body), *headers]
        if content_type is not None:
            head.append(b"Content-Type: " + content_type)
        self.writer.write(b"\r\n".join(head) + b"\r\n\r\n" + body)
        await self.writer.drain()

    async def start_chunked(
        self, content_type: bytes = b"text/event-stream", headers: tuple[bytes, ...] = ()
    ) -> None:
        head = [
            b"HTTP/1.1 200 OK",
            b"Transfer-Encoding: chunked",
            b"Content-Type: " + content_type,
            *headers,
        ]
        self.writer.write(b"\r\n".join(head) + b"\r\n\r\n")
        await self.writer.drain()

    async def chunk(self, data: bytes) -> None:
        self.writer.write(b"%x\r\n" % len(data) + data + b"\r\n")
        await self.writer.drain()

    async def end_chunks(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()

    async def forever(self, data: Callable[[int], bytes], interval: float) -> None:
        """Send chunks until the gateway closes the connection (or 120 s, a safety stop)."""
        self.keep_alive = False
        deadline = time.monotonic() + 120
        n = 0
        try:
            while time.monotonic() < deadline:
                if self.reader.at_eof():
                    break
                await self.chunk(data(n))
                n += 1
                await asyncio.sleep(interval)
        except (ConnectionError, OSError):
            pass
        self.server.closed[self.name] = time.monotonic()

    async def hold_open(self) -> None:
        """Send nothing more; wait for the gateway to close the connection."""
        self.keep_alive = False
        deadline = time.monotonic() + 120
        with contextlib.suppress(ConnectionError, OSError):
            while time.monotonic() < deadline and not self.reader.at_eof():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.reader.read(1), 0.05)
        self.server.closed[self.name] = time.monotonic()


async def ndjson_call(x: Exchange) -> None:
    """Newline-delimited messages under application/json, the last line without a newline."""
    await x.start_chunked(b"application/json")
    await x.chunk(json.dumps(progress(1)).encode() + b"\n")
    await asyncio.sleep(0.05)
    await x.chunk(json.dumps(response(x.id, COMPLETE)).encode())
    await x.end_chunks()


async def ndjson_forever(x: Exchange) -> None:
    await x.start_chunked(b"application/json")
    await x.forever(lambda n: json.dumps(progress(n)).encode() + b"\n", 0.02)


async def ndjson_listen(x: Exchange) -> None:
    """A subscriptions/listen stream as newline-delimited JSON: the acknowledgement, then a
    notification every 100 ms, until the gateway closes the connection."""
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": str(x.id)}},
    }
    changed = {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": str(x.id)}},
    }
    await x.start_chunked(b"application/json")
    await x.chunk(json.dumps(ack).encode() + b"\n")
    await x.forever(lambda n: json.dumps(changed).encode() + b"\n", 0.1)


async def status_202(x: Exchange) -> None:
    await x.json(b"", status=202, content_type=b"text/event-stream")


# ---------------------------------------------------------------- scripts


async def ir_not_final(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(response(x.id, INPUT_REQUIRED)) + sse_event(progress(1)))
    await x.end_chunks()


async def two_responses_sse(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(response(x.id, COMPLETE)))
    await x.chunk(
        sse_event(response(x.id, {**COMPLETE, "content": [{"type": "text", "text": "second"}]}))
    )
    await x.end_chunks()


async def two_responses_json(x: Exchange) -> None:
    await x.json(json.dumps([response(x.id, COMPLETE), response(x.id, INPUT_REQUIRED)]).encode())


async def other_id_json(x: Exchange) -> None:
    await x.json(json.dumps(response("not-yours", INPUT_REQUIRED)).encode())


async def other_id_sse(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(progress(1)) + sse_event(response(987654, INPUT_REQUIRED)))
    await x.end_chunks()


async def event_over_limit(x: Exchange) -> None:
    text = "x" * (20 * 1024 * 1024)
    await x.start_chunked()
    payload = sse_event(response(x.id, {**COMPLETE, "content": [{"type": "text", "text": text}]}))
    x.keep_alive = False
    try:
        for i in range(0, len(payload), 256 * 1024):
            await x.chunk(payload[i : i + 256 * 1024])
        await x.end_chunks()
    except (ConnectionError, OSError):
        pass
    x.server.closed[x.name] = time.monotonic()


async def keepalive_forever(x: Exchange) -> None:
    await x.start_chunked()
    await x.forever(lambda n: b": keep-alive\n\n", 0.05)


async def progress_forever(x: Exchange) -> None:
    await x.start_chunked()
    await x.forever(lambda n: sse_event(progress(n)), 0.02)


async def json_endless(x: Exchange) -> None:
    await x.start_chunked(b"application/json")
    await x.chunk(
        b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"'
        % json.dumps(x.id).encode()
    )
    await x.forever(lambda n: b"a" * 65536, 0.0)


async def json_trickle(x: Exchange) -> None:
    await x.start_chunked(b"application/json")
    await x.chunk(
        b'{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"'
        % json.dumps(x.id).encode()
    )
    await x.forever(lambda n: b"aaaaaaaaaa", 0.1)


async def gzip_json(x: Exchange) -> None:
    body = gzip.compress(json.dumps(response(x.id, INPUT_REQUIRED)).encode())
    await x.json(body, headers=(b"Content-Encoding: gzip",))


async def gzip_sse(x: Exchange) -> None:
    await x.start_chunked(headers=(b"Content-Encoding: gzip",))
    await x.chunk(gzip.compress(sse_event(response(x.id, INPUT_REQUIRED))))
    await x.end_chunks()


def _result_type(value: Any) -> Script:
    async def script(x: Exchange) -> None:
        result = {k: v for k, v in INPUT_REQUIRED.items() if k != "resultType"}
        if value is not None:
            result["resultType"] = value
        await x.json(json.dumps(response(x.id, result)).encode())

    return script


async def state_10mb(x: Exchange) -> None:
    result = {**INPUT_REQUIRED, "requestState": "s" * (10 * 1024 * 1024)}
    await x.json(json.dumps(response(x.id, result)).encode())


async def server_request(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(progress(1)))
    await x.chunk(sse_event({"jsonrpc": "2.0", "id": "srv-1", **ELICIT}))
    await x.hold_open()  # a 2025-era server would now wait for the answer


async def html_200(x: Exchange) -> None:
    await x.json(b"<html><body>Welcome to nginx!</body></html>", content_type=b"text/html")


async def text_plain_json(x: Exchange) -> None:
    await x.json(json.dumps(response(x.id, INPUT_REQUIRED)).encode(), content_type=b"text/plain")


async def no_content_type(x: Exchange) -> None:
    await x.json(json.dumps(response(x.id, INPUT_REQUIRED)).encode(), content_type=None)


async def duplicate_result_type(x: Exchange) -> None:
    state = json.dumps("plain")
    body = (
        '{{"jsonrpc":"2.0","id":{},"result":{{"resultType":"input_required","inputRequests":{},'
        '"requestState":{},"content":[],"resultType":"complete"}}}}'
    ).format(json.dumps(x.id), json.dumps({"colour": ELICIT}), state)
    await x.json(body.encode())


async def null_id_error(x: Exchange) -> None:
    await x.json(
        json.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": -32602, "message": "Unknown tool"}}
        ).encode(),
        status=200,
    )


async def final_then_silence(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(progress(1)) + sse_event(response(x.id, COMPLETE)))
    await x.hold_open()


async def final_then_reset(x: Exchange) -> None:
    await x.start_chunked()
    await x.chunk(sse_event(response(x.id, COMPLETE)))
    x.keep_alive = False
    x.writer.transport.abort()  # no terminating chunk: the stream breaks after the final response


async def escaped_input_required(x: Exchange) -> None:
    body = (
        f'{{"jsonrpc":"2.0","id":{json.dumps(x.id)},"result":{{"resultType":"input\\u005frequired","tools":[],'
        '"requestState":"plain"}}'
    )
    await x.json(body.encode())


async def ok(x: Exchange) -> None:
    await x.json(json.dumps(response(x.id, COMPLETE)).encode())


SCRIPTS: dict[str, Script] = {
    "ir_not_final": ir_not_final,
    "two_responses_sse": two_responses_sse,
    "two_responses_json": two_responses_json,
    "other_id_json": other_id_json,
    "other_id_sse": other_id_sse,
    "event_over_limit": event_over_limit,
    "keepalive_forever": keepalive_forever,
    "progress_forever": progress_forever,
    "json_endless": json_endless,
    "json_trickle": json_trickle,
    "gzip_json": gzip_json,
    "gzip_sse": gzip_sse,
    "result_type_capitalised": _result_type("Input_Required"),
    "result_type_dashed": _result_type("input-required"),
    "result_type_missing": _result_type(None),
    "result_type_unknown": _result_type("task"),
    "state_10mb": state_10mb,
    "server_request": server_request,
    "html_200": html_200,
    "text_plain_json": text_plain_json,
    "no_content_type": no_content_type,
    "duplicate_result_type": duplicate_result_type,
    "null_id_error": null_id_error,
    "final_then_silence": final_then_silence,
    "final_then_reset": final_then_reset,
    "ndjson_call": ndjson_call,
    "ndjson_forever": ndjson_forever,
    "subscriptions/listen": ndjson_listen,
    "status_202": status_202,
    "tools/list": escaped_input_required,
    "ok": ok,
}


class HostileUpstream:
    def __init__(self, scripts: dict[str, Script] | None = None) -> None:
        #: This instance's own scripts, before the shared ones (a federation member's lists).
        self.scripts = scripts or {}
        self.port = 0
        self.closed: dict[str, float] = {}
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> HostileUpstream:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = future.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                doc = json.loads(await reader.readexactly(length)) if length else {}
                params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
                name = (
                    params.get("name") if doc.get("method") == "tools/call" else doc.get("method")
                )
                script = self.scripts.get(str(name)) or SCRIPTS.get(str(name), ok)
                exchange = Exchange(self, doc, str(name), reader, writer)
                await script(exchange)
                if not exchange.keep_alive:
                    break
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            OSError,
            ValueError,
        ):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()
