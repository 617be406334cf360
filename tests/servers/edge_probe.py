"""An MCP upstream that records exactly what reached it, for tests of what the edge lets through.

    python tests/servers/edge_probe.py --port N --log FILE [--host 127.0.0.1]

Built with the published SDK's ``MCPServer`` (``mcp`` 2.x, serving both the 2026-07-28 wire and
2025-era sessions). Every HTTP request is logged to FILE, before the SDK sees it, as one JSON line:
the HTTP method, the request's header names and values exactly as they arrived (in order, repeats
kept), and the JSON body. Tests find their own requests by a marker they put in the arguments.

Tools: ``work(marker)`` and ``allowed(marker)`` answer with the marker, ``denied(marker)`` too (a
policy in front refuses it), ``ask(marker)`` asks a form question first (``input_required``).
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from typing import IO, Any

import uvicorn
from body_replay import read_body, replaying
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from starlette.types import ASGIApp, Receive, Scope, Send


def build_server() -> MCPServer:
    server: MCPServer = MCPServer("mcp-edge-probe")

    @server.tool()
    def work(marker: str) -> str:
        """Answers with the marker."""
        return f"worked {marker}"

    @server.tool()
    def allowed(marker: str) -> str:
        """A tool the tests' policies allow."""
        return f"allowed {marker}"

    @server.tool()
    def denied(marker: str) -> str:
        """A tool the tests' policies deny."""
        return f"denied tool ran {marker}"

    @server.tool()
    async def ask(marker: str, ctx: Context) -> str | InputRequiredResult:
        """Asks a question, then answers with the marker."""
        reply = (ctx.input_responses or {}).get("confirm")
        if isinstance(reply, ElicitResult) and reply.action == "accept":
            return f"asked {marker}"
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
        return InputRequiredResult(
            input_requests={
                "confirm": ElicitRequest(
                    params=ElicitRequestFormParams(message="Go on?", requested_schema=schema)
                )
            },
            request_state=json.dumps({"marker": marker}),
        )

    return server


class Recorded:
    """Logs each request (method, raw headers, body) before passing it on."""

    def __init__(self, app: ASGIApp, log: IO[str]) -> None:
        self.app = app
        self.log = log
        self.lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, whole = await read_body(receive) if scope["method"] == "POST" else (b"", True)
        if not whole:
            return
        try:
            doc: Any = json.loads(body) if body else None
        except ValueError:
            doc = {"unparsed": body.decode("utf-8", "replace")}
        entry = {
            "http_method": scope["method"],
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "body": doc,
        }
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()
        await self.app(scope, replaying(body, receive), send)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level="WARNING")
    app = build_server().streamable_http_app(json_response=True, host=args.host)
    with open(args.log, "a", encoding="utf-8") as log:
        uvicorn.run(
            Recorded(app, log), host=args.host, port=args.port, http="h11", log_level="warning"
        )


if __name__ == "__main__":
    main()
