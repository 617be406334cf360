"""HTTP framing and slow clients: ambiguous framing is refused, a request cut short is never
forwarded, and slow or idle connections cannot hold the gateway.

Real processes throughout: the gateway (uvicorn + httptools with the gateway's connection limits,
``mcp_edge.edge.connections``) in front of ``tests/servers/plaintext_state.py``, whose request log
shows what reached it. Requests are written by hand (``tests.support.raw_http``).
"""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from mcp_edge.cluster.forward import FORWARD_PATH
from mcp_edge.edge.connections import BODY_GRACE_SECONDS, FRESH_SECONDS
from tests.conftest import start_gateway, start_upstream
from tests.support.raw_http import (
    Conn,
    UpstreamLog,
    exchange,
    head,
    marked,
    new_marker,
    request,
    rpc,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

HEADER_TIMEOUT = 1.0
BODY_TIMEOUT = 1.5
MAX_HEADER = 16 * 1024
CAP = 20


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    log = module_tmp / "upstream.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "plaintext_state.py", module_tmp, "--log", str(log))
        route = [{"name": "default", "path": "/mcp", "upstream": upstream.url}]
        tight = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "listen": {
                    "header_timeout": HEADER_TIMEOUT,
                    "body_timeout": BODY_TIMEOUT,
                    "max_header_bytes": MAX_HEADER,
                },
                "limits": {"max_body_bytes": 64 * 1024},
                "routes": route,
            },
        )
        capped = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "listen": {"max_connections": CAP, "header_timeout": 60, "body_timeout": 60},
                "routes": route,
            },
        )
        yield {"tight": tight, "capped": capped, "log": UpstreamLog(log)}


def tools_list(request_id: int = 7) -> bytes:
    return rpc(request_id, "tools/list")


BODY = tools_list()
CHUNKED = b"%x\r\n" % len(BODY) + BODY + b"\r\n0\r\n\r\n"
#: Stands for the marker of the test's request in the cases below (``with_marker``).
MARK = "@MARK@"


def framed(*headers: str) -> bytes:
    return head("tools/list", extra=[marked(MARK), *headers])


def with_marker(data: bytes, marker: str) -> bytes:
    return data.replace(MARK.encode(), marker.encode())


def control_on(port: int):
    """Sends a valid request marked with the marker it is given (the positive control)."""

    def send(marker: str) -> None:
        r = exchange(port, request(tools_list(70), extra=[marked(marker)]))
        assert r.status == 200 and r.json()["id"] == 70, r

    return send


def trickle_until_closed(conn: Conn, piece: bytes, *, every: float, limit: float = 20) -> bool:
    """Send ``piece`` every ``every`` seconds until the gateway closes the connection (True) or
    ``limit`` seconds pass (False)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            conn.send(piece)
        except OSError:
            return True
        if conn.wait_closed(every):
            return True
    return False


def trickle_head(conn: Conn) -> bytes:
    """Send a request head one header line every quarter second (for at most ten seconds) until
    the gateway closes the connection; what it answered."""
    conn.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    for i in range(40):
        try:
            conn.send(b"X-Slow-%d: a\r\n" % i)
        except OSError:
            break
        if conn.wait_closed(0.25):
            break
    return conn.buf


# ---- framing ------------------------------------------------------------------------------------

FRAMING = [
    (
        "Content-Length and Transfer-Encoding",
        framed("Content-Length: 5", "Transfer-Encoding: chunked") + CHUNKED,
    ),
    (
        "Transfer-Encoding and Content-Length",
        framed("Transfer-Encoding: chunked", f"Content-Length: {len(BODY)}") + CHUNKED,
    ),
    (
        "two different Content-Lengths",
        framed(f"Content-Length: {len(BODY)}", "Content-Length: 5") + BODY,
    ),
    (
        "two equal Content-Lengths",
        framed(f"Content-Length: {len(BODY)}", f"Content-Length: {len(BODY)}") + BODY,
    ),
    ("Content-Length list", framed(f"Content-Length: {len(BODY)}, {len(BODY)}") + BODY),
    ("Content-Length negative", framed("Content-Length: -1") + BODY),
    ("Content-Length with a sign", framed(f"Content-Length: +{len(BODY)}") + BODY),
    ("space before the colon", framed(f"Content-Length : {len(BODY)}") + BODY),
    ("chunked, then identity", framed("Transfer-Encoding: chunked, identity") + CHUNKED),
    ("unknown transfer coding", framed("Transfer-Encoding: xchunked") + CHUNKED),
    ("obs-fold Transfer-Encoding", framed("Transfer-Encoding:", " chunked") + CHUNKED),
    ("bad chunk size", framed("Transfer-Encoding: chunked") + b"zz\r\n" + BODY + b"\r\n0\r\n\r\n"),
    ("bare LF line ends", framed(f"Content-Length: {len(BODY)}").replace(b"\r\n", b"\n") + BODY),
    ("NUL in a header value", framed("X-A: a\x00b", f"Content-Length: {len(BODY)}") + BODY),
]


@pytest.mark.parametrize("case,data", FRAMING, ids=[c[0] for c in FRAMING])
def test_ambiguous_framing_is_refused(env, case, data):
    marker = new_marker("framing")
    r = exchange(env["tight"].port, with_marker(data, marker))
    assert r.status == 400, (case, r)
    assert r.json()["error"]["code"] == -32600 and r.json()["id"] is None
    assert r.headers.get("connection") == "close"
    env["log"].assert_never_arrived(marker, control_on(env["tight"].port))


@pytest.mark.parametrize("coding", ["chunked", "identity, chunked"])
def test_chunked_bodies_are_read(env, coding):
    marker = new_marker("chunked")
    data = (
        framed(f"Transfer-Encoding: {coding}")
        + b"%x;ext=1\r\n" % len(BODY)
        + BODY
        + b"\r\n0\r\n\r\n"
    )
    r = exchange(env["tight"].port, with_marker(data, marker))
    assert r.status == 200 and r.json()["id"] == 7
    (arrived,) = env["log"].wait_for(marker)
    assert (arrived["method"], arrived["id"]) == ("tools/list", 7)


def test_pipelined_requests_are_answered_in_order(env):
    first, hostile_marker, third = new_marker("first"), new_marker("hostile"), new_marker("third")
    hostile = b'{"jsonrpc":"2.0","id":2,"method":"tools/list","method":"tools/call","params":{}}'
    with Conn.open(env["tight"].port) as conn:
        conn.send(
            request(tools_list(1), extra=[marked(first)])
            + request(hostile, extra=[marked(hostile_marker)])
            + request(tools_list(3), extra=[marked(third)])
        )
        answers = [conn.read_response() for _ in range(3)]
    assert [a.status for a in answers] == [200, 400, 200]
    assert [a.json()["id"] for a in answers] == [1, 2, 3]
    (one,), (three,) = env["log"].wait_for(first), env["log"].wait_for(third)
    assert (one["id"], three["id"]) == (1, 3) and one["seq"] < three["seq"]
    # The third request, sent after the hostile one on the same connection, is its control.
    assert env["log"].marked(hostile_marker) == []


def test_expect_100_continue(env):
    with Conn.open(env["tight"].port) as conn:
        conn.send(head("tools/list", length=len(BODY), extra=["Expect: 100-continue"]))
        assert conn.read_response().status == 100
        conn.send(BODY)
        r = conn.read_response()
        assert r.status == 200 and r.json()["id"] == 7
    # Too large: refused without 100 Continue (no body is sent), and the connection, whose
    # framing now expects a body that will not come, is closed.
    marker = new_marker("too-large")
    with Conn.open(env["tight"].port) as conn:
        conn.send(
            head("tools/list", length=10_000_000, extra=["Expect: 100-continue", marked(marker)])
        )
        r = conn.read_response()
        assert r.status == 413 and r.headers["connection"] == "close"
        assert conn.wait_closed(5)
    env["log"].assert_never_arrived(marker, control_on(env["tight"].port))


def test_the_rest_of_a_refused_body_is_dropped_and_the_connection_stays_usable(env):
    with Conn.open(env["tight"].port) as conn:
        conn.send(head("tools/list", length=200_000))
        r = conn.read_response()
        assert r.status == 413 and "connection" not in r.headers
        conn.send(b"x" * 200_000 + request(tools_list(8)))
        r = conn.read_response()
        assert r.status == 200 and r.json()["id"] == 8


def test_a_refused_body_trickled_for_ever_is_cut_off(env):
    with Conn.open(env["tight"].port) as conn:
        conn.send(head("tools/list", length=10_000_000))
        assert conn.read_response().status == 413
        started = time.monotonic()
        closed = trickle_until_closed(conn, b"x" * 100, every=0.2)
        assert closed and time.monotonic() - started < BODY_TIMEOUT + BODY_GRACE_SECONDS + 5


@pytest.mark.parametrize("half_close", [False, True], ids=["closed", "half-closed"])
def test_a_request_cut_short_is_never_forwarded(env, half_close):
    """The part that arrived is a whole JSON document, but the request said it had more."""
    marker = new_marker("cut-short")
    body = tools_list(9)
    with Conn.open(env["tight"].port) as conn:
        conn.send(head("tools/list", length=len(body) + 50, extra=[marked(marker)]) + body)
        time.sleep(0.3)  # (pacing: the head is read before the connection ends, most of the time)
        if half_close:
            conn.sock.shutdown(socket.SHUT_WR)
            assert conn.wait_closed(5)
    env["log"].assert_never_arrived(marker, control_on(env["tight"].port))


# ---- slow clients -------------------------------------------------------------------------------


def test_a_slow_body_gets_408(env):
    marker = new_marker("slow-body")
    body = tools_list(10)
    with Conn.open(env["tight"].port) as conn:
        started = time.monotonic()
        conn.send(head("tools/list", length=len(body), extra=[marked(marker)]) + body[:20])
        r = conn.read_response()
        elapsed = time.monotonic() - started
        assert r.status == 408 and r.json()["error"]["data"] == {"reason": "body_timeout"}
        assert r.headers["connection"] == "close"
        assert BODY_TIMEOUT * 0.8 <= elapsed < BODY_TIMEOUT + 5
        assert conn.wait_closed(5)
    env["log"].assert_never_arrived(marker, control_on(env["tight"].port))


@pytest.mark.parametrize("path", [FORWARD_PATH, "/healthz", "/elsewhere"])
def test_a_slow_body_elsewhere_is_cut_off_too(env, path):
    """Paths the edge guard does not read: the replicas' forwarding endpoint and the admin
    endpoints refuse a body before reading it, and a path the listener does not serve at all is
    answered 404 from its head; each closes the connection at once, long before the body
    deadline."""
    with Conn.open(env["tight"].port) as conn:
        started = time.monotonic()
        conn.send(head("tools/list", length=1000, path=path) + b"x" * 10)
        closed = trickle_until_closed(conn, b"x", every=0.5)
        elapsed = time.monotonic() - started
        assert closed and elapsed < BODY_TIMEOUT * 0.8, elapsed


def test_a_trickled_head_gets_408(env):
    with Conn.open(env["tight"].port) as conn:
        started = time.monotonic()
        answer = trickle_head(conn)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b'"id":null' in answer
    assert HEADER_TIMEOUT * 0.8 <= elapsed < HEADER_TIMEOUT + 5


def test_a_later_request_on_a_kept_alive_connection_has_its_own_head_deadline(env):
    """The head deadline runs from the first byte of every request, not only the first one's
    (a request that arrives whole arms no timer; one whose head is still coming does)."""
    with Conn.open(env["tight"].port) as conn:
        conn.send(request(tools_list(11)))
        r = conn.read_response()
        assert r.status == 200 and r.json()["id"] == 11
        started = time.monotonic()
        answer = trickle_head(conn)
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert HEADER_TIMEOUT * 0.8 <= elapsed < HEADER_TIMEOUT + 5


def test_a_later_slow_body_on_a_kept_alive_connection_is_cut_off(env):
    """The connection layer's body deadline, for a request after one that arrived whole."""
    with Conn.open(env["tight"].port) as conn:
        conn.send(request(tools_list(12)))
        assert conn.read_response().status == 200
        started = time.monotonic()
        # Answered at once (413) without reading the body, which the server then reads and drops
        # (a path the gateway does not serve would close the connection at once instead).
        conn.send(head("tools/list", length=200_000) + b"x" * 10)
        closed = trickle_until_closed(conn, b"x", every=0.5)
        elapsed = time.monotonic() - started
    assert closed and BODY_TIMEOUT * 0.8 <= elapsed < BODY_TIMEOUT + BODY_GRACE_SECONDS + 5


def test_an_idle_connection_is_closed_without_an_answer(env):
    with Conn.open(env["tight"].port) as conn:
        started = time.monotonic()
        assert conn.wait_closed(HEADER_TIMEOUT + 5)
        assert conn.buf == b"" and time.monotonic() - started >= HEADER_TIMEOUT * 0.8


def test_a_head_over_the_limit_gets_431(env):
    marker = new_marker("big-head")
    data = framed("X-Big: " + "a" * (MAX_HEADER + 100), f"Content-Length: {len(BODY)}") + BODY
    r = exchange(env["tight"].port, with_marker(data, marker))
    assert r.status == 431 and r.json()["error"]["code"] == -32600

    def just_under_the_limit(control: str) -> None:  # is fine: the positive control
        data = framed("X-Big: " + "a" * (MAX_HEADER - 1000), f"Content-Length: {len(BODY)}") + BODY
        assert exchange(env["tight"].port, with_marker(data, control)).status == 200

    env["log"].assert_never_arrived(marker, just_under_the_limit)


def open_slow(port: int, n: int) -> list[Conn]:
    """``n`` connections that sent the start of a head and nothing more."""
    conns = []
    for _ in range(n):
        conn = Conn.open(port)
        conn.send(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        conns.append(conn)
    return conns


def closed_by_server(conns: list[Conn]) -> int:
    return sum(1 for c in conns if c.wait_closed(0.01))


def test_slow_connections_beyond_the_cap_make_room_for_honest_calls(env):
    """Five times the cap of slowloris connections (their head deadline is a minute away): each
    new connection closes the one that waited longest without a request in progress, so honest
    calls are served, and the gateway never holds more than the cap."""
    port = env["capped"].port
    slow = open_slow(port, CAP * 5)
    time.sleep(FRESH_SECONDS + 0.2)  # a connection only just opened is not taken for a slow one
    try:
        for i in range(10):
            r = exchange(port, request(tools_list(100 + i)))
            assert r.status == 200 and r.json()["id"] == 100 + i
        assert closed_by_server(slow) >= CAP * 5 - CAP
    finally:
        for c in slow:
            c.close()


def test_when_every_connection_has_a_request_in_progress_a_new_one_gets_503(env):
    port = env["capped"].port
    body = tools_list(11)
    busy = []
    try:
        for _ in range(CAP):
            conn = Conn.open(port)
            conn.send(head("tools/list", length=len(body), extra=["Expect: 100-continue"]))
            # 100 Continue: the gateway has read the head and waits for the body.
            assert conn.read_response().status == 100
            conn.send(body[:10])  # in progress: the body is coming
            busy.append(conn)
        with Conn.open(port) as late:
            late.send(request(tools_list(12)))
            r = late.read_response()
        assert r.status == 503 and r.headers["retry-after"] == "1"
        assert r.json()["error"]["code"] == -32603
        # Nobody in progress was cut off: the first of them finishes its request.
        busy[0].send(body[10:])
        r = busy[0].read_response()
        assert r.status == 200 and r.json()["id"] == 11
    finally:
        for c in busy:
            c.close()
    # Once the gateway has seen them go, there is room again.
    deadline = time.monotonic() + 30
    while (
        r := exchange(port, request(tools_list(13)))
    ).status == 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert r.status == 200 and r.json()["id"] == 13
