"""A 2025-era FastMCP server (the published ``mcp`` 1.x, unmodified) serving two resources,
``file:///public/a`` and ``file:///secret/b``, and a template ``file:///secret/{name}`` whose
``name`` it completes. It resolves every URI it is asked for the way the SDK does (pydantic's
``AnyUrl``: ``file:///public/../secret/b`` reads ``file:///secret/b``), which is what a
gateway's URI checks must not be stepped over by. Logs every request it receives (JSON lines).

    uv run --isolated --no-project --with 'mcp==1.30.0' \\
        python tests/servers/legacy_files.py --port N --log FILE
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import uvicorn
from body_replay import read_body, replaying
from mcp.server.fastmcp import FastMCP
from mcp.types import Completion, ResourceTemplateReference


def build() -> FastMCP:
    mcp = FastMCP("legacy-files")

    @mcp.resource("file:///public/a", mime_type="text/plain")
    def public() -> str:
        return "public a"

    @mcp.resource("file:///secret/b", mime_type="text/plain")
    def secret() -> str:
        return "SECRET b"

    @mcp.resource("file:///secret/{name}", mime_type="text/plain")
    def secrets(name: str) -> str:
        return f"SECRET {name}"

    @mcp.completion()
    async def complete(ref: Any, argument: Any, context: Any) -> Completion | None:
        if isinstance(ref, ResourceTemplateReference) and "secret" in str(ref.uri):
            return Completion(values=["SECRET-NAME"])
        return None

    return mcp


class Log:
    """Appends each request's body (one JSON line) to a file, then passes it on."""

    def __init__(self, app: Any, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, _ = await read_body(receive)
        with open(self.path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps({"body": body.decode("utf-8", "replace")}) + "\n")
        await self.app(scope, replaying(body, receive), send)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    app = Log(build().streamable_http_app(), args.log)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", http="h11")


if __name__ == "__main__":
    main()
