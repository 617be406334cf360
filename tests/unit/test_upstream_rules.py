"""The response-side rules for upstream answers (mcp_edge.core.upstream_rules), the SSE splitter's
handling of events that arrive in many pieces, and the response inspector driven directly."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from mcp_edge.core import upstream_rules as rules
from mcp_edge.core.errors import RpcError
from mcp_edge.core.sse import SSESplitter, encode_event
from mcp_edge.edge.responses import ResponseFinished, ResponseInspector, run_inspected


@pytest.mark.parametrize(
    "status,ctype,encoding,reason",
    [
        (200, b"application/json", None, None),
        (200, b"Application/JSON; charset=utf-8", None, None),
        (200, b"text/event-stream", b"identity", None),
        (200, b"text/html", None, "upstream_content_type"),
        (200, b"", None, "upstream_content_type"),
        (202, b"text/plain", None, "upstream_status"),
        (202, b"text/event-stream", None, "upstream_status"),
        (204, b"application/json", None, "upstream_status"),
        (404, b"text/plain", None, None),  # the status speaks
        (500, b"text/html", None, None),
        (200, b"application/json", b"gzip", "upstream_encoding"),
        (200, b"text/event-stream", b"identity, br", "upstream_encoding"),
        (400, b"application/json", b"deflate", "upstream_encoding"),
    ],
)
def test_framing(status, ctype, encoding, reason):
    err = rules.framing_error(status, ctype, encoding)
    assert (err.data["reason"] if err else None) == reason
    if err:
        assert err.code == -32603 and err.http_status == 502


@pytest.mark.parametrize(
    "result,declared,kind",
    [
        ({"resultType": "input_required"}, {}, "input_required"),
        ({"resultType": "complete", "content": []}, {}, "complete"),
        ({"content": []}, {}, "complete"),  # missing: complete, as clients read it
        ({"resultType": None, "content": []}, {}, "complete"),
        (
            {"resultType": "task", "task": {}},
            {"extensions": {"io.modelcontextprotocol/tasks": {}}},
            "extension",
        ),
    ],
)
def test_result_kind_accepts(result, declared, kind):
    assert rules.result_kind(result, declared) == kind


@pytest.mark.parametrize(
    "result,declared",
    [
        ({"inputRequests": {"a": {}}}, {}),
        ({"requestState": "x"}, {}),
        ({"resultType": "Input_Required", "requestState": "x"}, {}),
        ({"resultType": "input-required"}, {}),
        (
            {"resultType": "INPUT_REQUIRED"},
            {"extensions": {"x": {}}},
        ),  # no extension may take a core lookalike
        ({"resultType": " complete"}, {}),
        ({"resultType": 1}, {}),
        ({"resultType": "task"}, {}),  # an extension value, none declared
        ({"resultType": "task"}, {"extensions": {}}),
    ],
)
def test_result_kind_refuses(result, declared):
    with pytest.raises(RpcError) as caught:
        rules.result_kind(result, declared)
    assert caught.value.data["violation"] == "result_type"


def test_input_required_scan_sees_escaped_letters():
    assert rules.may_say_input_required(b'{"resultType":"input_required"}')
    assert rules.may_say_input_required(b'{"resultType":"input\\u005frequired"}')
    assert rules.may_say_input_required(b'{"resultType":"\\u0069nput_required"}')
    assert not rules.may_say_input_required(b'{"text":"caf\\u00e9 \\u2028 \\u001b"}')
    assert rules.may_say_input_required_str('"input\\u005Frequired"')


def test_duplicate_keys_found_after_unescaping():
    assert rules.has_duplicate_keys(b'{"result":{"resultType":"a","resultType":"b"}}')
    assert rules.has_duplicate_keys('{"result":{"resultType":"a","result\\u0054ype":"b"}}')
    assert not rules.has_duplicate_keys(b'{"a":{"x":1},"b":{"x":1}}')
    assert rules.may_repeat_keys(b'{"resultType":"a","resultType":"b"}')
    assert not rules.may_repeat_keys(b'{"resultType":"complete","content":[]}')


def test_splitter_finds_boundaries_across_chunks_and_scans_once():
    splitter = SSESplitter(1 << 20)
    payload = b"event: message\r\ndata: " + b"x" * 100_000 + b"\r\n\r\n: ping\n\ndata: 2\r\r"
    events = []
    for i in range(0, len(payload), 7):  # boundaries straddle chunks
        events += splitter.feed(payload[i : i + 7])
    # (The last event ends with a lone CR: the end of the stream says no LF follows.)
    events += splitter.finish()
    assert [len(e.data) if e.data else e.data for e in events] == [100_000, None, 1]
    assert b"".join(e.raw for e in events) == payload
    assert splitter.rest() == b""


def test_splitter_limit():
    splitter = SSESplitter(1000)
    splitter.feed(b"data: " + b"x" * 900)
    with pytest.raises(ValueError):
        splitter.feed(b"x" * 200)


# ---------------------------------------------------------------- the inspector, driven directly


class Client:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message):
        self.messages.append(message)

    @property
    def body(self) -> bytes:
        return b"".join(
            m.get("body", b"") for m in self.messages if m["type"] == "http.response.body"
        )

    @property
    def events(self) -> list[dict[str, Any]]:
        return [
            orjson.loads(line[6:])
            for line in self.body.decode().splitlines()
            if line.startswith("data: ")
        ]


def _inspector(
    client: Client, *, mrtr: bool = True, declared: dict | None = None, seen: list | None = None
):
    def sealer(result):
        return {**result, "requestState": "sealed"}

    return ResponseInspector(
        client,
        request_id=7,
        rpc_method="tools/call" if mrtr else "tools/list",
        mrtr_method=mrtr,
        sealer=sealer,
        max_inspect_bytes=1 << 20,
        on_violation=(seen.append if seen is not None else lambda k: None),
        declared=declared,
    )


SSE_START = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}


def _body(data: bytes, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


def _response(result: dict[str, Any], rid: Any = 7) -> bytes:
    return encode_event(orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result}))


async def test_final_event_waits_for_the_end_of_the_stream_then_goes_last():
    client = Client()
    inspector = _inspector(client)
    await inspector(SSE_START)
    await inspector(
        _body(_response({"resultType": "complete", "content": []}) + b": keep-alive\n\n")
    )
    assert client.events == []  # held: something might still follow it
    await inspector(_body(b": keep-alive\n\n"))
    await inspector(_body(b"", more=False))
    assert [e["result"]["resultType"] for e in client.events] == ["complete"]
    assert inspector.finished and inspector.outcome.completed


async def test_extension_result_type_passes_when_an_extension_was_declared():
    client = Client()
    inspector = _inspector(client, declared={"extensions": {"io.modelcontextprotocol/tasks": {}}})
    await inspector(SSE_START)
    await inspector(_body(_response({"resultType": "task", "task": {"taskId": "t"}}), more=False))
    assert client.events[-1]["result"]["resultType"] == "task"


async def test_a_response_for_another_id_never_reaches_the_client():
    client = Client()
    seen: list[str] = []
    inspector = _inspector(client, seen=seen)
    await inspector(SSE_START)
    await inspector(_body(_response({"resultType": "input_required", "requestState": "x"}, rid=8)))
    await inspector(_body(_response({"resultType": "complete", "content": []}), more=False))
    assert [e["id"] for e in client.events] == [7]


async def test_sends_after_the_gateway_ended_the_response_raise():
    client = Client()
    inspector = _inspector(client)
    await inspector(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/html")]}
    )
    assert client.messages[0]["status"] == 502 and inspector.finished
    with pytest.raises(ResponseFinished):
        await inspector(_body(b"<html>"))


async def test_tool_error_and_error_codes_are_recorded():
    client = Client()
    inspector = _inspector(client)
    await inspector(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await inspector(
        _body(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 7,
                    "result": {"resultType": "complete", "isError": True, "content": []},
                }
            ),
            more=False,
        )
    )
    assert inspector.outcome.tool_error and inspector.outcome.error_code is None
    client = Client()
    inspector = _inspector(client)
    await inspector(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await inspector(
        _body(
            orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "x"}}),
            more=False,
        )
    )
    assert inspector.outcome.error_code == -32602


async def test_run_inspected_bounds_an_endless_stream_and_cancels_the_app():
    client = Client()
    inspector = _inspector(client)
    cancelled = asyncio.Event()

    async def endless(scope, receive, send):
        await send(SSE_START)
        try:
            while True:
                await send(_body(b": keep-alive\n\n"))
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await asyncio.wait_for(run_inspected(endless, {}, None, inspector, 0.2), 5)
    assert cancelled.is_set()
    assert client.events[-1]["error"]["data"]["reason"] == "upstream_timeout"
    assert client.events[-1]["id"] == 7


async def test_run_inspected_sends_a_held_final_response_after_the_grace():
    from mcp_edge.edge import responses

    client = Client()
    inspector = _inspector(client)

    async def lingering(scope, receive, send):
        await send(SSE_START)
        await send(_body(_response({"resultType": "complete", "content": []})))
        await asyncio.sleep(60)

    old = responses.FINAL_EVENT_GRACE_SECONDS
    responses.FINAL_EVENT_GRACE_SECONDS = 0.1
    try:
        await asyncio.wait_for(run_inspected(lingering, {}, None, inspector, 30), 5)
    finally:
        responses.FINAL_EVENT_GRACE_SECONDS = old
    assert client.events[-1]["result"]["resultType"] == "complete"
    assert client.messages[-1]["more_body"] is False


async def test_an_mrtr_stream_event_that_is_not_json_is_refused():
    client = Client()
    inspector = _inspector(client)
    await inspector(SSE_START)
    await inspector(_body(b"data: not json at all\n\n"))
    assert client.events[-1]["id"] == 7
    assert client.events[-1]["error"]["data"]["reason"] == "upstream_garbage"
    assert b"not json" not in client.body and inspector.finished


async def test_a_request_answered_with_202_is_refused():
    client = Client()
    inspector = _inspector(client)
    await inspector(
        {
            "type": "http.response.start",
            "status": 202,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    assert client.messages[0]["status"] == 502
    assert orjson.loads(client.body)["error"]["data"] == {
        "reason": "upstream_status",
        "status": 202,
    }
