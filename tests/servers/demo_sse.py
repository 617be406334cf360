"""The demo upstream (an ``mcp`` 2.x ``MCPServer`` whose ``book_table`` asks through
``Resolve``) served in SSE mode, so its legacy leg can push ``elicitation/create`` mid-call.

    python tests/servers/demo_sse.py --port N [--host 127.0.0.1]

Used to show the bridge in front of the 2.x SDK's own legacy leg (``era: legacy`` on a route):
the same tool answers a 2026-07-28 client with an InputRequiredResult directly, and a 2025
session with a live elicitation, which the bridge turns back into MRTR.
"""

from __future__ import annotations

import argparse

import uvicorn

from mcp_edge.server.demo import build_demo_server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    app = build_demo_server().streamable_http_app(json_response=False, host=args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
