"""Graceful shutdown with listen streams open: on SIGTERM every ``subscriptions/listen`` stream
ends at once, normally and without a response (its client listens again, elsewhere), whatever
serves it (a 2026-07-28 upstream's stream passed through, a 2025-era upstream's and a stdio
route's bridged stream, a route with members' fan-in), while an ordinary call in flight still finishes with its result, and the
process exits once it has: not after ``listen.drain_seconds``."""

from __future__ import annotations

import json
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import start_gateway, start_upstream
from tests.integration.test_stdio_upstream import (
    ACCEPT,
    MODERN,
    PRINCIPAL_HEADER,
    config,
    wait_ready,
)
from tests.support.legacy import start_legacy
from tests.support.sandbox import stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: Far longer than any stream here may take to end once the gateway is told to stop.
DRAIN_SECONDS = 30
#: How long a listen stream may take to end after SIGTERM (a third of the drain time).
STREAM_END_BOUND = 10.0
#: The slow call: progress every second for this many steps (it ends well inside the drain).
STEPS = 6


class Stream:
    """One POST read in a thread as an SSE stream: every JSON message it carries, in order, and
    when and how it ended (``error``: the body was cut off, or the read timed out)."""

    def __init__(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.messages: list[dict[str, Any]] = []
        self.status = 0
        self.error: BaseException | None = None
        self.ended_at: float | None = None
        self._url, self._body, self._headers = url, body, headers
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        # A read timeout past the drain: a stream held until the drain ends fails the test.
        timeout = httpx.Timeout(10, read=DRAIN_SECONDS + 15)
        try:
            with (
                httpx.Client(timeout=timeout) as client,
                client.stream("POST", self._url, json=self._body, headers=self._headers) as r,
            ):
                self.status = r.status_code
                for line in r.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        self.messages.append(json.loads(line[5:]))
        except BaseException as exc:  # noqa: BLE001  (reported by the test)
            self.error = exc
        finally:
            self.ended_at = time.monotonic()

    def wait_for(self, predicate: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate() and self.ended_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert predicate(), (self.status, self.messages, self.error)

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)


def _meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }


def listen(url: str, marker: str, notifications: dict[str, Any]) -> Stream:
    body = {
        "jsonrpc": "2.0",
        "id": marker,
        "method": "subscriptions/listen",
        "params": {"notifications": notifications, "_meta": _meta()},
    }
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "subscriptions/listen",
        PRINCIPAL_HEADER: "alice",
    }
    return Stream(url, body, headers)


def slow_call(url: str, marker: str) -> Stream:
    body = {
        "jsonrpc": "2.0",
        "id": marker,
        "method": "tools/call",
        "params": {
            "name": "slow_progress",
            "arguments": {"steps": STEPS, "delay": 1.0},
            "_meta": {**_meta(), "progressToken": marker},
        },
    }
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "slow_progress",
        PRINCIPAL_HEADER: "alice",
    }
    return Stream(url, body, headers)


def acknowledged(stream: Stream) -> bool:
    return any(
        m.get("method") == "notifications/subscriptions/acknowledged" for m in stream.messages
    )


@pytest.mark.parametrize(
    "workers",
    [1, pytest.param(2, marks=pytest.mark.timeout(360))],
    ids=["one-process", "two-workers"],
)
def test_sigterm_ends_listen_streams_at_once_and_drains_the_rest(
    tmp_path: Path, state_key: str, workers: int
):
    """With ``--workers 2`` each worker gets SIGTERM from the supervisor, and ends the streams
    it serves (which worker took which stream does not matter)."""
    with ExitStack() as stack:
        upstream = start_upstream(stack, "streaming.py", tmp_path)
        legacy = start_legacy(stack, tmp_path, "--subscriptions")
        routes = [
            {"name": "modern", "path": "/modern", "upstream": upstream.url, "era": "modern"},
            {"name": "legacy", "path": "/legacy", "upstream": legacy.url, "era": "legacy"},
            {
                "name": "local",
                "path": "/local",
                "upstream": {"command": stdio_server_command("session_state.py")},
            },
            {
                "name": "fed",
                "path": "/fed",
                "members": [
                    {"name": "one", "upstream": upstream.url, "era": "modern"},
                    {"name": "two", "upstream": upstream.url, "era": "modern"},
                ],
            },
        ]
        gateway = start_gateway(
            stack,
            tmp_path,
            keys=state_key,
            config=config(routes),
            anonymous=False,
            env={"MCP_EDGE_DRAIN_SECONDS": str(DRAIN_SECONDS), "MCP_EDGE_WORKERS": str(workers)},
            startup_timeout=150,
        )
        wait_ready(gateway)
        base = gateway.base
        tools = {"toolsListChanged": True}
        wanted = {
            "modern": tools,
            "legacy": {"resourceSubscriptions": ["static://hello"]},  # (no tool list changes)
            "local": tools,
            "fed": tools,
        }
        streams = {
            name: listen(f"{base}/{name}", f"listen-{name}", notifications)
            for name, notifications in wanted.items()
        }
        for stream in streams.values():
            stream.wait_for(lambda s=stream: acknowledged(s))
        call = slow_call(f"{base}/modern", "slow-call")
        call.wait_for(
            lambda: any(m.get("method") == "notifications/progress" for m in call.messages)
        )

        signalled = time.monotonic()
        gateway.process.popen.send_signal(signal.SIGTERM)

        for stream in (*streams.values(), call):
            stream.join(DRAIN_SECONDS + 20)
        call_end = call.ended_at
        assert call_end is not None and call.error is None, call.error
        results = [m for m in call.messages if m.get("id") == "slow-call"]
        assert results and results[0]["result"]["content"][0]["text"] == f"done after {STEPS} steps"
        ended: dict[str, float] = {}
        for name, stream in streams.items():
            assert stream.ended_at is not None, name
            ended[name] = stream.ended_at - signalled
            # Ended normally (a complete body, no read timeout), and without a response.
            assert stream.error is None, (name, stream.error)
            assert stream.status == 200, name
            assert not [m for m in stream.messages if "id" in m], (name, stream.messages)
            assert ended[name] < STREAM_END_BOUND, (name, ended[name])
        # The call went on after the streams ended: it was still in flight when they did.
        assert call_end - signalled > max(ended.values())

        deadline = time.monotonic() + DRAIN_SECONDS + 20
        while gateway.process.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not gateway.process.running
        exited = time.monotonic() - signalled
        # Once the slow call finished nothing held the drain: the process stopped its local
        # server and exited, long before drain_seconds.
        assert exited - (call_end - signalled) < STREAM_END_BOUND, exited
        assert exited < DRAIN_SECONDS, exited
        print(  # (shown with -s: the measured times)
            "listen streams ended after SIGTERM: "
            + ", ".join(f"{name} {t:.2f} s" for name, t in ended.items())
            + f"; slow call done {call_end - signalled:.2f} s; process exited {exited:.2f} s"
        )
