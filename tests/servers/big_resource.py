"""A 2026-07-28 MCP upstream (``mcp`` 2.x ``MCPServer``) with resources as large as asked.

    python tests/servers/big_resource.py --port N [--json-response]

``resources/read`` of ``big://{kib}`` answers ``kib`` KiB of text (ASCII, so a JSON answer is a
little larger than that). Each size's text is made once and kept. Used to see how much of a
gateway process large answers take when clients do not read them (``bench.answer_rss`` and
``tests/integration/test_answer_budget.py``).
"""

from __future__ import annotations

import argparse
import functools
import logging

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("mcp-edge-big-resource", version="1.0.0")


@functools.lru_cache(maxsize=4)
def _text(kib: int) -> str:
    return ("0123456789abcdef" * 64) * kib


@server.resource("big://{kib}", mime_type="text/plain")
def big(kib: str) -> str:
    """``kib`` KiB of text."""
    return _text(min(int(kib), 64 * 1024))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--json-response", action="store_true", help="JSON answers (no SSE)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    app = server.streamable_http_app(json_response=args.json_response, host=args.host)
    # h11: httptools keeps trailing header whitespace, which the SDK's Mcp-Name check rejects.
    uvicorn.run(app, host=args.host, port=args.port, http="h11", log_level="warning")


if __name__ == "__main__":
    main()
