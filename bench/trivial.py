"""A trivial HTTP server (uvloop + httptools, a fixed JSON answer) to measure what the load
generator itself can do: ``python -m bench.trivial --port P``.

It answers every request with a canned tools/call result that passes the ``small_call`` check.
"""

from __future__ import annotations

import argparse
import asyncio

import httptools

try:
    import uvloop
except ImportError:  # pragma: no cover
    uvloop = None  # type: ignore[assignment]

BODY = (
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}],'
    b'"structuredContent":{"result":"ok"},"isError":false,"resultType":"complete"}}'
)
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


class Handler(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(RESPONSE)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Handler, host, port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    runner = uvloop.run if uvloop is not None else asyncio.run
    runner(serve(args.host, args.port))


if __name__ == "__main__":
    main()
