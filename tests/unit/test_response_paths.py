"""The paths that read an upstream's answer through mcp_edge.core.response_reader, driven in one
process without sockets: the response inspector, the policy list filter (a real route policy)
and the cache recorder give the same answer however the upstream's bytes are cut into chunks,
and the answer each fixture (JSON, SSE with comments, ids and retry, newline-delimited lines,
oversize, garbage) calls for."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Principal
from mcp_edge.cache.layer import _Recorder
from mcp_edge.cache.rules import judge_result
from mcp_edge.core.sse import SSESplitter, encode_event
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.edge.responses import ResponseInspector
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.hook import RoutePolicy
from mcp_edge.policy.layer import PolicyListLayer
from mcp_edge.policy.metrics import PolicyMetrics

RID = 7
MAX = 1024
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream")]
NOTE = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
CALL = {
    "jsonrpc": "2.0",
    "id": RID,
    "result": {"resultType": "complete", "content": [], "cacheScope": "public", "ttlMs": 9},
}
TOOLS = {
    "jsonrpc": "2.0",
    "id": RID,
    "result": {"tools": [{"name": "get_weather"}, {"name": "secret"}]},
}
BIG = {"jsonrpc": "2.0", "id": RID, "result": {"content": [], "pad": "x" * (MAX + 100)}}


def d(doc: Any) -> bytes:
    return orjson.dumps(doc)


def cuts(body: bytes) -> list[list[bytes]]:
    """The body whole, and cut in two at every byte boundary."""
    return [[body]] + [[body[:k], body[k:]] for k in range(1, len(body))]


def messages(status: int, headers: list, parts: list[bytes]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "http.response.start", "status": status, "headers": headers}
    ]
    out += [
        {"type": "http.response.body", "body": p, "more_body": i < len(parts) - 1}
        for i, p in enumerate(parts)
    ]
    return out


def seen(sent: list[dict[str, Any]]) -> tuple[int, bytes, bytes]:
    """What a client got: status, content type, body."""
    start = next(m for m in sent if m["type"] == "http.response.start")
    ctype = dict((k.lower(), v) for k, v in start.get("headers", [])).get(b"content-type", b"")
    return start["status"], ctype, b"".join(m.get("body", b"") for m in sent[1:])


async def inspected(mrtr: bool, status: int, headers: list, parts: list[bytes]):
    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(dict(message))

    inspector = ResponseInspector(
        send,
        request_id=RID,
        rpc_method="tools/call" if mrtr else "resources/read",
        mrtr_method=mrtr,
        sealer=lambda result: {**result, "requestState": "sealed"},
        max_inspect_bytes=MAX,
        on_violation=lambda kind: None,
    )
    for message in messages(status, headers, parts):
        if inspector.finished:
            break
        await inspector(message)
    return seen(sent)


def error_reason(body: bytes) -> str | None:
    """The ``data.reason`` (or ``violation``) of the error the client got last, in a JSON body
    or an SSE event; None when the last message is no error."""
    if not body.lstrip().startswith(b"{"):
        data = [ev.data for ev in SSESplitter(1 << 20).feed(body) if ev.data]
        body = data[-1].encode() if data else b"{}"
    try:
        last = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # (passed as it came)
    error = last.get("error")
    return (error["data"].get("reason") or error["data"].get("violation")) if error else None


INSPECTED = [
    # name, status, headers, body, (status, content type, reason of the error the client gets)
    ("json", 200, JSON, d(CALL), (200, b"application/json", None)),
    (
        "json_blank_lines",
        200,
        JSON,
        b"\n\n  " + d(CALL) + b"\n\n",
        (200, b"application/json", None),
    ),
    ("json_garbage", 200, JSON, b"{nope", (502, b"application/json", "upstream_garbage")),
    (
        "sse",
        200,
        SSE,
        b"retry: 50\n\n: ping\n\nid: 3\n" + encode_event(d(NOTE)) + encode_event(d(CALL)),
        (200, b"text/event-stream", None),
    ),
    (
        "sse_after_final",
        200,
        SSE,
        encode_event(d(CALL)) + encode_event(d(NOTE)),
        (200, b"text/event-stream", "after_final"),
    ),
    (
        "ndjson",
        200,
        JSON,
        d(NOTE) + b"\n" + d(CALL) + b"\n",
        (200, b"text/event-stream", None),
    ),
    (
        "ndjson_garbage",
        200,
        JSON,
        d(NOTE) + b"\nnope\n" + d(CALL) + b"\n",
        (200, b"text/event-stream", "upstream_garbage"),
    ),
    (
        "big_json",
        200,
        JSON,
        d(BIG),
        (502, b"application/json", "upstream_response_too_large"),
    ),
    (
        "big_sse_event",
        200,
        SSE,
        encode_event(d(NOTE)) + encode_event(d(BIG)),
        (200, b"text/event-stream", "upstream_response_too_large"),
    ),
    (
        "big_line",
        200,
        JSON,
        d(NOTE) + b"\n" + d(BIG) + b"\n",
        (200, b"text/event-stream", "upstream_response_too_large"),
    ),
]


@pytest.mark.parametrize("mrtr", [True, False], ids=["mrtr", "other"])
@pytest.mark.parametrize(
    "name,status,headers,body,expected", INSPECTED, ids=[f[0] for f in INSPECTED]
)
async def test_the_inspector_answers_the_same_however_the_answer_is_cut(
    mrtr, name, status, headers, body, expected
):
    whole = await inspected(mrtr, status, headers, [body])
    if not mrtr and name in ("sse_after_final", "json_garbage"):
        expected = (200, expected[1], None)  # another method's answer passes unread
    assert (whole[0], whole[1], error_reason(whole[2])) == expected
    if expected[2] is None and headers == JSON and whole[1] == b"application/json":
        assert whole[2] == body  # passed as it came, leading blank lines and all
    for parts in cuts(body)[1:]:
        assert await inspected(mrtr, status, headers, parts) == whole, parts


# ---------------------------------------------------------------------------------- policy


def route_policy() -> RoutePolicy:
    config = {"default": "deny", "rules": [{"when": 'name == "get_weather"', "action": "allow"}]}
    return RoutePolicy(
        route="r",
        config=RoutePolicyConfig.model_validate(config),
        metrics=PolicyMetrics(CollectorRegistry()),
    )


async def filtered(headers: list, parts: list[bytes]) -> tuple[int, bytes, bytes]:
    async def upstream(scope, receive, send):
        for message in messages(200, headers, parts):
            await send(message)

    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(dict(message))

    ctx = RequestContext(
        request_uid="u",
        modern=True,
        request_id=RID,
        rpc_method="tools/list",
        principal=Principal(id="alice", display="alice"),
    )
    layer = PolicyListLayer(upstream, route_policy(), max_bytes=MAX)
    await layer({"type": "http", "headers": [], SCOPE_KEY: ctx}, None, send)  # type: ignore[arg-type]
    return seen(sent)


def listed(ctype: bytes, body: bytes) -> list[dict[str, Any]]:
    """The messages of a list answer, however framed."""
    if ctype == b"text/event-stream":
        return [orjson.loads(ev.data) for ev in SSESplitter(1 << 20).feed(body) if ev.data]
    return [orjson.loads(line) for line in body.splitlines() if line.strip()]


@pytest.mark.parametrize(
    "headers,body",
    [
        (JSON, d(TOOLS)),
        (SSE, b": ping\n\n" + encode_event(d(NOTE)) + encode_event(d(TOOLS))),
        (JSON, d(NOTE) + b"\n" + d(TOOLS) + b"\n"),
        (JSON, d(TOOLS) + b"\n" + d(NOTE) + b"\n"),
    ],
    ids=["json", "sse", "lines", "lone_response_then_lines"],
)
async def test_the_list_filter_reaches_the_response_in_every_framing(headers, body):
    whole = await filtered(headers, [body])
    found = [m for m in listed(whole[1], whole[2]) if m.get("id") == RID]
    assert len(found) == 1
    assert found[0]["result"] == {"tools": [{"name": "get_weather"}], "cacheScope": "private"}
    for parts in cuts(body)[1:]:
        assert await filtered(headers, parts) == whole, parts


# ---------------------------------------------------------------------------------- cache


async def recorded(headers: list, parts: list[bytes]) -> str:
    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(dict(message))

    recorder = _Recorder(send, RID, MAX, Reservation(None))
    for message in messages(200, headers, parts):
        await recorder(message)
    assert b"".join(m.get("body", b"") for m in sent[1:]) == b"".join(parts)
    if recorder.reason is not None or recorder.response is None:
        return recorder.reason or "incomplete"
    return judge_result(recorder.response, RID, allow_private=False, max_ttl_ms=1000)[1]


@pytest.mark.parametrize(
    "headers,body,reason",
    [
        (JSON, d(CALL), "stored"),
        (JSON, b"  " + d(CALL) + b"\n", "stored"),
        (JSON, d({**CALL, "id": 8}), "not_ours"),
        (JSON, b"{nope", "not_json"),
        (JSON, d(NOTE) + b"\n" + d(CALL) + b"\n", "not_json"),
        (SSE, encode_event(d(CALL)), "not_json"),
        (JSON, d({**BIG, "result": {**BIG["result"], "cacheScope": "public"}}), "too_large"),
    ],
    ids=["json", "blank_lines", "other_id", "garbage", "lines", "sse", "too_large"],
)
async def test_the_cache_recorder_keeps_one_json_response_however_it_is_cut(headers, body, reason):
    for parts in cuts(body):
        assert await recorded(headers, parts) == reason, parts


REQUEST = {"jsonrpc": "2.0", "id": 70, "method": "roots/list", "params": {"result": 1}}


@pytest.mark.parametrize(
    "headers,body",
    [
        (SSE, encode_event(d(REQUEST)) + encode_event(d(TOOLS))),
        (SSE, encode_event(d(REQUEST).replace(b'"id"', b'"\\u0069d"')) + encode_event(d(TOOLS))),
        (JSON, d(REQUEST) + b"\n" + d(TOOLS) + b"\n"),
        (JSON, d(NOTE) + b"\nnot json\n" + d(TOOLS) + b"\n"),
        (SSE, encode_event(d(TOOLS).replace(b'"result"', b'"\\u0072esult"'))),
        (SSE, encode_event(d({**TOOLS, "id": str(RID)}))),
        (JSON, d({**TOOLS, "id": str(RID)})),
        (JSON, d(TOOLS)[:-1] + b',"x":"\\ud800"}'),
        (SSE, encode_event(d(TOOLS)[:-1] + b',"x":"\\ud800"}')),
    ],
    ids=[
        "request_first",
        "request_with_an_escaped_id",
        "request_line_first",
        "line_not_json_first",
        "escaped_result",
        "id_as_a_string",
        "json_id_as_a_string",
        "json_lone_surrogate",
        "sse_lone_surrogate",
    ],
)
async def test_a_hostile_list_answer_never_passes_the_filter_unfiltered(headers, body):
    """What the list filter cannot read on ends the answer with an error; a response a client
    may take for the list's (its id a string, its name escaped) is filtered too. A hidden tool
    never reaches the client, however the answer is cut."""
    for parts in cuts(body):
        status, ctype, out = await filtered(headers, parts)
        assert b"secret" not in out, (parts, out)
