"""The per-route status switch for -32021 (go-sdk v1.7 clients drop the connection on a 400)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcp_edge.core.errors import RpcError
from mcp_edge.edge.asgi import send_rpc_error
from mcp_edge.edge.compat import RouteCompat, missing_capability_status


class Sink:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return self.messages[0]["status"]

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages[1:])


MISSING = RpcError(-32021, "needs sampling", {"requiredCapabilities": {"sampling": {}}})


async def test_default_is_the_spec():
    assert RouteCompat().missing_capability_status == 400
    sink = Sink()
    assert missing_capability_status(sink, 400) is sink


async def test_32021_goes_out_with_200():
    sink = Sink()
    await send_rpc_error(missing_capability_status(sink, 200), MISSING, 7)
    assert sink.status == 200
    assert orjson.loads(sink.body) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32021,
            "message": "needs sampling",
            "data": {"requiredCapabilities": {"sampling": {}}},
        },
    }


@pytest.mark.parametrize(
    "error",
    [
        RpcError(-32602, "Invalid or expired requestState", {"reason": "integrity"}),
        RpcError(-32020, "header mismatch"),
        RpcError(-32600, "mentions -32021 in the message only"),
    ],
)
async def test_other_400s_keep_their_status(error):
    sink = Sink()
    await send_rpc_error(missing_capability_status(sink, 200), error, 1)
    assert sink.status == 400 and orjson.loads(sink.body)["error"]["code"] == error.code


async def test_a_32021_from_upstream_in_several_chunks():
    sink = Sink()
    send = missing_capability_status(sink, 200)
    body = MISSING.body(3)
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json; charset=utf-8")],
        }
    )
    await send({"type": "http.response.body", "body": body[:10], "more_body": True})
    await send({"type": "http.response.body", "body": body[10:], "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    assert sink.status == 200 and sink.body == body


async def test_streams_and_large_answers_pass_as_they_come():
    sink = Sink()
    send = missing_capability_status(sink, 200)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        }
    )
    await send({"type": "http.response.body", "body": b"data: x\n\n", "more_body": True})
    assert len(sink.messages) == 2  # nothing held
    sink = Sink()
    send = missing_capability_status(sink, 200)
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b"x" * 70_000, "more_body": True})
    await send({"type": "http.response.body", "body": b"y", "more_body": False})
    assert sink.status == 400 and sink.body == b"x" * 70_000 + b"y"
