"""The benchmark's upstream: a real MCP server built with the published SDK (``mcp`` 2.x),
tuned for speed (uvloop, httptools, no access log).

    python -m bench.upstream --port 3001 [--json-response]

``tools/list`` results say ``cacheScope: "public"``, ``ttlMs: 60000``.

Tools:

``small``     a tiny text result
``big``       a 100 KB text result
``ask``       a hand-built ``InputRequiredResult`` (one form elicitation, a plain upstream
              ``requestState``); completes on the retry that carries the answer and the state
``progress``  100 progress notifications, then a result: the SDK answers with an SSE stream
              when the call carries a ``progressToken`` and the app is *not* in json_response
              mode (json_response mode drops notifications)

The SDK seals its own ``requestState`` with a fixed key, so any process of this server can open a
state another one sealed.
"""

from __future__ import annotations

import argparse
import logging

import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer, RequestStateSecurity
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult

SERVER_NAME = "mcp-edge-bench"
# Fixed on purpose (benchmark fixture, not a secret): every upstream process opens the same state.
STATE_KEY = b"mcp-edge-bench/upstream/request-state-key/v1"
BIG_BYTES = 100 * 1024
PROGRESS_STEPS = 100
ASK_STATE = "bench-ask-v1"

_BIG_TEXT = ("0123456789abcdef" * (BIG_BYTES // 16 + 1))[:BIG_BYTES]
_ASK = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which colour?",
        requested_schema={
            "type": "object",
            "properties": {"colour": {"type": "string"}},
            "required": ["colour"],
        },
    )
)

server = MCPServer(
    SERVER_NAME,
    version="1.0.0",
    request_state_security=RequestStateSecurity(keys=[STATE_KEY]),
    # tools/list may be cached by anyone for a minute (what the edge-cache workload relies on).
    cache_hints={"tools/list": CacheHint(ttl_ms=60_000, scope="public")},
)


@server.tool()
def small() -> str:
    """A tiny result."""
    return "ok"


@server.tool()
def big() -> str:
    """A 100 KB text result."""
    return _BIG_TEXT


@server.tool()
async def ask(ctx: Context) -> str | InputRequiredResult:
    """One MRTR round: asks for a colour, completes when the retry brings it back."""
    answer = (ctx.input_responses or {}).get("colour")
    if (
        isinstance(answer, ElicitResult)
        and answer.action == "accept"
        and answer.content
        and ctx.request_state == ASK_STATE
    ):
        return f"colour={answer.content.get('colour')}"
    return InputRequiredResult(input_requests={"colour": _ASK}, request_state=ASK_STATE)


@server.tool()
async def progress(ctx: Context) -> str:
    """Reports progress 100 times (an SSE response when the call has a progressToken)."""
    for step in range(1, PROGRESS_STEPS + 1):
        await ctx.report_progress(progress=step, total=PROGRESS_STEPS)
    return "done"


def build_app(json_response: bool, host: str = "127.0.0.1"):  # noqa: ANN201 - a Starlette app
    return server.streamable_http_app(json_response=json_response, host=host)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="mcp-edge benchmark upstream (mcp 2.x)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--json-response", action="store_true", help="JSON answers only (no SSE)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(
        build_app(args.json_response, args.host),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        backlog=4096,
    )


if __name__ == "__main__":
    main()
