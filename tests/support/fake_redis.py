"""A tiny server speaking RESP (the Redis protocol) on a loopback port, answering ``WAIT`` with
what no real Redis sends (a status line, a string): the one misbehaviour a test of the store's
failure handling needs, which a real server cannot be made to show. Every other command gets the
plain answer a real server would give (``SET ... NX GET`` on a fresh key: nil)."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: ``HELLO``'s answer: a map (RESP3, the client's default) or a flat list (RESP2) of names and
#: values, as a real server gives it.
_HELLO_FIELDS = (
    b"$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"
    b"$5\r\nproto\r\n:%d\r\n$2\r\nid\r\n:1\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
    b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
)
_HELLO = {b"3": b"%7\r\n" + _HELLO_FIELDS % 3, b"2": b"*14\r\n" + _HELLO_FIELDS % 2}
#: What ``WAIT`` is answered with, in turn.
GARBAGE = [b"+garbage\r\n", b"$5\r\nthree\r\n", b"*1\r\n:1\r\n"]


def _read_command(rfile: Any) -> list[bytes] | None:
    line = rfile.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return line.split()  # inline command
    parts = []
    for _ in range(int(line[1:])):
        size = int(rfile.readline()[1:])
        parts.append(rfile.read(size + 2)[:-2])
    return parts


class _Handler(socketserver.StreamRequestHandler):
    timeout = 30

    def handle(self) -> None:
        server: FakeRedis = self.server  # type: ignore[assignment]
        resp3 = False
        while True:
            try:
                command = _read_command(self.rfile)
            except (OSError, ValueError):
                return
            if command is None:
                return
            name = command[0].upper() if command else b""
            with server.lock:
                server.commands.append(name.decode("latin-1"))
                if name == b"WAIT":
                    reply = GARBAGE[server.waits % len(GARBAGE)]
                    server.waits += 1
                elif name == b"SET":
                    reply = b"_\r\n" if resp3 else b"$-1\r\n"  # nil: the key was free
                elif name == b"HELLO":
                    resp3 = len(command) > 1 and command[1] == b"3"
                    reply = _HELLO[b"3" if resp3 else b"2"]
                elif name == b"PING":
                    reply = b"+PONG\r\n"
                else:
                    reply = b"+OK\r\n"
            self.wfile.write(reply)


class FakeRedis(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.commands: list[str] = []
        self.waits = 0

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@contextmanager
def fake_redis() -> Iterator[FakeRedis]:
    server = FakeRedis()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.daemon = True
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


__all__ = ["GARBAGE", "FakeRedis", "fake_redis"]
