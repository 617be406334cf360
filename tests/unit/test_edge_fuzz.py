"""Property-based fuzzing of the edge, in-process: generated requests (methods, ids, params,
state, headers, bodies) through the whole route (guard, layers) to a fake upstream that answers
with a generated answer (JSON, SSE, newline-delimited JSON, garbage, truncated, wrong ids,
input_required anywhere, oversized, compressed). Every exchange must end in one response with
the properties of ``tests.support.fuzz.check_response``, within a time bound and a memory bound.

Short by default; ``HYPOTHESIS_PROFILE=fuzz uv run pytest tests/unit/test_edge_fuzz.py`` runs the
long profile (``MCP_EDGE_FUZZ_EXAMPLES`` per test, default 20 000)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import load_config
from tests.support.fuzz import (
    Answer,
    Received,
    Request,
    answers,
    check_response,
    fuzz_profile,
    fuzz_settings,
    requests,
)

pytestmark = pytest.mark.timeout(3600 if fuzz_profile() else 120)

MAX_INSPECT = 64 * 1024
MAX_BODY = 256 * 1024
#: Per exchange: the bound on time, and on memory beyond what the request and answer hold.
SECONDS = 10.0
MEMORY_SLACK = 4 * 1024 * 1024


class Upstream:
    """The route's inner app: reads the request, answers with the drawn answer."""

    def __init__(self) -> None:
        self.answer: Answer | None = None
        self.reached = False

    async def __call__(self, scope, receive, send) -> None:
        self.reached = True
        while True:
            message = await receive()
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        answer = self.answer
        assert answer is not None
        await send(
            {"type": "http.response.start", "status": answer.status, "headers": answer.headers}
        )
        for chunk in answer.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as r:
        yield r


@pytest.fixture(scope="module")
def edge(runner: asyncio.Runner) -> tuple[GatewayApp, Upstream]:
    upstream = Upstream()
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    config.limits.max_inspect_bytes = MAX_INSPECT
    config.limits.max_body_bytes = MAX_BODY
    config.limits.final_response_timeout = 5.0

    async def build() -> GatewayApp:
        return GatewayApp(
            config, KeyRing([parse_key_spec(generate_key())]), inner_apps={"default": upstream}
        )

    return runner.run(build()), upstream


async def _exchange(app: GatewayApp, req: Request) -> Received:
    got = Received()
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": req.body, "more_body": False}
        await asyncio.sleep(3600)  # the client stays connected
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        got.take(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": req.http_method,
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": req.headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    await app(scope, receive, send)
    return got


def _run(
    runner: asyncio.Runner, edge: tuple[GatewayApp, Upstream], req: Request, answer: Answer
) -> None:
    app, upstream = edge
    upstream.answer, upstream.reached = answer, False
    tracemalloc.start()
    try:
        got = runner.run(asyncio.wait_for(_exchange(app, req), SECONDS))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = MEMORY_SLACK + 6 * (len(req.body) + len(answer.body))
    assert peak <= bound, (
        f"{peak} bytes at peak for a {len(req.body)}-byte request and a {len(answer.body)}-byte answer"
    )
    check_response(req, got, reached=upstream.reached, answer=answer)


@st.composite
def exchanges(draw: st.DrawFn) -> tuple[Request, Answer]:
    req = draw(requests())
    rid = req.doc.get("id") if isinstance(req.doc, dict) else 1
    return req, draw(answers(rid, MAX_INSPECT))


@fuzz_settings(300)
@given(exchanges())
def test_every_exchange_ends_in_one_well_formed_response(runner, edge, exchange) -> None:
    req, answer = exchange
    _run(runner, edge, req, answer)


@st.composite
def mrtr_exchanges(draw: st.DrawFn) -> tuple[Request, Answer]:
    """Well-formed 2026-07-28 calls of the three MRTR methods: the answer side is what varies."""
    method = draw(st.sampled_from(["tools/call", "resources/read", "prompts/get"]))
    rid = draw(st.one_of(st.integers(-(2**53), 2**53), st.text(max_size=8)))
    target = {"uri": "test://x"} if method == "resources/read" else {"name": "t"}
    doc = {
        "jsonrpc": "2.0",
        "id": rid,
        "method": method,
        "params": {
            **target,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {
                    "elicitation": {"form": {}},
                    "roots": {},
                },
            },
        },
    }
    import orjson

    name = (target.get("name") or target.get("uri")).encode()
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"mcp-method", method.encode()),
        (b"mcp-name", name),
    ]
    req = Request("POST", headers, orjson.dumps(doc), doc)
    return req, draw(answers(rid, MAX_INSPECT))


@fuzz_settings(300)
@given(mrtr_exchanges())
def test_mrtr_answers_end_in_one_response_for_the_id(runner, edge, exchange) -> None:
    req, answer = exchange
    _run(runner, edge, req, answer)
