"""The ``mcp-edge`` command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any

from gateway import __version__, hardening
from gateway.config import ConfigError, GatewayConfig, load_config, load_key_ring
from gateway.core.seal import KeyRing, generate_key
from gateway.observability import multiprocess

EXIT_CONFIG = 2
#: A listener's address cannot be bound (in use, not this host's); uvicorn's own code for it.
EXIT_LISTEN = 3


#: ``check-config --probe``: an upstream could not be reached, or answered as no MCP server.
EXIT_PROBE = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-edge",
        description="A stateless edge gateway for the Model Context Protocol (2026-07-28).",
    )
    parser.add_argument("--version", action="version", version=f"mcp-edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the gateway", description="Run the gateway.")
    serve.add_argument("--config", metavar="FILE", help="YAML config file (env MCP_EDGE_CONFIG)")
    serve.add_argument("--upstream", metavar="URL", help="upstream MCP endpoint, e.g. http://127.0.0.1:3001/mcp")
    serve.add_argument("--command", dest="stdio_command", metavar="CMD",
                       help='a local stdio MCP server to run, e.g. "npx -y @modelcontextprotocol/server-everything" '
                            "(split like a shell would, never run by one)")  # fmt: skip
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080)")
    serve.add_argument(
        "--anonymous", action="store_true", help="accept unauthenticated callers as one shared principal"
    )
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")

    demo = sub.add_parser(
        "demo",
        help="run the gateway in front of an embedded demo upstream",
        description="Start the gateway in front of an embedded demo MCP server (with a generated, "
        "throw-away state key) and print how to try it.",
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8080)

    keys = sub.add_parser("keys", help="manage state keys", description="Manage state keys.")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION")
    gen = keys_sub.add_parser("generate", help="print a new random state key (base64url, 32 bytes)")
    gen.add_argument("--count", type=int, default=1)

    tools = sub.add_parser("tools", help="pinned tool definitions (routes with policy.pin_tools)",
                           description="Inspect and accept pinned tool definitions kept in the store's Redis.")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION")
    digests = tools_sub.add_parser("digests", help="print each tool's pinned and last seen digest")
    accept = tools_sub.add_parser("accept", help="accept a tool's changed definition (its last seen digest, "
                                                 "or --digest) on every replica")
    for p in (digests, accept):
        p.add_argument("--config", metavar="FILE", help="the gateway's config file (env MCP_EDGE_CONFIG)")
        p.add_argument("--route", required=True, help="route name")
    accept.add_argument("--tool", required=True, help="tool name")
    accept.add_argument("--digest", help="the digest to accept (default: the one last seen)")

    check = sub.add_parser(
        "check-config", help="validate a configuration and exit",
        description="Validate a configuration and print what each route is. Nothing is sent anywhere "
        "unless --probe asks each HTTP upstream now.",
    )  # fmt: skip
    check.add_argument("--config", metavar="FILE")
    check.add_argument("--probe", action="store_true",
                       help="send each HTTP upstream endpoint a 2026-07-28 server/discover and report its era; "
                            f"exit {EXIT_PROBE} if one is unreachable or no MCP server")  # fmt: skip

    try_ = sub.add_parser(
        "try",
        help="run one MRTR round trip against a gateway",
        description="Call the demo's book_table tool: round 1 gets input_required with a sealed "
        "requestState, round 2 answers it and completes.",
    )
    try_.add_argument("url", nargs="?", default="http://127.0.0.1:8080/mcp")
    try_.add_argument("--token", help="bearer token to send")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if args.command in ("serve", "demo"):
            # Before any key is read: no other process of this user may read this one's memory.
            hardening.make_non_dumpable()
        if args.command == "serve":
            return _serve(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "keys":
            if args.keys_command != "generate":
                parser.parse_args(["keys", "--help"])
            for _ in range(max(1, args.count)):
                print(generate_key())
            return 0
        if args.command == "check-config":
            config = load_config(args.config)
            _check_files(config, args.config)
            app = _build(config, load_key_ring(config.state))
            listeners = app.roles.describe(config.listeners())
            lines, failed = asyncio.run(_describe_routes(app, probe=args.probe))
            for line in listeners + lines:
                print(line)
            print("configuration OK")
            if failed:
                print(f"mcp-edge: {failed} upstream endpoint(s) did not answer as MCP servers (see above)",
                      file=sys.stderr)  # fmt: skip
                return EXIT_PROBE
            return 0
        if args.command == "tools":
            if args.tools_command not in ("digests", "accept"):
                parser.parse_args(["tools", "--help"])
            from gateway.policy.admin import run_tools_command

            return asyncio.run(run_tools_command(load_config(args.config), args))
        if args.command == "try":
            from gateway.tryout import run_tryout

            return asyncio.run(run_tryout(args.url, token=args.token))
    except ConfigError as exc:
        print(f"mcp-edge: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    parser.print_help()
    return EXIT_CONFIG


def _check_files(config: GatewayConfig, path: str | None) -> None:
    """Key and config files readable by other users: refused or warned about (gateway.hardening)."""
    for warning in hardening.check_file_modes(config, path or os.environ.get("MCP_EDGE_CONFIG")):
        print(f"mcp-edge: warning: {warning}", file=sys.stderr, flush=True)


def _build(config: GatewayConfig, ring: KeyRing, **kwargs: Any) -> Any:
    from gateway.app import GatewayApp

    return GatewayApp(config, ring, **kwargs)


async def _describe_routes(app: Any, *, probe: bool) -> tuple[list[str], int]:
    """One line per route (per endpoint with ``probe``), and how many endpoints did not answer
    as MCP servers. Without ``probe`` nothing is sent anywhere."""
    lines = [f"route {name}: stdio server, {len(sessions.instances)} process(es): "
             f"{' '.join(sessions.spec.command)} (not started by check-config)"
             for name, sessions in app.stdio.items()]  # fmt: skip
    failed = 0
    try:
        for name, router in app.eras.items():
            head = f"route {name}: era auto" if router.setting == "auto" else f"route {name}: era {router.setting} (configured)"
            if not probe:
                lines.append(head + (", detected when the gateway runs (--probe asks now)" if router.setting == "auto" else ""))
                continue
            router.probe_timeout = min(router.probe_timeout, 2.0)
            for outcome in await router.probe_all():
                failed += outcome.era is None
                lines.append(f"{head}, {outcome.describe()} ({outcome.endpoint})")
    finally:
        await app.aclose()
    return lines, failed


def _uvicorn_config(app: Any, config: GatewayConfig) -> Any:
    import uvicorn

    from gateway.edge.connections import ConnectionLimits, protocol_factory, raise_fd_limit

    listen = config.listen
    raise_fd_limit(listen.max_connections + config.limits.max_connections)
    return uvicorn.Config(
        app,
        host=config.listen.host,
        port=config.listen.port,
        loop="uvloop",
        # uvicorn's httptools protocol with a head deadline and size limit and a connection cap.
        http=protocol_factory(ConnectionLimits(
            max_connections=listen.max_connections, header_timeout=listen.header_timeout,
            max_header_bytes=listen.max_header_bytes, body_timeout=listen.body_timeout)),
        ws="none",  # no WebSocket routes: an upgrade request is served as plain HTTP
        lifespan="on",
        log_config=None,
        access_log=False,  # the gateway writes its own JSON access log (logging.access_log)
        server_header=False,
        date_header=False,
        # The peer address is used for trusted-header authentication: never take it from
        # X-Forwarded-For.
        proxy_headers=False,
        timeout_graceful_shutdown=int(config.listen.drain_seconds),
        timeout_keep_alive=listen.keepalive_seconds,  # type: ignore[arg-type]  # a float is fine
    )


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.observability.logs import setup_logging

    flags = {"upstream": args.upstream, "command": args.stdio_command, "host": args.host, "port": args.port,
             "anonymous": args.anonymous, "workers": args.workers}  # fmt: skip
    config = load_config(args.config, flags=flags)
    _check_files(config, args.config)
    ring = load_key_ring(config.state)
    app = _build(config, ring)  # validates everything before any worker starts
    setup_logging(config.logging.level, config.logging.format)
    routes = ", ".join(f"{r.path} -> {r.describe_upstream()}" for r in config.routes)
    listeners = config.listeners()
    others = "".join(f"; {item.role} endpoints on {item.url()}" for item in listeners[1:])
    print(
        f"mcp-edge {__version__} listening on {listeners[0].url()} "
        f"({routes}; {config.listen.workers} worker(s){others})",
        file=sys.stderr,
        flush=True,
    )
    if config.listen.workers == 1:
        hardening.scrub_keys_from_environment()  # (workers read it from here: kept for them)
    if config.listen.workers == 1 and len(listeners) == 1:
        uvicorn.Server(_uvicorn_config(app, config)).run()
        return 0
    # Several listeners (each request's listener is told by the port it arrived on, see
    # gateway.edge.listeners) and/or several workers: the sockets are bound here, once.
    try:
        sockets = [_bind(item, inheritable=config.listen.workers > 1) for item in reversed(listeners)]  # fixed ports first
    except OSError as exc:
        print(f"mcp-edge: {exc}", file=sys.stderr)
        return EXIT_LISTEN
    if config.listen.workers == 1:
        uvicorn.Server(_uvicorn_config(app, config)).run(sockets=sockets)
        return 0
    # Several workers: each process builds its own app from the same inputs, and counts its
    # metrics in files that any worker's /metrics adds up (gateway.observability.multiprocess).
    os.environ[_WORKER_ARGS] = json.dumps({"config": args.config, "flags": flags})
    created = not multiprocess.enabled()
    metrics_dir = multiprocess.prepare()
    uv_config = _uvicorn_config("gateway.cli:worker_app", config)
    uv_config.factory = True
    uv_config.workers = config.listen.workers
    # uvicorn kills a worker that has not answered its supervisor's ping within this many seconds
    # (default 5): a worker still importing the gateway on a loaded machine would be killed and
    # respawned forever, and no worker would ever listen.
    uv_config.timeout_worker_healthcheck = _WORKER_HEALTHCHECK_SECONDS
    from uvicorn.supervisors import Multiprocess

    try:
        Multiprocess(uv_config, sockets=sockets).run()
    finally:
        multiprocess.cleanup(metrics_dir, created=created)
    return 0


def _bind(listener: Any, *, inheritable: bool) -> socket.socket:
    """A listening socket for ``listener``, as uvicorn binds one (inheritable for worker
    processes only: a child the gateway runs must not hold it open)."""
    family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listener.host, listener.port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {listener.host}:{listener.port} ({listener.role}): {exc.strerror}") from None
    sock.set_inheritable(inheritable)
    return sock


_WORKER_ARGS = "MCP_EDGE__WORKER_ARGS"
_WORKER_HEALTHCHECK_SECONDS = 60


def worker_app() -> Any:
    """App factory for worker processes (``--workers N``)."""
    from gateway.observability.logs import setup_logging

    hardening.make_non_dumpable()  # reset by the exec that started this process
    hardening.die_with_parent()  # and stop (with its local servers) if the supervisor is killed
    spec = json.loads(os.environ[_WORKER_ARGS])
    config = load_config(spec["config"], flags=spec["flags"])
    setup_logging(config.logging.level, config.logging.format)
    app = _build(config, load_key_ring(config.state))
    hardening.scrub_keys_from_environment()
    return app


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _demo(args: argparse.Namespace) -> int:
    import uvicorn

    from gateway.demo import build_demo_app
    from gateway.observability.logs import setup_logging

    setup_logging("info", "text")
    upstream_port = _free_port("127.0.0.1")
    key = os.environ.get("MCP_EDGE_STATE_KEYS") or generate_key()
    config = load_config(
        None,
        env={},
        flags={
            "upstream": f"http://127.0.0.1:{upstream_port}/mcp",
            "host": args.host,
            "port": args.port,
            "anonymous": True,
            "state_keys": key.split(","),
        },
    )
    ring = load_key_ring(config.state)
    hardening.scrub_keys_from_environment()
    gateway_server = uvicorn.Server(_uvicorn_config(_build(config, ring), config))
    upstream_server = uvicorn.Server(
        uvicorn.Config(build_demo_app(), host="127.0.0.1", port=upstream_port, log_config=None,
                       access_log=False, lifespan="on")  # fmt: skip
    )
    url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '') else args.host}:{args.port}/mcp"
    print(
        f"""mcp-edge demo
  gateway:  {url}   (anonymous callers; a throw-away state key was generated for this run)
  upstream: http://127.0.0.1:{upstream_port}/mcp   (embedded demo MCP server)

Try a full MRTR round trip (round 1 -> input_required with a sealed requestState -> round 2):
  uv run mcp-edge try {url}

Or by hand, round 1:
  curl -s {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: book_table' \\
    -d '{json.dumps(_demo_call(1, None, None))}'
Press Ctrl-C to stop.""",
        flush=True,
    )

    async def run_both() -> None:
        upstream_task = asyncio.create_task(upstream_server.serve())
        try:
            await gateway_server.serve()
        finally:
            upstream_server.should_exit = True
            await upstream_task

    asyncio.run(run_both())
    return 0


def _demo_call(request_id: int, responses: dict[str, Any] | None, state: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "book_table",
        "arguments": {"date": "2026-12-24"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


if __name__ == "__main__":
    raise SystemExit(main())
