"""HTTP/1.1 by hand, for tests that must send what no client library would (conflicting framing
headers, trickled heads, bodies cut short), and the upstream's own request log (the
``plaintext_state.py`` fixture's ``--log``) to prove what reached it."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def rpc(request_id: Any, method: str, **params: Any) -> bytes:
    params["_meta"] = META
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    ).encode()


def head(
    method: str = "tools/list",
    *,
    name: str | None = None,
    length: int | None = None,
    modern: bool = True,
    extra: list[str] | None = None,
    path: str = "/mcp",
) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Accept: {ACCEPT}",
    ]
    if modern:
        lines += [f"MCP-Protocol-Version: {MODERN}", f"Mcp-Method: {method}"]
        if name is not None:
            lines.append(f"Mcp-Name: {name}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines += extra or []
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def request(body: bytes, method: str = "tools/list", **kwargs: Any) -> bytes:
    return head(method, length=len(body), **kwargs) + body


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Conn:
    """One client connection with a response reader that understands Content-Length and
    chunked bodies (enough for the gateway's answers)."""

    sock: socket.socket
    buf: bytes = b""
    closed: bool = field(default=False)

    @classmethod
    def open(cls, port: int, timeout: float = 10.0) -> Conn:
        return cls(socket.create_connection(("127.0.0.1", port), timeout=timeout))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            if not self._fill():
                raise ConnectionError("closed mid-response")
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self) -> Response:
        status_line = self._line()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = self._line()
            if not line:
                break
            name, value = line.decode("latin-1").split(":", 1)
            headers[name.strip().lower()] = value.strip()
        if status == 100:
            return Response(100, headers, b"")
        if "content-length" in headers:
            body = self._exactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding") == "chunked":
            parts = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                parts.append(self._exactly(size))
                self._exactly(2)
            body = b"".join(parts)
        else:
            while self._fill():
                pass
            body, self.buf = self.buf, b""
        return Response(status, headers, body)

    def wait_closed(self, timeout: float) -> bool:
        """True when the server closes the connection within ``timeout`` seconds (whatever it
        sent before)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                if not self._fill():
                    return True
            except TimeoutError:
                return False
            except ConnectionError:
                return True
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Conn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def exchange(port: int, data: bytes, timeout: float = 10.0) -> Response:
    with Conn.open(port, timeout) as conn:
        conn.send(data)
        return conn.read_response()


#: The header a test marks its requests with; ``plaintext_state.py`` logs it as ``marker``.
MARKER_HEADER = "X-Test-Marker"


def new_marker(label: str = "m") -> str:
    """A marker no other request carries."""
    return f"{label}-{uuid.uuid4().hex}"


def marked(marker: str) -> str:
    """The header line that marks a request."""
    return f"{MARKER_HEADER}: {marker}"


class UpstreamLog:
    """The JSON-lines request log of ``tests/servers/plaintext_state.py --log FILE``.

    A test finds its own requests by a marker it sent (the ``X-Test-Marker`` header, or the
    JSON-RPC id), never by position or timing: the gateway's own requests (its start-up probes)
    and other tests' land in the same log, at any time. That a request never reached the upstream
    is shown by a positive control: a valid request with a marker of its own, sent after it on
    the same path, reached it, and the first one did not.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def requests(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        entries = [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
        return [e for e in entries if e.get("event") == "request"]

    def marked(self, marker: str) -> list[dict[str, Any]]:
        """The requests that carried ``marker``, in the order they arrived."""
        return [e for e in self.requests() if marker in (e.get("marker"), e.get("id"))]

    def wait_for(self, marker: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The requests that carried ``marker``, once there are ``count`` of them."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.marked(marker)
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(found)} of {count} request(s) marked {marker} reached the upstream"
                )
            time.sleep(0.02)

    def assert_never_arrived(self, marker: str, send_control: Callable[[str], None]) -> None:
        """``send_control(control)`` sends a valid request marked ``control`` the way the
        request marked ``marker`` was sent (same gateway, same path), after it was answered;
        once the control has reached the upstream, the first one would have too."""
        control = new_marker("control")
        send_control(control)
        self.wait_for(control)
        assert self.marked(marker) == [], f"the request marked {marker} reached the upstream"


@dataclass
class Captured:
    """One HTTP request as it arrived: its request line, headers in order, and body."""

    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)

    def replay(
        self,
        *,
        body: bytes | None = None,
        method: str | None = None,
        length: int | None = None,
        drop: tuple[str, ...] = (),
    ) -> bytes:
        """The request again, with another body or method (``Content-Length`` follows the body
        unless ``length`` says otherwise), without the headers named in ``drop``."""
        body = self.body if body is None else body
        skip = {"content-length", "transfer-encoding", "connection", *drop}
        lines = [f"{method or self.method} {self.path} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in self.headers if k.lower() not in skip]
        lines.append(f"Content-Length: {len(body) if length is None else length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Recorder:
    """A listening socket that records every connection and every request made to it (head and
    ``Content-Length`` body), answering each with ``503`` and closing: the place another party
    sends requests to, so that a test can see them (or that none came)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.socket()
        self.sock.bind((host, 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self.connections = 0
        self.requests: list[Captured] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.settimeout(5.0)
                try:
                    captured = self._read(conn)
                    if captured is not None:
                        self.requests.append(captured)
                    conn.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                except OSError:
                    pass

    @staticmethod
    def _read(conn: socket.socket) -> Captured | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None
            data += chunk
        head_bytes, body = data.split(b"\r\n\r\n", 1)
        request_line, *lines = head_bytes.decode("latin-1").split("\r\n")
        method, path, _ = request_line.split(" ", 2)
        headers = [(k.strip(), v.strip()) for k, v in (line.split(":", 1) for line in lines)]
        length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return Captured(method, path, headers, body[:length])

    def wait_until(self, match: Callable[[Captured], bool], timeout: float = 30.0) -> Captured:
        """The first request recorded that ``match`` accepts (a test finds its own by a marker it
        sent, never by position), waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((c for c in list(self.requests) if match(c)), None)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"no such request among the {len(self.requests)} recorded")
            time.sleep(0.02)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CannedListener:
    """A TCP listener on loopback that counts the connections it accepts and answers each with
    ``reply`` (or, when None, holds it silently until stopped). ``accepted`` is set at the first
    connection."""

    def __init__(self, reply: bytes | None = None) -> None:
        self.reply = reply
        self.connections = 0
        self.accepted = threading.Event()
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
            self.accepted.set()
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

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()


def http_answer(status: str, content_type: str, body: bytes) -> bytes:
    """A whole HTTP/1.1 response that closes the connection."""
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


@contextlib.contextmanager
def refused_port(host: str = "127.0.0.1") -> Iterator[int]:
    """A port bound and not listening for as long as the block runs: a connection to it is
    refused, and nothing else can take the port meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        yield sock.getsockname()[1]
