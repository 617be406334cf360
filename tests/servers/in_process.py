"""MCP servers built with the published SDK, wrapped in their own process by ``mcp_edge.Edge``
and served by uvicorn: the in-process edge's test fixtures.

    python tests/servers/in_process.py SHAPE --port N [--host 127.0.0.1] [--keys HEX]
                                       [--instance NAME] [--log FILE]

The Edge reads its key ring from ``MCP_EDGE_STATE_KEYS``, as ``serve`` does; callers are
anonymous. Shapes:

``wrapped``     ``Edge(app)``: the server of ``mrtr_upstream.py`` (its own state sealed with the
                shared secret ``--keys``, results naming ``--instance``), behind the Edge the
                counter of what reaches it (its ``GET /stats`` passes the Edge untouched), the
                Edge's admin endpoints under ``/edge``
``hosted``      a Starlette host app with a page of its own (``GET /hello``); ``mrtr_upstream``
                server "a" mounted at ``/a``, guarded by ``Middleware(Edge, path="/a/mcp")``;
                ``Edge(server "b")`` mounted at ``/b`` as a sub-application (gateway id
                ``hosted-b``), started by the host's lifespan (``edge.lifespan``)
``everything``  ``Edge(app)`` around the conformance everything-server (``everything.py``)
``plaintext``   ``Edge(app)`` around ``plaintext_state.py`` (plaintext state), its request log
                (``--log``) between the Edge and the server: what reached the server
``failing``     ``Edge(app)`` around a Starlette app whose own lifespan raises
                ``RuntimeError("database is down (...)")``
``host-page``   a Starlette host app with a page of its own (``GET /hello``) and an SDK app
                mounted at ``/``, guarded by ``Middleware(Edge)`` (the Edge is built by the host
                app, at its first call)
``cached``      ``Edge(app)`` with the edge cache on and three allowed hosts (``app.example``,
                ``tenant-b.example``, ``evil.example``) around the ``mrtr_upstream`` server,
                whose ``tools/list`` is public for 60 s and whose own Host check is off (the
                Edge's checks Host), behind the counter of what reaches it (``GET /stats``)

``--lifespan`` is uvicorn's (default ``on``: a failure to start stops the server).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import AsyncIterator
from typing import IO, Any

import uvicorn
from mcp.server.mcpserver import RequestStateSecurity
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from mcp_edge import Edge


def wrapped(args: argparse.Namespace) -> Any:
    import mrtr_upstream

    security = RequestStateSecurity(keys=[bytes.fromhex(args.keys)])
    server = mrtr_upstream.build_server(args.instance, security)
    app = server.streamable_http_app(json_response=True, host=args.host)
    return Edge(mrtr_upstream.Stats(app, args.instance), anonymous=True, admin_path="/edge")


def hosted(args: argparse.Namespace) -> Any:
    import mrtr_upstream

    security = RequestStateSecurity(keys=[bytes.fromhex(args.keys)])
    server_a = mrtr_upstream.build_server("a", security)
    app_a = server_a.streamable_http_app(json_response=True, host=args.host)
    server_b = mrtr_upstream.build_server("b", security)
    edge_b = Edge(
        server_b.streamable_http_app(json_response=True, host=args.host),
        path="/mcp",
        anonymous=True,
        gateway={"id": "hosted-b"},
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        # A mounted app gets no lifespan of its own: the host runs them.
        async with server_a.session_manager.run(), edge_b.lifespan():
            yield

    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello from the host app", headers={"x-host-app": "yes"})

    return Starlette(
        routes=[Route("/hello", hello), Mount("/a", app=app_a), Mount("/b", app=edge_b)],
        middleware=[Middleware(Edge, path="/a/mcp", anonymous=True)],
        lifespan=lifespan,
    )


def everything(args: argparse.Namespace) -> Any:
    import everything as fixture

    app = fixture.server.streamable_http_app(
        event_store=fixture.MemoryEventStore(), retry_interval=100, host=args.host
    )
    return Edge(app, anonymous=True)


def plaintext(args: argparse.Namespace) -> Any:
    import plaintext_state

    sink: IO[str] = open(args.log, "a", encoding="utf-8") if args.log else sys.stderr  # noqa: SIM115
    app = plaintext_state.build_server().streamable_http_app(host=args.host)
    return Edge(plaintext_state.RequestLog(app, sink), anonymous=True)


def failing(args: argparse.Namespace) -> Any:
    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        raise RuntimeError("database is down (postgres://db.internal:5432: connection refused)")
        yield

    return Edge(Starlette(lifespan=lifespan), anonymous=True)


def host_page(args: argparse.Namespace) -> Any:
    import mrtr_upstream

    server = mrtr_upstream.build_server(
        args.instance, RequestStateSecurity(keys=[bytes.fromhex(args.keys)])
    )
    app = server.streamable_http_app(json_response=True, host=args.host)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with server.session_manager.run():
            yield

    async def hello(_: Request) -> PlainTextResponse:
        return PlainTextResponse("hello from the host app")

    return Starlette(
        routes=[Route("/hello", hello), Mount("/", app=app)],
        middleware=[Middleware(Edge, anonymous=True)],
        lifespan=lifespan,
    )


def cached(args: argparse.Namespace) -> Any:
    import mrtr_upstream

    security = RequestStateSecurity(keys=[bytes.fromhex(args.keys)])
    server = mrtr_upstream.build_server(args.instance, security, list_ttl_ms=60_000)
    # The Edge checks Host and Origin before anything reaches the app: the SDK's own check off.
    app = server.streamable_http_app(
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return Edge(
        mrtr_upstream.Stats(app, args.instance),
        anonymous=True,
        routes=[{"name": "default", "path": "/mcp", "cache": {"enabled": True}}],
        security={"allowed_hosts": ["app.example", "tenant-b.example", "evil.example"]},
    )


SHAPES = {
    "wrapped": wrapped,
    "hosted": hosted,
    "everything": everything,
    "plaintext": plaintext,
    "failing": failing,
    "host-page": host_page,
    "cached": cached,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--keys", default="00" * 32, help="the SDK's own request-state secret, hex")
    parser.add_argument("--instance", default="in-process", help="the name results report")
    parser.add_argument("--log", help="plaintext: the request log (default: stderr)")
    parser.add_argument("--log-level", default="warning")
    parser.add_argument("--lifespan", choices=("on", "auto", "off"), default="on")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    # h11, like a plain `pip install mcp`: httptools keeps trailing whitespace in header values,
    # which the SDK's Mcp-Name check rejects. The lifespan is on unless --lifespan says otherwise.
    uvicorn.run(
        SHAPES[args.shape](args),
        host=args.host,
        port=args.port,
        http="h11",
        lifespan=args.lifespan,
        log_level=args.log_level.lower(),
    )


if __name__ == "__main__":
    main()
