"""A real MCP server (``mcp`` 2.x) for streaming and cancellation tests.

    python tests/servers/streaming.py --port N --events FILE

Tools:
- ``slow_progress(steps, delay)``: reports progress ``steps`` times, ``delay`` seconds apart, then
  answers; with a ``progressToken`` the answer is an SSE stream.
- ``sleepy(seconds)``: reports progress once, then sleeps; writes ``started``/``finished``/
  ``cancelled`` lines to the events file, so a test can see a disconnect cancel it.
- ``big(size)``: a text result of ``size`` bytes.
- ``echo_headers``: the request headers the upstream received.
- ``ask_color``: a hand-built InputRequiredResult (form elicitation) until answered.
"""

from __future__ import annotations

import argparse
import time

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

EVENTS_FILE = "/dev/null"


def record(line: str) -> None:
    with open(EVENTS_FILE, "a") as f:
        f.write(f"{time.time():.3f} {line}\n")


def build() -> MCPServer:
    server = MCPServer("streaming-fixture")

    @server.tool()
    async def slow_progress(steps: int, delay: float, ctx: Context) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            await anyio.sleep(delay)
        return f"done after {steps} steps"

    @server.tool()
    async def sleepy(seconds: float, ctx: Context) -> str:
        record("started")
        try:
            await ctx.report_progress(0, 1, "sleeping")
            await anyio.sleep(seconds)
        except BaseException:
            record("cancelled")
            raise
        record("finished")
        return "awake"

    @server.tool()
    def echo_headers(ctx: Context) -> dict[str, str | None]:
        """The request headers a gateway may add, drop or rewrite, as the upstream saw them."""
        headers = ctx.headers or {}
        names = (
            "host",
            "origin",
            "authorization",
            "traceparent",
            "tracestate",
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "mcp-param-region",
            "x-request-id",
            "accept-encoding",
            "cookie",
        )
        return {name: headers.get(name) for name in names}

    @server.tool()
    def big(size: int) -> str:
        return "x" * size

    @server.tool()
    def ask_color(ctx: Context) -> str | InputRequiredResult:
        answers = ctx.input_responses or {}
        answer = answers.get("color")
        if answer is None:
            return InputRequiredResult(
                input_requests={
                    "color": ElicitRequest(
                        params=ElicitRequestFormParams(
                            message="Favourite colour?",
                            requested_schema={
                                "type": "object",
                                "properties": {"color": {"type": "string"}},
                            },
                        )
                    )
                },
                request_state="asked-color",
            )
        content = (
            answer.get("content") if isinstance(answer, dict) else getattr(answer, "content", None)
        )
        return f"colour={(content or {}).get('color')} state={ctx.request_state}"

    return server


def main() -> None:
    global EVENTS_FILE
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--events", default="/dev/null")
    args = parser.parse_args()
    EVENTS_FILE = args.events
    app = build().streamable_http_app(host=args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
