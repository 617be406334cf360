"""A light MCP upstream: a bare ASGI app on uvicorn (uvloop + httptools, no access log), no SDK.

    python -m bench.light --port 3003

It answers ``tools/call`` with a tiny result (the ``small_call`` answer) and ``tools/list`` with
one tool, each for the request's own id; anything else gets ``-32601``. Its CPU per request is a
fraction of the SDK server's, so the gateway's own cost is a large share of the path: this is the
upstream the performance goals' "light upstream" rows use.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
import uvicorn

_SMALL = {
    "content": [{"type": "text", "text": "ok"}],
    "structuredContent": {"result": "ok"},
    "isError": False,
    "resultType": "complete",
}
_LIST = {"tools": [{"name": "small", "inputSchema": {"type": "object"}}], "resultType": "complete"}
_HEADERS = [(b"content-type", b"application/json")]


def answer(doc: Any) -> bytes:
    rid = doc.get("id") if isinstance(doc, dict) else None
    method = doc.get("method") if isinstance(doc, dict) else None
    if method == "tools/call":
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": _SMALL})
    if method == "tools/list":
        return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": _LIST})
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}
    )


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    parts = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    if scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 405, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    try:
        body = answer(orjson.loads(b"".join(parts)))
    except orjson.JSONDecodeError:
        body = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [*_HEADERS, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        lifespan="off",
        backlog=4096,
    )


if __name__ == "__main__":
    main()
