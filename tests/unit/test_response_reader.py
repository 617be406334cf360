"""The response reader (mcp_edge.core.response_reader), driven directly: the framing of an answer,
its messages and final response in a JSON body, an SSE stream and newline-delimited lines, the
bounds, strict and lenient reading; and, by property, that any
chunking of the same bytes yields the same events."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core import response_reader as rr
from mcp_edge.core import upstream_rules as rules
from mcp_edge.core.response_reader import (
    End,
    EndedEarly,
    Filler,
    Final,
    Framing,
    Malformed,
    Message,
    Refused,
    ResponseReader,
    TooLarge,
)
from mcp_edge.core.sse import encode_event
from tests.support.fuzz import dumps, fuzz_profile, fuzz_settings, messages

pytestmark = pytest.mark.timeout(3600 if fuzz_profile() else 120)

RID = 7
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream")]


def note(n: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}


def reply(rid: Any = RID, **result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": {"resultType": "complete", **result}}


def event(doc: Any) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


def read(
    headers: list[tuple[bytes, bytes]],
    chunks: list[bytes],
    *,
    status: int = 200,
    max_bytes: int = 1 << 16,
    **options: Any,
) -> list[Any]:
    """Every event of one answer: the head's, then the body's."""
    reader = ResponseReader(RID, max_bytes=max_bytes, **options)
    out: list[Any] = [reader.head(status, headers)]
    for chunk in chunks:
        out += reader.feed(chunk)
    out += reader.end()
    return out


def kinds(events: list[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


# ---------------------------------------------------------------- the head


@pytest.mark.parametrize(
    "status,headers,body",
    [
        (200, [(b"Content-Type", b"Application/JSON; charset=utf-8")], "json"),
        (200, [(b"content-type", b"text/event-stream"), (b"content-encoding", b"identity")], "sse"),
        (404, [(b"content-type", b"text/html")], "other"),  # the status speaks
        (500, [], "other"),
    ],
)
def test_the_head_chooses_how_the_body_is_read(status, headers, body):
    head = ResponseReader(RID, max_bytes=10).head(status, headers)
    assert isinstance(head, Framing) and head.body == body


@pytest.mark.parametrize(
    "status,headers,reason",
    [
        (200, [(b"content-type", b"text/html")], "upstream_content_type"),
        (202, JSON, "upstream_status"),
        (200, [*JSON, (b"content-encoding", b"gzip")], "upstream_encoding"),
        (200, [*JSON, (b"content-type", b"text/plain")], "upstream_content_type"),  # the last one
    ],
)
def test_a_head_a_client_cannot_read_is_refused(status, headers, reason):
    reader = ResponseReader(RID, max_bytes=10)
    head = reader.head(status, headers)
    assert isinstance(head, Refused) and head.reason == reason
    assert reader.done and reader.feed(b"{}") == ()


def test_the_head_comes_first_and_once():
    reader = ResponseReader(RID, max_bytes=10)
    with pytest.raises(RuntimeError):
        reader.feed(b"{}")
    reader.head(200, JSON)
    with pytest.raises(RuntimeError):
        reader.head(200, JSON)


def test_another_type_of_body_is_not_read():
    events = read([(b"content-type", b"text/plain")], [b"no\n", b"such"], status=404)
    assert kinds(events) == ["Framing", "End"]


# ---------------------------------------------------------------- one JSON body


def test_a_json_body_is_the_final_response_with_its_bytes():
    body = orjson.dumps(reply())
    events = read(JSON, [body[:9], body[9:]])
    assert kinds(events) == ["Framing", "Final", "End"]
    final = events[1]
    assert final.raw == final.data == body and final.doc == reply() and not final.claimed


def test_an_error_with_a_null_id_answers_the_request():
    body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}'
    final = read(JSON, [body])[1]
    assert isinstance(final, Final) and final.claimed
    assert final.doc["id"] == RID and final.raw == body  # the bytes as the upstream sent them


@pytest.mark.parametrize(
    "body,reason",
    [
        (b'{"jsonrpc":"2.0","id":7,"result":', "upstream_garbage"),
        (b"", "upstream_garbage"),
        (b"5", "upstream_garbage"),
        (b"[" + orjson.dumps(reply()) + b"]", "upstream_no_response"),
        (orjson.dumps(reply(rid=8)), "upstream_no_response"),
        (orjson.dumps(reply(rid=True)), "upstream_no_response"),  # true is not 1 (nor 7)
        (orjson.dumps(note()), "upstream_no_response"),
        (b'{"jsonrpc":"2.0","id":1,"method":"roots/list"}', "server_request"),
    ],
)
def test_a_json_body_that_is_not_the_response_is_malformed(body, reason):
    reader = ResponseReader(RID, max_bytes=1 << 10)
    reader.head(200, JSON)
    events = [*reader.feed(body), *reader.end()]
    assert kinds(events) == ["Malformed"] and events[0].reason == reason
    assert reader.unread() == body and reader.unread() == b""


def test_a_json_body_is_bounded_as_it_arrives():
    reader = ResponseReader(RID, max_bytes=100)
    reader.head(200, JSON)
    assert reader.feed(b"{" + b" " * 60) == () and reader.pending == 61
    events = reader.feed(b" " * 60)
    assert kinds(events) == ["TooLarge"] and events[0].reason == "upstream_response_too_large"
    assert reader.pending == 0 and reader.done and reader.end() == ()


def test_lenient_reading_parses_only_what_the_filter_asks_for():
    asked: list[bytes] = []

    def body_filter(payload: bytes) -> bool:
        asked.append(payload)
        return b"input_required" in payload

    plain = orjson.dumps(reply())
    events = read(JSON, [plain], strict=False, body_filter=body_filter)
    assert isinstance(events[1], Message) and events[1].doc is None and events[1].raw == plain
    suspect = orjson.dumps(reply(resultType="input_required"))
    events = read(JSON, [suspect], strict=False, body_filter=body_filter)
    assert (
        isinstance(events[1], Final) and events[1].doc["result"]["resultType"] == "input_required"
    )
    assert asked == [plain, suspect]
    # Lenient: what is not the response passes as a message (nothing is refused).
    for body in (b"not json", orjson.dumps(reply(rid=8)), b"[1]"):
        assert kinds(read(JSON, [body], strict=False)) == ["Framing", "Message", "End"]


def test_a_json_body_keeps_its_leading_whitespace_however_it_is_cut():
    body = b"\n  \n" + orjson.dumps(reply())
    for chunks in ([body], [b"\n", b"  \n", body[4:]], [b"\n  \n", body[4:]]):
        final = read(JSON, chunks)[1]
        assert isinstance(final, Final) and final.raw == body


# ---------------------------------------------------------------- newline-delimited messages


def test_newline_delimited_messages_are_read_one_per_line():
    body = orjson.dumps(note()) + b"\n\n" + orjson.dumps(reply())  # the last without a newline
    events = read(JSON, [body])
    assert kinds(events) == ["Framing", "Lines", "Message", "Final", "End"]
    assert events[2].doc == note() and events[2].raw == encode_event(orjson.dumps(note()))
    assert events[3].doc == reply() and events[3].data == orjson.dumps(reply()).decode()


def test_a_lone_response_line_stays_a_json_body_unless_more_follows():
    line = orjson.dumps(reply()) + b"\n"
    assert kinds(read(JSON, [line, b"  \n"])) == ["Framing", "Final", "End"]
    assert kinds(read(JSON, [line, b"  \n", orjson.dumps(note())]))[:2] == ["Framing", "Lines"]
    # Pretty-printed JSON, and any non-2xx answer, stay one body.
    pretty = orjson.dumps(reply(), option=orjson.OPT_INDENT_2)
    assert kinds(read(JSON, [pretty])) == ["Framing", "Final", "End"]
    two = orjson.dumps(note()) + b"\n" + orjson.dumps(note()) + b"\n"
    assert kinds(read(JSON, [two], status=400)) == ["Framing", "Malformed"]


def test_a_carriage_return_inside_a_line_is_written_again():
    events = read(JSON, [orjson.dumps(note()) + b"\n", b'{"jsonrpc":"2.0","id":7,\r"result":{}}\n'])
    assert events[-2].data == '{"jsonrpc":"2.0","id":7,"result":{}}'


@pytest.mark.parametrize(
    "tail,problem,reason",
    [
        (b"not json\n", Malformed, "upstream_garbage"),
        (
            b'{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage"}\n',
            Malformed,
            "server_request",
        ),
        (orjson.dumps(reply()) + b"\n" + orjson.dumps(note()) + b"\n", Malformed, "after_final"),
        (b"x" * 200, TooLarge, "upstream_response_too_large"),
        (b"", EndedEarly, "upstream_no_response"),
    ],
)
def test_broken_lines_end_the_reading(tail, problem, reason):
    first = orjson.dumps(note()) + b"\n"
    events = read(JSON, [first, tail], max_bytes=150)
    assert kinds(events)[:3] == ["Framing", "Lines", "Message"]
    assert isinstance(events[-1], problem) and events[-1].reason == reason


def test_unread_gives_back_the_lines_from_the_offending_one():
    reader = ResponseReader(RID, max_bytes=1 << 10, strict=False)
    reader.head(200, JSON)
    events = reader.feed(orjson.dumps(note()) + b"\nbad\n" + orjson.dumps(note(2)) + b"\n{")
    assert kinds(events) == ["Lines", "Message", "Malformed"]
    assert reader.unread() == b"bad\n" + orjson.dumps(note(2)) + b"\n{"


# ---------------------------------------------------------------- SSE


def test_an_sse_stream_strictly():
    body = b": ping\n\n" + event(note()) + event(reply(rid=8)) + event(reply())
    events = read(SSE, [body])
    assert kinds(events) == ["Framing", "Filler", "Message", "Message", "Final", "End"]
    assert events[1].raw == b": ping\n\n" and events[2].raw == event(note())
    assert events[3].is_response and not events[2].is_response  # a response for another id
    assert events[4].raw == event(reply()) and events[4].doc == reply()


@pytest.mark.parametrize(
    "body,problem,reason",
    [
        (event(note()) + b"data: {oops\n\n", Malformed, "upstream_garbage"),
        (b"data: [1]\n\n", Malformed, "upstream_no_response"),
        (
            event({"jsonrpc": "2.0", "id": 1, "method": "elicitation/create"}),
            Malformed,
            "server_request",
        ),
        (event(reply()) + event(note()), Malformed, "after_final"),
        (event(note()), EndedEarly, "upstream_no_response"),
        (event(note()) + b"data: " + orjson.dumps(reply()), EndedEarly, "upstream_no_response"),
        (event(note()) + b"data: " + b"x" * 300, TooLarge, "upstream_response_too_large"),
    ],
)
def test_a_broken_stream_ends_the_reading(body, problem, reason):
    events = read(SSE, [body], max_bytes=200)
    assert isinstance(events[-1], problem) and events[-1].reason == reason
    assert sum(isinstance(e, rr.Problem) for e in events) == 1


def test_the_callers_own_event_after_the_final_response_is_dropped():
    reader = ResponseReader(RID, max_bytes=1 << 10)
    reader.head(200, SSE)
    assert kinds(reader.feed(event(reply()))) == ["Final"] and reader.final_seen
    assert reader.feed(event(reply(rid=RID)), own=True) == []
    assert kinds(reader.feed(b": ka\n\n")) == ["Filler"]
    assert kinds(reader.end()) == ["End"]


def test_a_lenient_stream_passes_by_and_keeps_its_unterminated_end():
    body = event(note()) + b"data: not json\n\n" + event(reply()) + event(reply()) + b"data: {"
    events = read(SSE, [body], strict=False, event_filter=lambda d: "result" in d)
    assert kinds(events) == ["Framing", "Message", "Message", "Final", "Final", "End"]
    assert events[1].doc is None  # not asked for
    assert events[-1].rest == b"data: {"
    assert b"".join(getattr(e, "raw", b"") for e in events[1:]) + events[-1].rest == body


# ---------------------------------------------------------------- any chunking, the same events


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    out, last = [], 0
    for cut in sorted(cuts):
        out.append(data[last:cut])
        last = cut
    out.append(data[last:])
    return out


@st.composite
def bodies(draw: st.DrawFn) -> tuple[list[tuple[bytes, bytes]], int, bytes]:
    msgs = draw(st.lists(messages(RID), max_size=5))
    shape = draw(st.sampled_from(["json", "sse", "ndjson", "blank"]))
    if shape == "sse":
        parts = []
        for m in msgs:
            kind = draw(st.integers(0, 5))
            end = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\r\r"]))
            parts.append(
                b": keep-alive" + end
                if kind == 0
                else b"data: garbage" + end
                if kind == 1
                else b"event: message\ndata: " + dumps(m) + end
            )
        body, headers = b"".join(parts), SSE
    elif shape == "ndjson":
        body = b"".join(
            draw(st.sampled_from([b"", b" ", b"\n"]))
            + dumps(m)
            + draw(st.sampled_from([b"\n", b"\r\n"]))
            for m in msgs
        )
        headers = JSON
    elif shape == "blank":
        body = draw(st.sampled_from([b"\n", b" \n ", b"\r\n\n"])) + dumps(draw(messages(RID)))
        headers = JSON
    else:
        body, headers = (dumps(msgs[0]) if msgs else b""), JSON
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]  # ended early
    if draw(st.integers(0, 5)) == 0:
        body += draw(st.binary(max_size=40))
    return headers, draw(st.sampled_from([200, 200, 200, 404])), body


def _events(headers, status, chunks, options) -> list[Any]:
    events = read(headers, chunks, status=status, max_bytes=300, **options)
    return [(type(e).__name__, getattr(e, "error", None) or e) for e in events]


@fuzz_settings(300, 20_000)
@given(bodies(), st.lists(st.integers(0, 2000), max_size=8), st.integers(0, 2))
def test_any_chunking_of_the_same_bytes_yields_the_same_events(answer, cuts, variant):
    headers, status, body = answer
    options: dict[str, Any] = [
        {},
        {"strict": False},
        {
            "strict": False,
            "body_filter": rules.may_say_input_required,
            "event_filter": lambda d: '"id"' in d,
        },
    ][variant]
    whole = _events(headers, status, [body], options)
    cut = _events(headers, status, _cut(body, [c % (len(body) + 1) for c in cuts]), options)
    one_by_one = _events(headers, status, [body[i : i + 1] for i in range(len(body))], options)
    assert cut == whole and one_by_one == whole
    assert (
        sum(
            isinstance(e, tuple)
            and e[0] in ("End", "TooLarge", "Malformed", "EndedEarly", "Refused")
            for e in whole
        )
        <= 1
    )


@fuzz_settings(200, 5_000)
@given(bodies())
def test_a_lenient_reader_reports_every_byte_of_a_stream(answer):
    """Transparency: the raw bytes of a lenient stream's events are the stream, byte for byte,
    up to a problem (what follows it is given back by ``unread`` for a malformed message)."""
    headers, status, body = answer
    if headers != SSE:
        return
    reader = ResponseReader(RID, max_bytes=1 << 20, strict=False)
    reader.head(200, SSE)
    events = [*reader.feed(body), *reader.end()]
    seen = b"".join(e.raw for e in events if isinstance(e, (Message, Final, Filler)))
    if isinstance(events[-1], End):
        seen += events[-1].rest
    else:
        assert isinstance(events[-1], Malformed)
        seen += reader.unread()
    assert seen == body


# ---------------------------------------------------------------- SSE as a client splits it


def client_reads(body: bytes) -> list[str]:
    """The data of every event an SSE client dispatches from ``body`` (the WHATWG rules: lines
    end with CRLF, LF or CR, in any mix; a byte order mark before the first line is ignored; a
    ``data`` field without a colon is empty; an event is dispatched at an empty line when it
    has data; the unterminated end of a stream is discarded)."""
    text = body.decode("utf-8", errors="replace").removeprefix("\ufeff")
    *lines, _unterminated = re.split("\r\n|\r|\n", text)
    out: list[str] = []
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                out.append("\n".join(data))
            data = []
            continue
        name, colon, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" ") if colon else "")
    return out


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """SSE bytes with every line end of its own, fields of every kind, perhaps a byte order
    mark, perhaps an unterminated end."""
    values = st.sampled_from(
        [b"1", b'"a b"', b"{}", b"x", b"", orjson.dumps(note()), orjson.dumps(reply())]
    )
    line = st.one_of(
        st.builds(lambda v: b"data: " + v, values),
        st.builds(lambda v: b"data:" + v, values),
        st.sampled_from(
            [b"data", b": keep-alive", b"id: 4", b"retry: 10", b"event: message", b"", b"x"]
        ),
    )
    ends = st.sampled_from([b"\n", b"\r\n", b"\r"])
    body = b"".join(a + b for a, b in draw(st.lists(st.tuples(line, ends), max_size=12)))
    if draw(st.booleans()):
        body = b"\xef\xbb\xbf" + body
    return body + draw(st.sampled_from([b"", b"data: 1", b"data: 1\r"]))


@fuzz_settings(300, 20_000)
@given(streams(), st.lists(st.integers(0, 2000), max_size=8))
def test_an_sse_stream_is_read_as_a_client_reads_it_however_it_is_cut(body, cuts):
    """The messages the reader reports are the events a client dispatches (so none passes the
    gateway unread that a client reads), the same whole, cut anywhere, or byte by byte."""

    def events(chunks: list[bytes]) -> list[Any]:
        found = read(SSE, chunks, strict=False)
        return [(type(e).__name__, getattr(e, "error", None) or e) for e in found]

    whole = events([body])
    assert events(_cut(body, [c % (len(body) + 1) for c in cuts])) == whole
    assert events([body[i : i + 1] for i in range(len(body))]) == whole
    assert whole[-1][0] == "End"
    read_data = [e.data for kind, e in whole if kind in ("Message", "Final")]
    assert read_data == client_reads(body)


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"a":\n\r\ndata: 1}\n\n',  # LF then an empty line ended by CRLF
        b'data: {"a":\r\n\rdata: 1}\n\n',  # CRLF then an empty line ended by CR
        b'data: {"a":\n\rdata: 1}\n\n',  # LF then CR
        b'\xef\xbb\xbfdata: {"a":1}\n\n',  # a byte order mark first
        b'data: {"a":1}\n\r',  # the stream's last byte is the empty line
    ],
    ids=["lf_crlf", "crlf_cr", "lf_cr", "bom", "cr_at_the_end"],
)
def test_mixed_line_ends_split_events_where_a_client_does(body):
    """A hostile upstream cannot hide a message in what the gateway would read as another
    event's continuation (or as no event at all)."""
    events = read(SSE, [body], strict=False)
    assert [e.data for e in events if isinstance(e, (Message, Final))] == client_reads(body)
    assert client_reads(body)


def test_a_picked_message_that_this_parser_cannot_read_is_refused():
    """A lone surrogate escape is JSON to most clients' parsers, not to orjson: a body or event
    the filter picked (it may matter) that cannot be read here is refused, not passed unread."""
    hidden = b'{"jsonrpc":"2.0","id":7,"result":{"resultType":"input_required","x":"\\ud800"}}'
    for headers, body in ((JSON, hidden), (SSE, b"data: " + hidden + b"\n\n")):
        events = read(
            headers,
            [body],
            strict=False,
            body_filter=rules.may_say_input_required,
            event_filter=rules.may_say_input_required_str,
        )
        assert kinds(events)[-1] == "Malformed" and events[-1].reason == "upstream_garbage"
    # Without a filter (every message read, none of them passed on), it is left out.
    events = read(SSE, [b"data: " + hidden + b"\n\n"], strict=False)
    assert kinds(events) == ["Framing", "Message", "End"] and events[1].doc is None
