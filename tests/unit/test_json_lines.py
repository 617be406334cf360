"""Newline-delimited JSON-RPC messages under ``application/json`` (mcp_edge.core.json_lines): the
first line decides, and the response inspector relays such a body as SSE events, as they arrive,
under the same rules as an SSE answer."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from mcp_edge.core import json_lines
from mcp_edge.edge.responses import ResponseInspector, run_inspected

JSON_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"application/json"), (b"content-length", b"999")],
}


def line(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc) + b"\n"


def note(n: int = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": "p", "progress": n},
    }


def reply(result: dict[str, Any], rid: Any = 7) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result}


COMPLETE = {"resultType": "complete", "content": []}


class Client:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, message):
        self.messages.append(message)
        self.arrived.set()

    @property
    def start(self) -> dict[str, Any]:
        return next(m for m in self.messages if m["type"] == "http.response.start")

    @property
    def content_type(self) -> bytes:
        return dict(self.start["headers"])[b"content-type"]

    @property
    def body(self) -> bytes:
        return b"".join(
            m.get("body", b"") for m in self.messages if m["type"] == "http.response.body"
        )

    @property
    def events(self) -> list[dict[str, Any]]:
        return [
            orjson.loads(x[6:]) for x in self.body.decode().splitlines() if x.startswith("data: ")
        ]


def inspector(client: Client, *, mrtr: bool, seen: list | None = None) -> ResponseInspector:
    return ResponseInspector(
        client,
        request_id=7,
        rpc_method="tools/call" if mrtr else "subscriptions/listen",
        mrtr_method=mrtr,
        sealer=lambda r: {**r, "requestState": "sealed"},
        max_inspect_bytes=1 << 16,
        on_violation=(seen.append if seen is not None else lambda k: None),
    )


def body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


# ---------------------------------------------------------------- the first line


@pytest.mark.parametrize(
    "buffer,found",
    [
        (b'{"jsonrpc":"2.0","method":"notifications/progress"}\n{', ("message", 52)),
        (b'\n\n {"jsonrpc":"2.0","id":1,"result":{}}\n', ("response", 40)),
        (b'{"jsonrpc":"2.0","id":1,"method":"elicitation/create"}\n', ("message", 55)),
        (b'{\n  "jsonrpc": "2.0",\n  "id": 1\n}', ("json", 2)),  # pretty-printed: one document
        (b'[{"jsonrpc":"2.0","id":1,"result":{}}]\n', ("json", 39)),
        (b'{"jsonrpc":"2.0","id":1}\n', ("json", 25)),
        (b'{"jsonrpc":"2.0","id":1,"result":{}}', None),  # no line has ended yet
        (b"\n \n", None),
    ],
)
def test_first_line(buffer, found):
    assert json_lines.first_line(buffer) == found


def test_splitter_keeps_partial_lines_scans_once_and_is_bounded():
    splitter = json_lines.LineSplitter(100)
    assert splitter.feed(b'{"a":1}\n\n  {"b"') == [b'{"a":1}']
    assert splitter.feed(b":2}\r\n") == [b'{"b":2}']
    assert splitter.feed(b'{"c":3}') == []
    assert splitter.rest() == b'{"c":3}'
    with pytest.raises(ValueError):
        splitter.feed(b"x" * 101)


def test_a_carriage_return_between_tokens_is_written_again():
    assert json_lines.as_event_data(b'{"a":\r1}') == b'{"a":1}'
    assert json_lines.as_event_data(b'{"a":1}') == b'{"a":1}'


# ---------------------------------------------------------------- relayed as SSE


async def test_a_listen_stream_is_relayed_as_each_line_arrives():
    client = Client()
    inspect = inspector(client, mrtr=False)
    await inspect(JSON_START)
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": "7"}},
    }
    await inspect(body(line(ack)))
    # Relayed at once, as SSE (the stream never ends: nothing may wait for its end).
    assert client.content_type == b"text/event-stream"
    assert b"content-length" not in dict(client.start["headers"])
    assert dict(client.start["headers"])[b"x-accel-buffering"] == b"no"
    assert client.events == [ack]
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": {}}
    half = line(changed)
    await inspect(body(half[:10]))
    assert len(client.events) == 1  # not a whole line yet
    await inspect(body(half[10:]))
    assert client.events == [ack, changed]
    assert not inspect.finished


async def test_a_streaming_call_gets_its_notifications_then_the_final_response():
    client = Client()
    inspect = inspector(client, mrtr=True)
    await inspect(JSON_START)
    await inspect(body(line(note())))
    assert client.events == [note()]
    # The last line may end without a newline (NDJSON allows it).
    await inspect(body(orjson.dumps(reply(COMPLETE)), more=False))
    assert client.events == [note(), reply(COMPLETE)]
    assert inspect.finished and inspect.outcome.completed


async def test_the_final_response_is_sealed_and_checked_as_in_sse():
    client = Client()
    inspect = inspector(client, mrtr=True)
    await inspect(JSON_START)
    state = {
        "resultType": "input_required",
        "inputRequests": {"a": {"method": "roots/list"}},
        "requestState": "s",
    }
    await inspect(body(line(note()) + line(reply(state)), more=False))
    assert (
        client.events[-1]["result"]["requestState"] == "sealed" and inspect.outcome.input_required
    )


@pytest.mark.parametrize(
    "lines,reason",
    [
        ([line(note()), line(reply(COMPLETE)), line(note(2))], "after_final"),
        (
            [
                line(note()),
                line({"jsonrpc": "2.0", "id": 9, "method": "elicitation/create", "params": {}}),
            ],
            "server_request",
        ),
        ([line(note()), b'{"jsonrpc":"2.0","id":7,"result":\n'], "upstream_garbage"),
        ([line(note()), line(reply(COMPLETE, rid=8))], "upstream_no_response"),
        ([line(note()), b"x" * 70_000], "upstream_response_too_large"),
        ([line(reply(COMPLETE)), line(reply(COMPLETE))], "after_final"),
    ],
)
async def test_broken_streams_end_with_an_error_for_the_id(lines, reason):
    client = Client()
    seen: list[str] = []
    inspect = inspector(client, mrtr=True, seen=seen)
    await inspect(JSON_START)
    for chunk in lines:
        if not inspect.finished:
            await inspect(body(chunk))
    if not inspect.finished:
        await inspect(body(b"", more=False))
    last = client.events[-1]
    assert last["id"] == 7 and last["error"]["code"] == -32603
    assert reason in (last["error"]["data"].get("violation"), last["error"]["data"].get("reason"))
    assert client.messages[-1]["more_body"] is False


async def test_one_response_with_a_trailing_newline_stays_a_json_body():
    client = Client()
    inspect = inspector(client, mrtr=True)
    await inspect(JSON_START)
    await inspect(body(line(reply(COMPLETE)) + b"\n"))
    await inspect(body(b"  \n", more=False))
    assert client.content_type == b"application/json"
    assert orjson.loads(client.body) == reply(COMPLETE)


async def test_a_pretty_printed_body_stays_a_json_body():
    client = Client()
    inspect = inspector(client, mrtr=False)
    await inspect(JSON_START)
    pretty = orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "result": {"tools": []}}, option=orjson.OPT_INDENT_2
    )
    await inspect(body(pretty[:20]))
    await inspect(body(pretty[20:], more=False))
    assert client.content_type == b"application/json" and client.body == pretty


async def test_an_error_status_is_never_taken_for_a_stream():
    client = Client()
    inspect = inspector(client, mrtr=False)
    await inspect({**JSON_START, "status": 400})
    await inspect(body(line(note()) + line(note()), more=False))
    assert client.start["status"] == 400 and client.content_type == b"application/json"


async def test_a_listen_stream_is_not_bounded_by_the_final_response_deadline():
    """Not one of the three MRTR methods: no deadline, and the first frame arrives while the
    upstream is still sending."""
    client = Client()
    inspect = inspector(client, mrtr=False)
    release = asyncio.Event()

    async def upstream(scope, receive, send):
        await send(JSON_START)
        await send(body(line(note())))
        await release.wait()
        await send(body(line(note(2)), more=False))

    task = asyncio.ensure_future(run_inspected(upstream, {}, None, inspect, None))
    await asyncio.wait_for(client.arrived.wait(), 5)
    assert client.events == [note()]
    release.set()
    await asyncio.wait_for(task, 5)
    assert client.events == [note(), note(2)]
