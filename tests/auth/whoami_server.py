"""A tiny MCP server (published SDK, Streamable HTTP on /mcp) whose one tool reports the
authentication-related request headers it received, so tests can see exactly what the gateway
passed upstream.

    python tests/auth/whoami_server.py --port 3001
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from mcp.server.mcpserver import Context, MCPServer

REPORTED = (
    "authorization",
    "x-mcp-principal",
    "x-upstream-key",
    "x-forwarded-user",
    "x-edge-secret",
)

server: MCPServer = MCPServer("whoami", version="1.0.0")


@server.tool()
def whoami(ctx: Context) -> str:
    """The authentication-related headers of this request, as JSON (null when absent)."""
    headers = ctx.headers or {}
    return json.dumps({name: headers.get(name) for name in REPORTED}, sort_keys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    app = server.streamable_http_app(host=args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
