"""``mcp-edge check-config``: nothing is sent anywhere unless ``--probe`` asks. With it, only an
MCP answer is an era (real SDK servers of both eras); an upstream that cannot be reached, fails,
or answers as no MCP server is named as such, and the exit code is 1."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import start_upstream
from tests.support.legacy import start_legacy
from tests.support.processes import Completed, free_port, run_bounded, venv_command

pytestmark = pytest.mark.integration


class Listener:
    """A TCP listener on loopback that counts the connections it accepts and answers each with
    ``reply`` (or, when None, holds it silently until stopped)."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.reply = reply
        self.connections = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.settimeout(5)
            if self.reply is None:
                self._held.append(conn)
                continue
            try:
                conn.recv(65536)
                conn.sendall(self.reply)
            except OSError:
                pass
            conn.close()

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()


def _http(status: str, content_type: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body  # fmt: skip


@contextmanager
def _config(tmp: Path, routes: list[dict]) -> Iterator[Path]:
    path = tmp / "check.yaml"
    path.write_text(json.dumps({"routes": routes, "auth": {"mode": "anonymous"}}))
    yield path


def _check(path: Path, state_key: str, *flags: str) -> Completed:
    return run_bounded([*venv_command("mcp-edge"), "check-config", "--config", str(path), *flags], timeout=60,
                       env={"MCP_EDGE_STATE_KEYS": state_key})  # fmt: skip


def test_without_probe_no_connection_is_opened(tmp_path: Path, state_key: str) -> None:
    with Listener(_http("200 OK", "application/json", b"{}")) as listener:
        routes = [{"name": "auto", "path": "/a", "upstream": listener.url},
                  {"name": "modern", "path": "/m", "upstream": listener.url, "era": "modern"},
                  {"name": "legacy", "path": "/l", "upstream": listener.url, "era": "legacy"}]  # fmt: skip
        with _config(tmp_path, routes) as path:
            out = _check(path, state_key)
    assert out.returncode == 0, out.output
    assert "route auto: era auto, detected when the gateway runs (--probe asks now)" in out.output
    assert "route modern: era modern (configured)" in out.output
    assert "route legacy: era legacy (configured)" in out.output
    assert listener.connections == 0, f"check-config opened {listener.connections} connection(s)"


def test_probe_reports_a_closed_port_as_unreachable(tmp_path: Path, state_key: str) -> None:
    port = free_port()  # nothing listens there
    url = f"http://127.0.0.1:{port}/mcp"
    with _config(tmp_path, [{"name": "gone", "path": "/mcp", "upstream": url}]) as path:
        out = _check(path, state_key, "--probe")
    assert out.returncode == 1, out.output
    assert f"route gone: era auto, unreachable: connection refused by 127.0.0.1:{port} ({url})" in out.output
    assert "detected" not in out.output
    assert "did not answer as MCP servers" in out.output


@pytest.mark.parametrize(
    "reply,says",
    [
        (_http("404 Not Found", "text/html", b"<html>no such page</html>"), "not an MCP answer: HTTP 404 text/html"),
        (_http("403 Forbidden", "text/plain", b"blocked by proxy"), "not an MCP answer: HTTP 403 text/plain"),
        (_http("400 Bad Request", "", b""), "not an MCP answer: HTTP 400 (no content type)"),
        (_http("503 Service Unavailable", "application/json",
               b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"overloaded"}}'),
         "unreachable: the upstream failed (HTTP 503 application/json)"),
        (None, "unreachable: no answer within 2 s"),
    ],
    ids=["404-page", "403-proxy", "400-empty", "503-jsonrpc", "silence"],
)
def test_probe_never_takes_a_page_or_a_failure_for_an_era(tmp_path: Path, state_key: str, reply, says) -> None:
    with Listener(reply) as listener:
        with _config(tmp_path, [{"name": "odd", "path": "/mcp", "upstream": listener.url}]) as path:
            out = _check(path, state_key, "--probe")
    assert out.returncode == 1, out.output
    assert f"route odd: era auto, {says} ({listener.url})" in out.output
    assert "detected" not in out.output


def test_probe_detects_real_sdk_servers_of_both_eras(tmp_path: Path, stack, state_key: str) -> None:
    modern = start_upstream(stack, "everything.py", tmp_path)
    legacy = start_legacy(stack, tmp_path)
    routes = [{"name": "modern", "path": "/m", "upstream": modern.url},
              {"name": "legacy", "path": "/l", "upstream": legacy.url},
              {"name": "pinned", "path": "/p", "upstream": legacy.url, "era": "legacy"}]  # fmt: skip
    with _config(tmp_path, routes) as path:
        out = _check(path, state_key, "--probe")
    assert out.returncode == 0, out.output
    assert f"route modern: era auto, detected modern ({modern.url})" in out.output
    assert f"route legacy: era auto, detected legacy ({legacy.url})" in out.output
    assert f"route pinned: era legacy (configured), detected legacy ({legacy.url})" in out.output
