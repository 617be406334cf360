"""A 2026-07-28 MCP upstream (``mcp`` 2.x ``MCPServer``) for the tool-name labels of the metrics.

    python tests/servers/tool_names.py --port N

Tools: ``echo`` (a result), ``fails`` (raises: a result with ``isError: true``) and
:data:`CONTROL_NAME`, a name with control characters (the SDK warns about it but lists and runs
it). A call of any other name gets what the SDK answers a tool it does not have: a result with
``isError: true`` ("Unknown tool"), not a JSON-RPC error.
"""

from __future__ import annotations

import argparse
import logging

import uvicorn
from mcp.server.mcpserver import MCPServer

#: Listed by the upstream; must never reach the metrics' exposition as it is.
CONTROL_NAME = "paint\x1b[31mred\x07"

server = MCPServer("mcp-edge-tool-names", version="1.0.0")


@server.tool()
def echo(text: str = "") -> str:
    """Returns its text."""
    return text


@server.tool()
def fails() -> str:
    """Always fails (a tool error)."""
    raise ValueError("this tool always fails")


def _control() -> str:
    return "painted"


server.add_tool(_control, name=CONTROL_NAME, description="A name with control characters.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    app = server.streamable_http_app(json_response=True, host=args.host)
    # h11: httptools keeps trailing header whitespace, which the SDK's Mcp-Name check rejects.
    uvicorn.run(app, host=args.host, port=args.port, http="h11", log_level="warning")


if __name__ == "__main__":
    main()
