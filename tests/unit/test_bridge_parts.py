"""The bridge's other sans-I/O parts: sealed session tokens, sealed forwards, era detection, the
session pool and the round driver (over in-memory streams)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import orjson
import pytest

from gateway.adapters.era import classify_probe, looks_legacy
from gateway.bridge import forward, wire
from gateway.bridge.driver import Ended, Final, Question, drive
from gateway.bridge.pool import SessionPool
from gateway.core.seal import KeyRing, StateKey, open_blob, seal_blob
from gateway.core.session_token import open_session, seal_session


def ring(*secrets: bytes) -> KeyRing:
    return KeyRing([StateKey.from_secret(s) for s in secrets or (os.urandom(32),)])


# ---------------------------------------------------------------- session tokens


def test_session_token_round_trip_and_bindings():
    r = ring()
    token = seal_session(r, audience="gw/a", principal_id="alice", endpoint="http://u1/mcp", session_id="abc")
    assert "abc" not in token and "u1" not in token
    opened = open_session(r, token, audience="gw/a", principal_id="alice")
    assert opened is not None and (opened.endpoint, opened.session_id) == ("http://u1/mcp", "abc")
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
    token = seal_session(ring(old), audience="a", principal_id="p", endpoint="e", session_id="s")
    assert open_session(ring(new, old), token, audience="a", principal_id="p") is not None


def test_sealed_purposes_never_cross():
    r = ring()
    blob = seal_blob(r, "mcpes1", b"{}")
    assert open_blob(r, "mcpes1", blob) == b"{}"
    assert open_blob(r, "mcpef1", blob.replace("mcpes1", "mcpef1", 1)) is None
    with pytest.raises(AssertionError):
        seal_blob(r, "mcpe1", b"{}")


# ---------------------------------------------------------------- forwards


def test_forward_payload_seal_open_expiry():
    r = ring()
    token = forward.seal_payload(r, {"route": "a", "params": {"x": 1}}, now=1000.0)
    assert forward.open_payload(r, token, now=1000.0 + 29) == {"route": "a", "params": {"x": 1}, "exp": 1030}
    assert forward.open_payload(r, token, now=1000.0 + 31) is None
    assert forward.open_payload(ring(), token, now=1000.0) is None
    assert forward.open_payload(r, "mcpef1.x.y", now=1000.0) is None
    session_token = seal_blob(r, "mcpes1", orjson.dumps({"exp": 2000}))
    assert forward.open_payload(r, session_token, now=1000.0) is None


# ---------------------------------------------------------------- era detection


@pytest.mark.parametrize(
    "status,ctype,body,era",
    [
        (400, "application/json",
         b'{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}',
         "legacy"),
        (200, "application/json", b'{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2026-07-28"]}}', "modern"),
        (200, "text/event-stream",
         b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}\r\n\r\n', "modern"),
        (200, "text/event-stream", b'data: {"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"x"}}\n\n',
         "legacy"),
        (400, "application/json",
         b'{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":["2026-07-28","2027-01-01"]}}}',
         "modern"),
        (400, "application/json", b'{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"data":{"supported":["2099-01-01"]}}}',
         "legacy"),
        (404, "text/plain", b"Not Found", "legacy"),
        (405, "", b"", "legacy"),
        (500, "text/html", b"<html>", None),
        (502, "application/json", b"{}", None),
    ],
)
def test_classify_probe(status, ctype, body, era):
    assert classify_probe(status, ctype, body) == era


def test_looks_legacy():
    assert looks_legacy(400, b'{"error":{"code":-32600,"message":"Bad Request: Missing session ID"}}')
    assert not looks_legacy(400, b'{"error":{"code":-32022,"message":"Unsupported protocol version"}}')
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
    def __init__(self, events: list[tuple[str | None, Any]]) -> None:
        self.events = list(events)
        self.has_event_ids = any(e for e, _ in events)

    async def next(self) -> tuple[str | None, Any] | None:
        return self.events.pop(0) if self.events else None


class RecordingSession:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []

    async def post(self, message: dict[str, Any]) -> None:
        self.posted.append(message)


def ask(request_id: Any, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "elicitation/create",
            "params": {"message": message, "requestedSchema": {"type": "object"}}}  # fmt: skip


def fp(message: str) -> str:
    return wire.fingerprint({"method": "elicitation/create",
                             "params": {"message": message, "requestedSchema": {"type": "object"}}})  # fmt: skip


async def test_driver_answers_ping_refuses_other_requests_and_relays_notifications():
    notes: list[wire.Notification] = []

    async def on_note(n: wire.Notification) -> None:
        notes.append(n)

    session = RecordingSession()
    stream = FakeStream([
        (None, {"jsonrpc": "2.0", "id": 5, "method": "ping"}),
        (None, {"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {}}),
        (None, {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}),
        (None, {"jsonrpc": "2.0", "id": "other", "result": {}}),
        (None, {"jsonrpc": "2.0", "id": "mine", "result": {"content": []}}),
    ])  # fmt: skip
    outcome = await drive(stream, session, "mine", on_notification=on_note)  # type: ignore[arg-type]
    assert isinstance(outcome, Final) and outcome.response.result == {"content": []}
    assert session.posted[0] == {"jsonrpc": "2.0", "id": 5, "result": {}}
    assert session.posted[1]["id"] == 6 and session.posted[1]["error"]["code"] == -32601
    assert [n.method for n in notes] == ["notifications/progress"]


async def test_driver_returns_a_question_with_its_event_id():
    async def ignore(_: wire.Notification) -> None:
        return None

    stream = FakeStream([("ev0", None), ("ev1", ask(0, "Q1"))])
    outcome = await drive(stream, RecordingSession(), "mine", on_notification=ignore)  # type: ignore[arg-type]
    assert isinstance(outcome, Question) and outcome.event_id == "ev1" and outcome.request.id == 0
    assert outcome.fingerprint == fp("Q1")
    assert isinstance(await drive(FakeStream([]), RecordingSession(), "m", on_notification=ignore), Ended)  # type: ignore[arg-type]


async def test_driver_replays_recorded_answers_and_stops_at_a_changed_question():
    async def ignore(_: wire.Notification) -> None:
        return None

    session = RecordingSession()
    recorded = [[fp("Q1"), {"action": "accept", "content": {"n": 1}, "resultType": "complete"}],
                [fp("Q2"), {"action": "decline"}], [fp("Q3"), {"action": "accept"}]]  # fmt: skip
    stream = FakeStream([(None, ask(10, "Q1")), (None, ask(11, "Q2 changed"))])
    outcome = await drive(stream, session, "m", on_notification=ignore, recorded=recorded)  # type: ignore[arg-type]
    assert session.posted == [{"jsonrpc": "2.0", "id": 10, "result": {"action": "accept", "content": {"n": 1}}}]
    assert isinstance(outcome, Question) and outcome.answered == 1
    assert recorded == [[fp("Q1"), {"action": "accept", "content": {"n": 1}, "resultType": "complete"}]]


async def test_driver_refuses_questions_on_one_shot_methods():
    async def ignore(_: wire.Notification) -> None:
        return None

    session = RecordingSession()
    stream = FakeStream([(None, ask(1, "Q")), (None, {"jsonrpc": "2.0", "id": "m", "result": {"tools": []}})])
    outcome = await drive(stream, session, "m", on_notification=ignore, questions_allowed=False)  # type: ignore[arg-type]
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
    """Two questions in one chunk (a tool asking twice at once): reading stops after the first
    and the second is still there for the next round of the same parked stream."""
    from gateway.bridge.http_session import EventStream

    both = (b"id: p0\r\ndata: \r\nretry: 1000\r\n\r\n"
            b"id: e1\r\nevent: message\r\ndata: " + orjson.dumps(ask(0, "Q1")) + b"\r\n\r\n"
            b"id: e2\r\nevent: message\r\ndata: " + orjson.dumps(ask(1, "Q2")) + b"\r\n\r\nid: e3\r\nda")  # fmt: skip
    tail = b"ta: " + orjson.dumps({"jsonrpc": "2.0", "id": "m", "result": {"content": []}}) + b"\n\n"
    stream = EventStream(_Response("text/event-stream", [both, tail]), 1 << 20)  # type: ignore[arg-type]

    async def ignore(_: wire.Notification) -> None:
        return None

    session = RecordingSession()
    first = await drive(stream, session, "m", on_notification=ignore)  # type: ignore[arg-type]
    assert isinstance(first, Question) and first.event_id == "e1" and stream.has_event_ids
    second = await drive(stream, session, "m", on_notification=ignore)  # type: ignore[arg-type]
    assert isinstance(second, Question) and second.event_id == "e2" and second.request.id == 1
    last = await drive(stream, session, "m", on_notification=ignore)  # type: ignore[arg-type]
    assert isinstance(last, Final) and stream.last_event_id == "e3"
    assert await stream.next() is None and stream.finished
