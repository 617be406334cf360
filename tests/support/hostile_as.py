"""A deliberately broken "authorization server" speaking raw HTTP/1.1, for what no real server
does: token answers that are oversized, of the wrong content type, without ``expires_in``, of a
token type other than Bearer/N_A, dripped slowly, or never finished.

``HostileAS(script)``: every request is answered by ``script(request)``, a coroutine returning
the raw bytes to write (or writing itself, for the slow ones, through ``request.writer``). The
metadata of RFC 8414 is answered for ``issuer`` unless the script handles it. Each request is
kept in ``requests`` (method, path, headers, form). Runs its own event loop in a daemon thread;
``stop()`` ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

from tests.support.processes import free_port


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    writer: asyncio.StreamWriter = field(repr=False)

    @property
    def form(self) -> list[tuple[str, str]]:
        return parse_qsl(self.body.decode("utf-8"), keep_blank_values=True)

    def param(self, name: str) -> str | None:
        return next((v for k, v in self.form if k == name), None)


Script = Callable[[Request], Awaitable[bytes | None]]


def answer(
    status: int, body: bytes, content_type: str = "application/json", extra: str = ""
) -> bytes:
    return (
        f"HTTP/1.1 {status} X\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    ).encode() + body


def json_answer(status: int, doc: Any) -> bytes:
    return answer(status, json.dumps(doc).encode())


class HostileAS:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.token_endpoint = self.issuer + "/token"
        self.requests: list[Request] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile authorization server did not start")

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "token_endpoint": self.token_endpoint,
            "grant_types_supported": ["urn:ietf:params:oauth:grant-type:token-exchange"],
        }

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            body = b""
            if "content-length" in headers:
                body = await reader.readexactly(int(headers["content-length"]))
            request = Request(method, path, headers, body, writer)
            self.requests.append(request)
            raw = await self.script(request)
            if raw is None and path == "/.well-known/oauth-authorization-server":
                raw = json_answer(200, self.metadata())
            if raw is not None:
                writer.write(raw)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, TimeoutError, ValueError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def token_requests(self) -> list[Request]:
        return [r for r in self.requests if r.path == "/token"]

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
