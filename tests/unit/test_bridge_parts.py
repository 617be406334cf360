"""The bridge's other sans-I/O parts: sealed session tokens, sealed forwards, era detection, the
session pool and the round driver (over in-memory streams)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
import pytest

from mcp_edge.cluster import forward
from mcp_edge.core.seal import KeyRing, StateKey, open_blob, seal_blob
from mcp_edge.core.session_token import open_session, seal_session
from mcp_edge.edge.body import Reservation
from mcp_edge.upstream.http.era import classify_probe, looks_legacy
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.driver import Ended, Final, Questions, drive
from mcp_edge.upstream.legacy.pool import SessionPool


def ring(*secrets: bytes) -> KeyRing:
    return KeyRing([StateKey.from_secret(s) for s in secrets or (os.urandom(32),)])


# ---------------------------------------------------------------- session tokens


def test_session_token_round_trip_and_bindings():
    r = ring()
    upstream_id, endpoint = "upstream-session-7f3a9c", "http://upstream-one:3001/mcp"
    token = seal_session(
        r, audience="gw/a", principal_id="alice", endpoint=endpoint, session_id=upstream_id
    )
    assert upstream_id not in token and "upstream-one" not in token  # encrypted, not just signed
    opened = open_session(r, token, audience="gw/a", principal_id="alice")
    assert opened is not None and (opened.endpoint, opened.session_id) == (endpoint, upstream_id)
    assert open_session(r, token, audience="gw/a", principal_id="bob") is None
    assert open_session(r, token, audience="gw/b", principal_id="alice") is None
    assert open_session(ring(), token, audience="gw/a", principal_id="alice") is None
    i = len(token) - 5
    tampered = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]
    assert open_session(r, tampered, audience="gw/a", principal_id="alice") is None
    assert open_session(r, "abc", audience="gw/a", principal_id="alice") is None
    assert open_session(r, "x" * 5000, audience="gw/a", principal_id="alice") is None


def test_rotated_key_still_opens_session_tokens():
    old, new = os.urandom(32), os.urandom(32)
    token = seal_session(
        ring(old), audience="a", principal_id="p", endpoint="http://u:1/mcp", session_id="s-42"
    )
    opened = open_session(ring(new, old), token, audience="a", principal_id="p")
    assert opened is not None and (opened.endpoint, opened.session_id) == ("http://u:1/mcp", "s-42")
    assert (
        open_session(ring(new), token, audience="a", principal_id="p") is None
    )  # the old key gone


def test_sealed_purposes_never_cross():
    r = ring()
    blob = seal_blob(r, "mcpes1", b"{}")
    assert open_blob(r, "mcpes1", blob) == b"{}"
    for other in ("mcpef2", "mcpefb2", "mcpefa2", "mcper2"):
        assert open_blob(r, other, blob.replace("mcpes1", other, 1)) is None
    with pytest.raises(AssertionError):
        seal_blob(r, "mcpe1", b"{}")


# ---------------------------------------------------------------- forwards


def test_forward_payload_seal_open_expiry():
    r = ring()
    limit = forward.body_limit(4096)
    token = forward.seal_payload(
        r, forward.BODY_PURPOSE, {"route": "a", "params": {"x": 1}}, now=1000.0
    )
    opened = forward.open_payload(r, forward.BODY_PURPOSE, token, now=1000.0 + 29, max_chars=limit)
    assert opened == {"route": "a", "params": {"x": 1}, "exp": 1030}
    assert (
        forward.open_payload(r, forward.BODY_PURPOSE, token, now=1000.0 + 31, max_chars=limit)
        is None
    )
    assert (
        forward.open_payload(ring(), forward.BODY_PURPOSE, token, now=1000.0, max_chars=limit)
        is None
    )
    assert (
        forward.open_payload(r, forward.ANSWER_PURPOSE, token, now=1000.0, max_chars=limit) is None
    )
    assert (
        forward.open_payload(r, forward.BODY_PURPOSE, "mcpefb2.x.y", now=1000.0, max_chars=limit)
        is None
    )
    session_token = seal_blob(r, "mcpes1", orjson.dumps({"exp": 2000}))
    assert (
        forward.open_payload(r, forward.BODY_PURPOSE, session_token, now=1000.0, max_chars=limit)
        is None
    )


def test_forward_bounds_fit_a_retry_and_follow_the_limits():
    r = ring()
    params = {"requestState": "s" * 2000, "arguments": {"blob": "x" * (1024 * 1024 - 3000)}}
    body, headers, _ = forward.Forwarder(r, lambda: None, clock=lambda: 1000.0).request(  # type: ignore[arg-type]
        {"route": "a", "principal": "p" * 200, "id": 7, "method": "tools/call", "params": params}
    )
    assert len(orjson.dumps(params)) <= 1024 * 1024 and len(body) <= forward.body_limit(1024 * 1024)
    assert forward.body_limit(4 * 1024 * 1024) < 6 * 1024 * 1024  # the default: well under 12 MiB
    assert forward.body_limit(64 * 1024) < forward.body_limit(1024 * 1024)
    assert headers["x-mcp-edge-peer"].startswith("mcpef2.")


# ---------------------------------------------------------------- era detection


@pytest.mark.parametrize(
    "status,ctype,body,era",
    [
        (
            400,
            "application/json",
            b'{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}',
            "legacy",
        ),
        (
            200,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"]}}',
            "modern",
        ),
        (
            200,
            "text/event-stream",
            b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}\r\n\r\n',
            "modern",
        ),
        (
            200,
            "text/event-stream",
            b'data: {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}\n\n',
            "legacy",
        ),
        (
            400,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":["2026-07-28","2027-01-01"]}}}',
            "modern",
        ),
        (
            400,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":["2099-01-01"]}}}',
            "legacy",
        ),
        # No MCP answer: a page, a bare status, a failing upstream, a result with an error status.
        (404, "text/plain", b"Not Found", None),
        (405, "", b"", None),
        (403, "text/html", b"<html>blocked</html>", None),
        (400, "application/json", b'{"message":"bad request"}', None),
        (500, "text/html", b"<html>", None),
        (502, "application/json", b"{}", None),
        (
            503,
            "application/json",
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"overloaded"}}',
            None,
        ),
        (
            500,
            "application/json",
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}',
            None,
        ),
        (404, "application/json", b'{"jsonrpc":"2.0","id":1,"result":{}}', None),
    ],
)
def test_classify_probe(status, ctype, body, era):
    assert classify_probe(status, ctype, body) == era


def test_looks_legacy():
    assert looks_legacy(
        400, b'{"error":{"code":-32600,"message":"Bad Request: Missing session ID"}}'
    )
    assert not looks_legacy(
        400, b'{"error":{"code":-32022,"message":"Unsupported protocol version"}}'
    )
    assert not looks_legacy(200, b"session")


# ---------------------------------------------------------------- session pool


class FakeSession:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_pool_reuses_per_key_and_expires():
    now = [0.0]
    pool: SessionPool[FakeSession] = SessionPool(idle_seconds=10, max_idle=2, clock=lambda: now[0])
    made: list[FakeSession] = []

    async def create() -> FakeSession:
        made.append(FakeSession(f"s{len(made)}"))
        return made[-1]

    a = await pool.acquire(("k1",), create)
    pool.release(("k1",), a)
    assert await pool.acquire(("k1",), create) is a  # reused
    other = await pool.acquire(("k2",), create)
    assert other is not a  # another key never gets it
    pool.release(("k1",), a)
    now[0] = 11.0
    fresh = await pool.acquire(("k1",), create)
    assert fresh is not a
    await asyncio.sleep(0)
    assert a.closed  # expired sessions are closed
    pool.release(("k1",), fresh)
    pool.release(("k2",), other)
    extra = FakeSession("extra")
    pool.release(("k3",), extra)  # over max_idle: closed instead of kept
    await asyncio.sleep(0)
    assert extra.closed and pool.idle == 2
    await pool.aclose()
    assert fresh.closed and other.closed and pool.idle == 0


# ---------------------------------------------------------------- driver


class FakeStream:
    """Messages as the call reader gives them: (from the standalone stream?, event id, message)."""

    def __init__(self, events: list[tuple[str | None, Any]], *, side: bool = False) -> None:
        self.events = [(side, e, m) for e, m in events]

    async def next(self) -> tuple[bool, str | None, Any] | None:
        return self.events.pop(0) if self.events else None


class SlowStream(FakeStream):
    """Like FakeStream, but waits ``gap`` seconds before each message after the first."""

    def __init__(self, events: list[tuple[str | None, Any]], gap: float) -> None:
        super().__init__(events)
        self.gap = gap
        self.first = True

    async def next(self) -> tuple[bool, str | None, Any] | None:
        if not self.first:
            await asyncio.sleep(self.gap)
        self.first = False
        return await super().next()


class RecordingSession:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    async def post(self, message: dict[str, Any]) -> None:
        self.posted.append(message)


def ask(request_id: Any, message: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "elicitation/create",
        "params": {"message": message, "requestedSchema": {"type": "object"}},
    }


def fp(message: str) -> str:
    return wire.fingerprint(
        {
            "method": "elicitation/create",
            "params": {"message": message, "requestedSchema": {"type": "object"}},
        }
    )


async def ignore(_: wire.Notification) -> None:
    return None


async def test_driver_answers_ping_refuses_other_requests_and_relays_notifications():
    notes: list[wire.Notification] = []

    async def on_note(n: wire.Notification) -> None:
        notes.append(n)

    session = RecordingSession()
    stream = FakeStream(
        [
            (None, {"jsonrpc": "2.0", "id": 5, "method": "ping"}),
            (None, {"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {}}),
            (
                None,
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
            ),
            (None, {"jsonrpc": "2.0", "id": "other", "result": {}}),
            (None, {"jsonrpc": "2.0", "id": "mine", "result": {"content": []}}),
        ]
    )
    outcome = await drive(stream, session, "mine", on_notification=on_note)
    assert isinstance(outcome, Final) and outcome.response.result == {"content": []}
    assert session.posted[0] == {"jsonrpc": "2.0", "id": 5, "result": {}}
    assert session.posted[1]["id"] == 6 and session.posted[1]["error"]["code"] == -32601
    assert [n.method for n in notes] == ["notifications/progress"]


async def test_driver_returns_the_question():
    outcome = await drive(
        FakeStream([("ev1", ask(0, "Q1"))]), RecordingSession(), "m", on_notification=ignore
    )
    assert isinstance(outcome, Questions) and len(outcome.asked) == 1
    q = outcome.asked[0]
    assert q.request.id == 0 and q.fingerprint == fp("Q1") and not q.from_side
    assert isinstance(
        await drive(FakeStream([]), RecordingSession(), "m", on_notification=ignore), Ended
    )


def roots_list(request_id: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "roots/list"}


async def test_a_request_on_the_standalone_stream_is_answered_never_asked():
    """What the server sends on its own (roots/list on the standalone stream, as the npm
    server-everything does after a session starts) is no question of the call."""
    session = RecordingSession()
    roots = {"roots": [{"uri": "file:///w"}], "resultType": "complete"}

    def unsolicited(request: wire.ServerRequest) -> dict[str, Any]:
        return wire.unsolicited_answer(request, {"roots": {}}, roots)

    stream = FakeStream([("s1", roots_list(0)), ("s2", ask(1, "Q on the side"))], side=True)
    stream.events.append((False, "m1", {"jsonrpc": "2.0", "id": "m", "result": {"content": []}}))
    outcome = await drive(stream, session, "m", on_notification=ignore, unsolicited=unsolicited)
    assert isinstance(outcome, Final)  # no round: the call went on
    assert session.posted[0] == {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"roots": [{"uri": "file:///w"}]},
    }
    assert session.posted[1]["id"] == 1 and session.posted[1]["error"]["code"] == -32601


async def test_a_request_is_answered_once_across_streams_and_rounds():
    """An event store that replays the standalone stream onto the call's resumed stream brings
    the same request back: it is neither asked nor answered a second time, in this round or a
    later one (the caller carries ``answered`` from round to round)."""
    session = RecordingSession()
    answered: set[str] = set()
    stream = FakeStream([("s1", roots_list(0))], side=True)
    stream.events += [
        (False, "m1", roots_list(0)),  # the replay, on the call's own stream
        (False, "m2", ask(1, "Q1")),
    ]
    outcome = await drive(stream, session, "m", on_notification=ignore, answered=answered)
    assert isinstance(outcome, Questions) and [q.request.id for q in outcome.asked] == [1]
    assert [m["id"] for m in session.posted] == [0]  # answered once
    assert answered == {wire.request_key(0), wire.request_key(1)}
    # The next round (resumed from before both) sees them again: nothing is posted or asked.
    later = FakeStream(
        [
            ("m1", roots_list(0)),
            ("m2", ask(1, "Q1")),
            ("m3", {"jsonrpc": "2.0", "id": "m", "result": {"content": []}}),
        ]
    )
    outcome = await drive(later, session, "m", on_notification=ignore, answered=answered)
    assert isinstance(outcome, Final) and [m["id"] for m in session.posted] == [0]
    # An id is the JSON value: 1 and "1" are two requests.
    assert wire.request_key(1) != wire.request_key("1")


async def test_a_caller_can_say_a_request_is_not_the_calls():
    """Over stdio nothing names the call: the bridge decides (``belongs``)."""
    session = RecordingSession()
    stream = FakeStream([(None, roots_list(7)), (None, ask(8, "Q"))])
    outcome = await drive(
        stream,
        session,
        "m",
        on_notification=ignore,
        belongs=lambda request, side: request.method != "roots/list",
    )
    assert isinstance(outcome, Questions) and [q.request.id for q in outcome.asked] == [8]
    assert session.posted[0]["id"] == 7 and session.posted[0]["error"]["code"] == -32601


async def test_questions_asked_together_make_one_round():
    together = SlowStream(
        [(None, ask(0, "Q1")), (None, ask(1, "Q2")), (None, ask(2, "Q3"))], gap=0.001
    )
    outcome = await drive(together, RecordingSession(), "m", on_notification=ignore, window=0.5)
    assert isinstance(outcome, Questions) and [q.request.id for q in outcome.asked] == [0, 1, 2]
    apart = SlowStream([(None, ask(0, "Q1")), (None, ask(1, "Q2"))], gap=0.3)
    outcome = await drive(apart, RecordingSession(), "m", on_notification=ignore, window=0.05)
    assert isinstance(outcome, Questions) and [q.request.id for q in outcome.asked] == [0]
    outcome = await drive(apart, RecordingSession(), "m", on_notification=ignore, window=0.05)
    assert isinstance(outcome, Questions) and [q.request.id for q in outcome.asked] == [
        1
    ]  # nothing lost


async def test_replay_answers_only_the_same_questions():
    session = RecordingSession()
    recorded = [
        [fp("Q1"), {"action": "accept", "content": {"n": 1}, "resultType": "complete"}],
        [fp("Q2"), {"action": "decline"}],
    ]
    stream = FakeStream([(None, ask(10, "Q1")), (None, ask(11, "Q2 changed"))])
    outcome = await drive(stream, session, "m", on_notification=ignore, recorded=recorded)
    assert session.posted == [
        {"jsonrpc": "2.0", "id": 10, "result": {"action": "accept", "content": {"n": 1}}}
    ]
    assert isinstance(outcome, Questions) and [q.fingerprint for q in outcome.asked] == [
        fp("Q2 changed")
    ]
    assert outcome.used == [recorded[0]]
    assert len(recorded) == 2  # the caller's list is not consumed


async def test_replay_uses_each_answer_once_in_order():
    session = RecordingSession()
    recorded = [
        [fp("Sure?"), {"action": "accept", "content": {"n": 1}}],
        [fp("Sure?"), {"action": "accept", "content": {"n": 2}}],
    ]
    stream = FakeStream([(None, ask(1, "Sure?")), (None, ask(2, "Sure?")), (None, ask(3, "Sure?"))])
    outcome = await drive(stream, session, "m", on_notification=ignore, recorded=recorded)
    assert [m["result"]["content"]["n"] for m in session.posted] == [1, 2]
    assert isinstance(outcome, Questions) and outcome.asked[0].request.id == 3


async def test_driver_refuses_questions_on_one_shot_methods():
    session = RecordingSession()
    stream = FakeStream(
        [(None, ask(1, "Q")), (None, {"jsonrpc": "2.0", "id": "m", "result": {"tools": []}})]
    )
    outcome = await drive(stream, session, "m", on_notification=ignore, questions_allowed=False)
    assert isinstance(outcome, Final) and session.posted[0]["error"]["code"] == -32601


class _Content:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def readany(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


class _Response:
    def __init__(self, ctype: str, chunks: list[bytes]) -> None:
        self.headers = {"content-type": ctype}
        self.content = _Content(chunks)
        self.status = 200


async def test_event_stream_keeps_what_it_read_between_rounds():
    """Two questions in one chunk: reading stops after the first and the second is still there
    for the next read of the same parked stream; the resume point never skips an unread event."""
    from mcp_edge.upstream.legacy.http_session import EventStream

    both = (
        b"id: p0\r\ndata: \r\nretry: 1000\r\n\r\n"
        b"id: e1\r\nevent: message\r\ndata: " + orjson.dumps(ask(0, "Q1")) + b"\r\n\r\n"
        b"id: e2\r\nevent: message\r\ndata: " + orjson.dumps(ask(1, "Q2")) + b"\r\n\r\nid: e3\r\nda"
    )
    tail = (
        b"ta: " + orjson.dumps({"jsonrpc": "2.0", "id": "m", "result": {"content": []}}) + b"\n\n"
    )
    stream = EventStream(_Response("text/event-stream", [both, tail]), 1 << 20, Reservation(None))  # type: ignore[arg-type]
    first = await stream.next()
    assert first == ("e1", ask(0, "Q1")) and stream.has_event_ids
    assert stream.consumed_id == "e1" and stream.last_event_id == "e2"  # e2 seen, not read
    second = await stream.next()
    assert second == ("e2", ask(1, "Q2"))
    last = await stream.next()
    assert (
        last == ("e3", {"jsonrpc": "2.0", "id": "m", "result": {"content": []}})
        and stream.consumed_id == "e3"
    )
    assert await stream.next() is None and stream.finished


async def test_event_stream_reads_a_last_event_ended_by_a_lone_cr():
    """An event whose end is a CR that is the stream's very last byte is read (it is known to be
    no CRLF only when the stream ends), as an SSE client reads it."""
    from mcp_edge.upstream.legacy.http_session import EventStream

    final = {"jsonrpc": "2.0", "id": "m", "result": {"content": []}}
    body = b"id: e1\rdata: " + orjson.dumps(final) + b"\r\r"
    for cut in (len(body), len(body) - 1):
        chunks = [body[:cut], body[cut:]] if cut < len(body) else [body]
        stream = EventStream(_Response("text/event-stream", chunks), 1 << 20, Reservation(None))  # type: ignore[arg-type]
        assert await stream.next() == ("e1", final), cut
        assert await stream.next() is None and stream.finished


class _Quiet:
    """A resumed GET that stays silent (the server still sends live events to the old stream)."""

    def __init__(self, consumed: str) -> None:
        self.consumed_id = consumed
        self.finished = False
        self.closed = False
        self.reservation = Reservation(None)

    async def next(self) -> tuple[str | None, Any] | None:
        await asyncio.sleep(3600)
        return None

    def close(self) -> None:
        self.closed = True


class _Replay:
    def __init__(self, consumed: str, items: list[tuple[str | None, Any]]) -> None:
        self.consumed_id = consumed
        self.items = list(items)
        self.finished = False

    async def next(self) -> tuple[str | None, Any] | None:
        if not self.items:
            return None
        item = self.items.pop(0)
        self.consumed_id = item[0] or self.consumed_id
        return item

    def close(self) -> None:
        pass


async def test_a_quiet_resumed_stream_is_asked_again_from_the_last_event_read():
    from mcp_edge.upstream.legacy.http_session import ResumedStream

    final = {"jsonrpc": "2.0", "id": "m", "result": {"content": []}}
    asked_from: list[str] = []

    class Session:
        def __init__(self) -> None:
            self.streams = [
                _Replay("e1", [("e2", {"jsonrpc": "2.0", "method": "notifications/progress"})]),
                _Replay("e2", [("e3", final)]),
            ]

        async def resume(self, last_event_id: str, reservation: Reservation) -> Any:
            asked_from.append(last_event_id)
            return self.streams.pop(0)

    first = _Quiet("e1")
    stream = ResumedStream(Session(), first, quiet=0.05, max_quiet=0.1)  # type: ignore[arg-type]
    got = await stream.next()  # the first GET is silent: reconnect from e1
    assert got == ("e2", {"jsonrpc": "2.0", "method": "notifications/progress"}) and first.closed
    got = await stream.next()  # the second ends without the response: reconnect from e2
    assert got == ("e3", final) and asked_from == ["e1", "e2"] and stream.reconnects == 2


async def test_idle_sessions_are_closed_without_more_traffic():
    pool: SessionPool[FakeSession] = SessionPool(idle_seconds=0.1, max_idle=4)

    async def create() -> FakeSession:
        return FakeSession("s")

    session = await pool.acquire(("k",), create)
    pool.release(("k",), session)
    for _ in range(600):  # nobody calls the pool again; it closes the session on its own
        if session.closed:
            break
        await asyncio.sleep(0.05)
    assert session.closed and pool.idle == 0
    await pool.aclose()
