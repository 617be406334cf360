"""Property-based fuzzing end to end: generated requests through a real gateway process to a
hostile raw-HTTP upstream that answers each with a generated answer (JSON, SSE, newline-delimited
JSON, garbage, truncated, wrong ids, input_required anywhere, oversized, compressed, chunked at
random). Each exchange must end in one response with the properties of
``tests.support.fuzz.check_response`` within a time bound; the gateway's memory must stay bounded
over the run. Short by default; ``HYPOTHESIS_PROFILE=fuzz`` runs the long profile."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import Running, start_gateway
from tests.support.fuzz import (
    Answer,
    Received,
    Request,
    answers,
    check_response,
    fuzz_profile,
    fuzz_settings,
    requests,
)
from tests.support.raw_http import Conn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(7200 if fuzz_profile() else 300)]

MAX_INSPECT = 64 * 1024
CASE = b"x-fuzz-case"
SECONDS = 15.0


class ScriptedUpstream:
    """Raw HTTP/1.1 on loopback: answers each request with the answer registered under its
    ``X-Fuzz-Case`` header, in chunks as drawn, and records which cases reached it."""

    def __init__(self) -> None:
        self.answers: dict[bytes, Answer] = {}
        self.reached: set[bytes] = set()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = future.result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
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
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
                length, case = 0, b""
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    name = name.strip().lower()
                    if name == b"content-length":
                        length = int(value.strip())
                    elif name == CASE:
                        case = value.strip()
                await reader.readexactly(length)
                self.reached.add(case)
                answer = self.answers.get(case)
                if answer is None:
                    writer.write(b"HTTP/1.1 500 X\r\nContent-Length: 0\r\n\r\n")
                    continue
                head_lines = [
                    b"HTTP/1.1 %d X" % answer.status,
                    b"Transfer-Encoding: chunked",
                    *(k + b": " + v for k, v in answer.headers),
                ]
                writer.write(b"\r\n".join(head_lines) + b"\r\n\r\n")
                for chunk in answer.chunks:
                    if chunk:
                        writer.write(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
                        await writer.drain()
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ConnectionError,
            OSError,
            ValueError,
            TimeoutError,
        ):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


@pytest.fixture(scope="module")
def upstream() -> Iterator[ScriptedUpstream]:
    with ScriptedUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: ScriptedUpstream, module_tmp: Path) -> Iterator[Running]:
    config = {
        "listen": {"host": "127.0.0.1"},
        "routes": [
            {
                "name": "default",
                "path": "/mcp",
                "upstream": f"http://127.0.0.1:{upstream.port}/mcp",
                "era": "modern",
            }
        ],
        "auth": {"mode": "anonymous"},
        "limits": {
            "max_inspect_bytes": MAX_INSPECT,
            "max_body_bytes": 256 * 1024,
            "final_response_timeout": 5,
        },
    }
    with contextlib.ExitStack() as stack:
        yield start_gateway(stack, module_tmp, config=config, keys="k" * 43)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_cases = itertools.count()


def _exchange(gateway: Running, upstream: ScriptedUpstream, req: Request, answer: Answer) -> None:
    case = b"c%d" % next(_cases)
    upstream.answers[case] = answer
    lines = [
        f"{req.http_method} /mcp HTTP/1.1".encode(),
        *(k + b": " + v for k, v in req.headers),
        CASE + b": " + case,
        b"Content-Length: %d" % len(req.body),
    ]
    with Conn.open(gateway.port, timeout=SECONDS) as conn:
        conn.send(b"\r\n".join(lines) + b"\r\n\r\n" + req.body)
        response = conn.read_response()
    upstream.answers.pop(case, None)
    got = Received()
    got.take(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": [(k.encode(), v.encode("latin-1")) for k, v in response.headers.items()],
        }
    )
    got.take({"type": "http.response.body", "body": response.body, "more_body": False})
    check_response(req, got, reached=case in upstream.reached, answer=answer)


@st.composite
def exchanges(draw: st.DrawFn) -> tuple[Request, Answer]:
    req = draw(requests())
    rid = req.doc.get("id") if isinstance(req.doc, dict) else 1
    return req, draw(answers(rid, MAX_INSPECT))


def test_hostile_exchanges_through_a_gateway_process(
    gateway: Running, upstream: ScriptedUpstream
) -> None:
    pid = gateway.process.popen.pid
    before = _rss_kib(pid)

    @fuzz_settings(60, long_examples=3000)
    @given(exchanges())
    def run(exchange: tuple[Request, Answer]) -> None:
        _exchange(gateway, upstream, *exchange)

    run()
    assert gateway.process.running, gateway.process.log_tail()
    grown = _rss_kib(pid) - before
    assert grown < 64 * 1024, f"the gateway's RSS grew by {grown} KiB over the run"
    assert "Traceback" not in gateway.process.log_tail(20_000), gateway.process.log_tail()
