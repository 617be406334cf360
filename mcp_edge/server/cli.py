"""The ``mcp-edge`` command line.

Each command imports what it needs when it runs: a usage error, ``--help``, ``keys`` and ``try``
start without loading the gateway.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from mcp_edge import exits
from mcp_edge.cluster.listeners import Listener
from mcp_edge.exits import CommandError
from mcp_edge.version import __version__

if TYPE_CHECKING:
    from mcp_edge.core.seal import KeyRing
    from mcp_edge.server.config import GatewayConfig


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line (exit code ``exits.USAGE``) instead of the usage."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("mcp-edge").strip()
        where = f"{command}: " if command else ""
        raise CommandError(f"{where}{message} (see: {self.prog} --help)", exits.USAGE)


class _HelpFormatter(argparse.HelpFormatter):
    """Descriptions wrapped as usual; the exit codes (the epilog) kept as laid out."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith(_EXIT_CODES):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


_EXIT_CODES = "exit codes:"


def _epilog() -> str:
    import textwrap

    rows = [
        textwrap.fill(meaning, width=78, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7)
        for code, meaning in exits.TABLE
    ]
    return "\n".join([_EXIT_CODES, *rows])


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


_positive_int.__name__ = "positive integer"  # named so in argparse's message


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < float("inf"):
        raise ValueError(text)
    return value


_positive_float.__name__ = "positive number"


def _http_url(text: str) -> str:
    """An absolute http(s) URL (``try``'s argument)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises for a port that is no number or out of range)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL, e.g. http://127.0.0.1:8080/mcp"
        )
    return text


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mcp-edge",
        description="A stateless edge gateway for the Model Context Protocol (2026-07-28).",
        epilog=_epilog(),
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"mcp-edge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(parent: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return parent.add_parser(name, epilog=_epilog(), formatter_class=_HelpFormatter, **kwargs)

    serve = command(sub, "serve", help="run the gateway", description="Run the gateway.")
    serve.add_argument("--config", metavar="FILE", help="YAML config file (env MCP_EDGE_CONFIG)")
    serve.add_argument(
        "--upstream", metavar="URL", help="upstream MCP endpoint, e.g. http://127.0.0.1:3001/mcp"
    )
    serve.add_argument(
        "--command",
        dest="stdio_command",
        metavar="CMD",
        help='a local stdio MCP server to run, e.g. "npx -y @modelcontextprotocol/server-everything" '
        "(split like a shell would, never run by one)",
    )
    serve.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to listen on (default 8080)")
    serve.add_argument(
        "--anonymous",
        action="store_true",
        help="accept unauthenticated callers as one shared principal",
    )
    serve.add_argument("--workers", type=int, help="worker processes (default 1)")

    demo = command(
        sub,
        "demo",
        help="run the gateway in front of an embedded demo upstream",
        description="Start the gateway in front of an embedded demo MCP server (with a generated, "
        "throw-away state key) and print how to try it. Logs in text (MCP_EDGE_LOG_FORMAT=json for "
        "JSON lines, MCP_EDGE_LOG_LEVEL to change the level).",
    )
    demo.add_argument("--host", default="127.0.0.1")
    demo.add_argument("--port", type=int, default=8080)

    keys = command(sub, "keys", help="manage state keys", description="Manage state keys.")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION")
    gen = command(keys_sub, "generate", help="print a new random state key (base64url, 32 bytes)")
    gen.add_argument("--count", type=_positive_int, default=1)

    tools = command(
        sub,
        "tools",
        help="pinned tool definitions (routes with policy.pin_tools)",
        description="Inspect and accept pinned tool definitions kept in the store's Redis.",
    )
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION")
    digests = command(tools_sub, "digests", help="print each tool's pinned and last seen digest")
    accept = command(
        tools_sub,
        "accept",
        help="accept a tool's changed definition (its last seen digest, "
        "or --digest) on every replica",
    )
    for p in (digests, accept):
        p.add_argument(
            "--config", metavar="FILE", help="the gateway's config file (env MCP_EDGE_CONFIG)"
        )
        p.add_argument("--route", required=True, help="route name")
    accept.add_argument("--tool", required=True, help="tool name")
    accept.add_argument("--digest", help="the digest to accept (default: the one last seen)")

    grants = command(
        sub,
        "grants",
        help="users' own grants at upstreams (routes with upstream_auth.oauth)",
        description="List or revoke a principal's grants, kept in the store's Redis. Revoking "
        "deletes them for every replica at once (the next call asks the person again); the admin "
        "listener's DELETE /grants also revokes the tokens at the authorization server.",
    )
    grants_sub = grants.add_subparsers(dest="grants_command", metavar="ACTION")
    listing = command(grants_sub, "list", help="print a principal's grants (never a token)")
    revoking = command(grants_sub, "revoke", help="delete a principal's grants")
    for p in (listing, revoking):
        p.add_argument(
            "--config", metavar="FILE", help="the gateway's config file (env MCP_EDGE_CONFIG)"
        )
        p.add_argument("--issuer", help="the principal's issuer (its tokens' iss)")
        p.add_argument("--subject", help="the principal's subject (its tokens' sub)")
        p.add_argument(
            "--principal", help='or the gateway\'s id for it: ["jwt-sub","<iss>","<sub>"]'
        )
    revoking.add_argument("--member", help="only this member's grant (<route> or <route>/<member>)")

    check = command(
        sub,
        "check-config",
        help="validate a configuration and exit",
        description="Validate a configuration and print what each route is. Nothing is sent anywhere "
        "unless --probe asks each HTTP upstream now.",
    )
    check.add_argument("--config", metavar="FILE")
    check.add_argument(
        "--probe",
        action="store_true",
        help="send each HTTP upstream endpoint a 2026-07-28 server/discover and report its era, and "
        "read each token-exchange authorization server's metadata (does it advertise the grant); "
        f"exit {exits.FAILED} if one is unreachable, no MCP server, or its metadata unusable",
    )

    try_ = command(
        sub,
        "try",
        help="run one MRTR round trip against a gateway",
        description="Call the demo's book_table tool: round 1 gets input_required with a sealed "
        "requestState, round 2 answers it and completes, and a tampered retry is refused.",
    )
    try_.add_argument("url", nargs="?", default="http://127.0.0.1:8080/mcp", type=_http_url)
    try_.add_argument("--token", help="bearer token to send")
    try_.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for each answer (default 10)",
    )
    return parser


def _one_line(text: str) -> str:
    """A message as the command prints it: one line, every URL's credentials redacted."""
    from mcp_edge.core.urls import redact_urls

    return redact_urls(" ".join(str(text).split()))


def _fail(message: str) -> None:
    print(f"mcp-edge: {_one_line(message)}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; a mistake or a dependency out of reach ends it with one line on stderr and
    an exit code from ``mcp_edge.exits``, never a traceback."""
    try:
        return _run(_parser(), argv)
    except CommandError as exc:
        _fail(str(exc))
        return exc.code
    except KeyboardInterrupt:
        _fail("interrupted (Ctrl-C)")
        return exits.INTERRUPTED
    except Exception as exc:  # noqa: BLE001  (the last resort: still one line, not a traceback)
        config = sys.modules.get(
            "mcp_edge.server.config"
        )  # (a ConfigError comes only once it is loaded)
        if config is not None and isinstance(exc, config.ConfigError):
            _fail(f"configuration error: {exc}")
            return exits.USAGE
        _fail(f"internal error: {type(exc).__name__}: {exc}")
        return exits.INTERNAL


def _run(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("a command is required: " + ", ".join(_COMMANDS))
    if args.command == "keys":
        if args.keys_command is None:
            raise CommandError(
                "keys: an action is required: generate (see: mcp-edge keys --help)", exits.USAGE
            )
        from mcp_edge.core.seal import generate_key

        for _ in range(args.count):
            print(generate_key())
        return exits.OK
    if args.command == "try":
        from mcp_edge.server.tryout import run_tryout

        return asyncio.run(run_tryout(args.url, token=args.token, timeout=args.timeout))
    from mcp_edge.server import hardening
    from mcp_edge.server.config import load_config, load_key_ring

    if args.command in ("serve", "demo"):
        # Before any key is read: no other process of this user may read this one's memory (the
        # mcp-edge command did it first thing already: mcp_edge.server.entry).
        hardening.make_non_dumpable()
    if args.command == "serve":
        return _serve(args)
    if args.command == "demo":
        return _demo(args)
    if args.command == "check-config":
        config = load_config(args.config)
        _check_files(config, args.config)
        app = _build(config, load_key_ring(config.state))
        listeners = app.roles.describe(config.listeners())
        lines, failed, unusable = asyncio.run(_describe_routes(app, probe=args.probe))
        for line in listeners + lines:
            print(_one_line(line))
        mismatched = sum(": FAILED: " in line for line in lines)
        if mismatched:
            raise CommandError(
                f"{mismatched} endpoints: list(s) name different servers (see above)", exits.FAILED
            )
        print("configuration OK", flush=True)
        if unusable:
            raise CommandError(
                f"{unusable} authorization server(s) gave no usable metadata (see above)",
                exits.FAILED,
            )
        if failed:
            raise CommandError(
                f"{failed} upstream endpoint(s) did not answer as MCP servers (see above)",
                exits.FAILED,
            )
        return exits.OK
    if args.command == "grants":
        if args.grants_command is None:
            raise CommandError(
                "grants: an action is required: list, revoke (see: mcp-edge grants --help)",
                exits.USAGE,
            )
        from mcp_edge.server.grants import run_grants_command

        config = load_config(args.config)
        return asyncio.run(run_grants_command(config, load_key_ring(config.state), args))
    if args.tools_command is None:  # "tools"
        raise CommandError(
            "tools: an action is required: digests, accept (see: mcp-edge tools --help)",
            exits.USAGE,
        )
    from mcp_edge.server.tools import run_tools_command  # "tools"

    return asyncio.run(run_tools_command(load_config(args.config), args))


_COMMANDS = ("serve", "demo", "keys", "tools", "grants", "check-config", "try")


def _check_files(config: GatewayConfig, path: str | None) -> None:
    """Key and config files readable by other users: refused or warned about (mcp_edge.server.hardening)."""
    from mcp_edge.server import hardening

    for warning in hardening.check_file_modes(config, path or os.environ.get("MCP_EDGE_CONFIG")):
        print(f"mcp-edge: warning: {warning}", file=sys.stderr, flush=True)


def _build(config: GatewayConfig, ring: KeyRing, **kwargs: Any) -> Any:
    from mcp_edge.server.app import GatewayApp

    return GatewayApp(config, ring, **kwargs)


def _who(key: str) -> str:
    """``route R`` for a single-upstream route, ``route R member M`` for a member."""
    route, _, member = key.partition("/")
    return f"route {route} member {member}" if member else f"route {route}"


async def _describe_routes(app: Any, *, probe: bool) -> tuple[list[str], int, int]:
    """One line per route or member (per endpoint with ``probe``), and how many problems were
    found: endpoints that did not answer as MCP servers, and ``endpoints:`` lists whose servers
    differ (members of a federation given as replicas of one server); then how many
    authorization servers (token exchange) gave no usable metadata. Without ``probe`` nothing
    is sent anywhere."""
    from mcp_edge.core.urls import redact

    lines = []
    for name, federation in app.stacks.federations.items():
        members = ", ".join(
            f"{s.member.name} ({s.member.kind}, prefix {app.stacks.federations[name].namespace.prefix(s.member.name)!r})"
            for s in federation.seats
        )
        lines.append(f"route {name}: {len(federation.seats)} members: {members}")
    lines += [
        f"{_who(name)}: stdio server, {sessions.plan_text()}: "
        f"{' '.join(sessions.spec.command)} (not started by check-config)"
        for name, sessions in app.stdio.items()
    ]
    failed = unusable = 0
    try:
        for name, router in app.eras.items():
            head = (
                f"{_who(name)}: era auto"
                if router.setting == "auto"
                else f"{_who(name)}: era {router.setting} (configured)"
            )
            identity = app.stacks.identity
            if probe and identity is not None and name in identity.sources:
                lines.append(
                    f"{head}, not probed (the upstream takes a caller's token only; its "
                    "authorization server is read below)"
                )
                continue
            if not probe:
                lines.append(
                    head
                    + (
                        ", detected when the gateway runs (--probe asks now)"
                        if router.setting == "auto"
                        else ""
                    )
                )
                continue
            router.probe_timeout = min(router.probe_timeout, 2.0)
            outcomes = await router.probe_all()
            for outcome in outcomes:
                failed += outcome.era is None
                named = f", serverInfo.name {outcome.server_name!r}" if outcome.server_name else ""
                lines.append(f"{head}, {outcome.describe()} ({redact(outcome.endpoint)}){named}")
            differ = _different_servers(outcomes)
            if differ:
                failed += 1
                lines.append(
                    f"{_who(name)}: FAILED: its endpoints look like different servers ({differ}); "
                    "endpoints are replicas of ONE server: list different servers as members "
                    "of the route (routes[].members)"
                )
        if probe:
            for name, federation in app.stacks.federations.items():
                lines += await _collisions(name, federation)
        if app.stacks.identity is not None:
            identity_lines, identity_failed = await app.stacks.identity.describe(probe=probe)
            lines += identity_lines
            unusable += identity_failed
    finally:
        await app.aclose()
    return lines, failed, unusable


def _different_servers(outcomes: Sequence[Any]) -> str | None:
    """Why the endpoints that answered are not replicas of one server, or None."""
    eras = sorted({o.era for o in outcomes if o.era is not None})
    if len(eras) > 1:
        return "eras " + " and ".join(eras)
    names = sorted({o.server_name for o in outcomes if o.server_name is not None})
    if len(names) > 1:
        return "serverInfo.name " + " and ".join(repr(n) for n in names)
    return None


async def _collisions(route: str, federation: Any) -> list[str]:
    """Each member's lists asked now (not stdio members: check-config starts no process), and
    what the collision rule leaves out of the merged lists."""
    from mcp_edge.core.federation.lists import LIST_METHODS, merge_list
    from mcp_edge.edge.body import Reservation
    from mcp_edge.edge.context import RequestContext
    from mcp_edge.upstream.federation.health import PROBE_PARAMS, probe_scope

    lines = []
    seats = [s for s in federation.seats if s.member.kind != "stdio"]
    scope = probe_scope("/")
    for method in LIST_METHODS:
        parts = []
        for seat in seats:
            ctx = RequestContext(request_uid="check-config", modern=True)
            held = Reservation(federation.budget, kind="member_part")
            reply = await federation._ask(
                scope, ctx, seat, method, dict(PROBE_PARAMS), uncached=True, reservation=held
            )
            held.release()  # (what is kept of the part is bounded by max_inspect_bytes)
            parts.append((seat.member.name, reply.result))
        merged = merge_list(federation.namespace, method, parts)
        for drop in merged.dropped:
            if drop.reason != "filtered":
                lines.append(
                    f"route {route} member {drop.member}: {drop.kind} {drop.name!r} left out of "
                    f"{method} ({drop.reason})"
                )
        if method == "tools/list":
            for m in merged.missing:
                lines.append(
                    f"route {route} member {m.member}: did not answer tools/list ({m.reason})"
                )
    return lines


def _uvicorn_config(app: Any, config: GatewayConfig) -> Any:
    import uvicorn

    from mcp_edge.edge.connections import ConnectionLimits, protocol_factory, raise_fd_limit

    listen = config.listen
    raise_fd_limit(listen.max_connections + config.limits.max_connections)
    return uvicorn.Config(
        app,
        host=config.listen.host,
        port=config.listen.port,
        loop="uvloop",
        # uvicorn's httptools protocol with a head deadline and size limit and a connection cap.
        http=protocol_factory(
            ConnectionLimits(
                max_connections=listen.max_connections,
                header_timeout=listen.header_timeout,
                max_header_bytes=listen.max_header_bytes,
                body_timeout=listen.body_timeout,
                write_timeout=listen.write_timeout,
            )
        ),
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


def _setup_logging(level: str, fmt: str) -> None:
    """The gateway's log format for every logger: other libraries' (uvicorn's, the SDK's) warnings
    and errors go through the gateway's handler too, their INFO lines nowhere."""
    from mcp_edge.observability.logs import setup_logging

    setup_logging(level, fmt)
    root = logging.getLogger()
    root.handlers[:] = list(logging.getLogger("mcp_edge").handlers)
    root.setLevel(logging.WARNING)


def _draining_server() -> Any:
    """uvicorn's server, but for one step: its graceful shutdown begins with the app's
    draining (``GatewayApp.begin_draining``: every listen stream ends), before the listeners
    close and in-flight requests are waited for. A ``--workers`` process runs one too."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            app = self.config.loaded_app
            while app is not None and not hasattr(app, "begin_draining"):
                app = getattr(app, "app", None)  # (uvicorn's own wrapping middleware, if any)
            if app is not None:
                app.begin_draining()
            await super().shutdown(sockets=sockets)

    return DrainingServer


def _announcing_server(config: Any, on_started: Callable[[], None]) -> Any:
    """A uvicorn server that calls ``on_started`` once it is serving (its sockets accept and the
    app's startup is done)."""

    class AnnouncingServer(_draining_server()):  # type: ignore[misc]
        #: Stopped by SIGINT (uvicorn raises it again once drained, unless it is ignored).
        interrupted = False

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                on_started()

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.interrupted = self.interrupted or sig == signal.SIGINT
            super().handle_exit(sig, frame)

    return AnnouncingServer(config)


def _need(extra: str, what: str) -> None:
    """A command whose part is an extra this installation lacks ends with one line naming it."""
    from mcp_edge import extras

    if not extras.installed(extra):
        raise CommandError(extras.message(extra, what), exits.USAGE)


def _serve(args: argparse.Namespace) -> int:
    _need("serve", "serve: the gateway's own server (uvicorn)")
    from mcp_edge.observability import multiprocess
    from mcp_edge.server import hardening
    from mcp_edge.server.config import load_config, load_key_ring

    flags = {
        "upstream": args.upstream,
        "command": args.stdio_command,
        "host": args.host,
        "port": args.port,
        "anonymous": args.anonymous,
        "workers": args.workers,
    }
    config = load_config(args.config, flags=flags)
    # Read: out of the environment before anything is started (nothing inherits the ring).
    hardening.scrub_keys_from_environment()
    _check_files(config, args.config)
    ring = load_key_ring(config.state)
    hardening.check_key_exposure(config)  # before any local server starts
    app = _build(config, ring)  # validates everything before any worker starts
    _setup_logging(config.logging.level, config.logging.format)
    workers = config.listen.workers
    # Each request's listener is told by the port it arrived on (mcp_edge.cluster.listeners): the
    # sockets are bound here, once, for every worker (fixed ports first: a public port 0 must not
    # take the cluster listener's).
    bound = [(item, _bind(item, inheritable=workers > 1)) for item in reversed(config.listeners())][
        ::-1
    ]
    sockets = [sock for _, sock in bound]
    routes = ", ".join(f"{r.path} -> {r.describe_upstream()}" for r in config.routes)
    actual = [Listener(item.role, item.host, sock.getsockname()[1]) for item, sock in bound]
    others = "".join(f"; {item.role} endpoints on {item.url()}" for item in actual[1:])

    def announce() -> None:
        print(
            _one_line(
                f"mcp-edge {__version__} listening on {actual[0].url()} ({routes}; {workers} worker(s){others})"
            ),
            file=sys.stderr,
            flush=True,
        )

    if workers == 1:
        server = _announcing_server(_uvicorn_config(app, config), announce)
        server.run(sockets=sockets)
        if server.interrupted:
            raise KeyboardInterrupt
        return exits.OK
    # Several workers: each process builds its own app from the same inputs (forked from this
    # one: see _fork_worker), and counts its metrics in files that any worker's /metrics adds up
    # (mcp_edge.observability.multiprocess).
    created = not multiprocess.enabled()
    metrics_dir = multiprocess.prepare()
    uv_config = _uvicorn_config(functools.partial(_forked_worker_app, config, ring), config)
    uv_config.factory = True
    uv_config.workers = workers
    # uvicorn kills a worker that has not answered its supervisor's ping within this many seconds
    # (default 5): a worker still importing the gateway on a loaded machine would be killed and
    # respawned forever, and no worker would ever listen.
    uv_config.timeout_worker_healthcheck = _WORKER_HEALTHCHECK_SECONDS
    try:
        interrupted = _supervise(uv_config, sockets, announce)
    finally:
        multiprocess.cleanup(metrics_dir, created=created)
    if interrupted:
        raise KeyboardInterrupt
    return exits.OK


def _supervise(
    uv_config: Any, sockets: list[socket.socket], on_started: Callable[[], None]
) -> bool:
    """Run the workers until a signal stops them; True when it was SIGINT (Ctrl-C)."""
    from uvicorn.supervisors import Multiprocess
    from uvicorn.supervisors import multiprocess as multiprocess_module

    class Supervisor(Multiprocess):
        interrupted = False

        def init_processes(self) -> None:
            # Workers ignore Ctrl-C (the terminal sends it to the whole process group): this
            # process stops them with SIGTERM, each after a graceful drain.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                super().init_processes()
            finally:
                signal.signal(signal.SIGINT, previous)
            deadline = time.monotonic() + 120
            while not self.signal_queue and time.monotonic() < deadline:
                if any(not p.process.is_alive() for p in self.processes):
                    return  # one failed to start: nothing to announce
                if all(p.is_ready(timeout=1) for p in self.processes):
                    on_started()
                    return
                time.sleep(0.05)

        def handle_int(self) -> None:
            self.interrupted = True
            super().handle_int()

    supervisor = Supervisor(uv_config, sockets=sockets)
    spawning, serving = multiprocess_module.get_subprocess, multiprocess_module.Server
    multiprocess_module.get_subprocess = _fork_worker
    # Each worker's server (a worker is forked with this module as it is here).
    multiprocess_module.Server = _draining_server()  # type: ignore[misc]
    try:
        supervisor.run()
    finally:
        multiprocess_module.get_subprocess = spawning
        multiprocess_module.Server = serving  # type: ignore[misc]
    return supervisor.interrupted


def _fork_worker(config: Any, target: Callable[..., None], sockets: list[socket.socket]) -> Any:
    """A worker process for uvicorn's supervisor, forked rather than spawned. A spawned worker
    is a fresh ``exec``: dumpable (its environment and memory open to every process of its user,
    local servers included) until it has imported the gateway, and started with the supervisor's
    environment. A forked one keeps the supervisor's non-dumpable flag from its first instruction
    and has the key ring only in the memory it is forked with (``_forked_worker_app``). The
    supervisor has no other thread to fork with (it runs no event loop)."""
    import multiprocessing

    return multiprocessing.get_context("fork").Process(
        target=_worker_main, kwargs={"config": config, "target": target, "sockets": sockets}
    )


def _worker_main(config: Any, target: Callable[..., None], sockets: list[socket.socket]) -> None:
    """A forked worker's life: as uvicorn's spawned one's (``uvicorn._subprocess``), with the
    supervisor's signal handlers put back to the defaults a fresh process has, and the exit
    handlers run (multiprocessing ends a forked child with ``os._exit``, which would skip the
    one that kills what is left of its local servers)."""
    import atexit

    from uvicorn.supervisors.multiprocess import SIGNALS

    for sig in SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(
                sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            )
    try:
        config.configure_logging()
        target(sockets=sockets)
    except KeyboardInterrupt:
        pass
    finally:
        atexit._run_exitfuncs()


def _bind(listener: Listener, *, inheritable: bool) -> socket.socket:
    """A socket bound for ``listener``, as uvicorn binds one (inheritable for worker processes
    only: a child the gateway runs must not hold it open); ``exits.LISTEN`` if it cannot be."""
    sock = socket.socket(
        socket.AF_INET6 if ":" in listener.host else socket.AF_INET, socket.SOCK_STREAM
    )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((listener.host, listener.port))
    except (OSError, UnicodeError, ValueError) as exc:
        sock.close()
        reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        raise CommandError(
            f"cannot listen on {listener.url().removeprefix('http://')} ({listener.role}): {reason}",
            exits.LISTEN,
        ) from None
    sock.set_inheritable(inheritable)
    return sock


_WORKER_ARGS = "MCP_EDGE__WORKER_ARGS"
_WORKER_HEALTHCHECK_SECONDS = 60


def _forked_worker_app(config: GatewayConfig, ring: KeyRing) -> Any:
    """App factory of a ``--workers`` process, forked from the supervisor (``_fork_worker``) with
    its config and key ring."""
    from mcp_edge.observability import multiprocess
    from mcp_edge.server import hardening

    hardening.make_non_dumpable()  # (kept from the supervisor across fork; set again all the same)
    hardening.die_with_parent()  # and stop (with its local servers) if the supervisor is killed
    multiprocess.forked()
    _setup_logging(config.logging.level, config.logging.format)
    return _build(config, ring)


def worker_app() -> Any:
    """App factory for another ASGI server (``mcp_edge.server.cli:worker_app``, the benchmarks'):
    the config named by ``MCP_EDGE__WORKER_ARGS`` (``{"config": FILE, "flags": {...}}``), the keys
    in ``MCP_EDGE_STATE_KEYS``. ``mcp-edge serve --workers N`` does not use it."""
    from mcp_edge.server import hardening
    from mcp_edge.server.config import load_config, load_key_ring

    hardening.make_non_dumpable()  # reset by the exec that started this process
    hardening.die_with_parent()  # and stop (with its local servers) if the supervisor is killed
    spec = json.loads(os.environ[_WORKER_ARGS])
    config = load_config(spec["config"], flags=spec["flags"])
    hardening.scrub_keys_from_environment()
    _setup_logging(config.logging.level, config.logging.format)
    return _build(config, load_key_ring(config.state))


_DEMO_LOG_VARIABLES = ("MCP_EDGE_LOG_LEVEL", "MCP_EDGE_LOG_FORMAT")


def _demo_server() -> Callable[[], Any]:
    """The embedded demo server's builder; it needs the MCP SDK and a server, an extra of the
    package."""
    from mcp_edge import extras

    if not (extras.installed("demo") and extras.installed("serve")):
        raise CommandError(
            extras.message("demo", "demo: the embedded demo server (the MCP SDK, and uvicorn)"),
            exits.USAGE,
        )
    from mcp_edge.server.demo import build_demo_app

    return build_demo_app


def _demo(args: argparse.Namespace) -> int:
    build_demo_app = _demo_server()
    import uvicorn

    from mcp_edge.core.seal import generate_key
    from mcp_edge.server import hardening
    from mcp_edge.server.config import load_config, load_key_ring
    from mcp_edge.server.tryout import demo_call

    key = os.environ.get("MCP_EDGE_STATE_KEYS") or generate_key()
    env = {"MCP_EDGE_LOG_FORMAT": "text"} | {
        k: os.environ[k] for k in _DEMO_LOG_VARIABLES if os.environ.get(k)
    }
    upstream_socket = _bind(Listener("demo upstream", "127.0.0.1", 0), inheritable=False)
    upstream_port = upstream_socket.getsockname()[1]
    config = load_config(
        None,
        env=env,
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
    # Before the demo server is built: the SDK then leaves logging alone, and the embedded
    # server's INFO lines (uvicorn's, the SDK's per request) are not shown.
    _setup_logging(config.logging.level, config.logging.format)
    gateway_socket = _bind(config.listeners()[0], inheritable=False)
    shown = "127.0.0.1" if config.listen.host in ("0.0.0.0", "::", "") else config.listen.host
    url = Listener("public", shown, gateway_socket.getsockname()[1]).url() + "/mcp"
    banner = f"""mcp-edge demo listening
  gateway:  {url}   (anonymous callers; a throw-away state key was generated for this run)
  upstream: http://127.0.0.1:{upstream_port}/mcp   (embedded demo MCP server)

Try a full MRTR round trip (round 1 -> input_required with a sealed requestState -> round 2):
  uv run mcp-edge try {url}

Or by hand, round 1:
  curl -s {url} -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\
    -H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/call' -H 'Mcp-Name: book_table' \\
    -d '{json.dumps(demo_call(1, None, None))}'
Press Ctrl-C to stop."""

    gateway_server = _announcing_server(
        _uvicorn_config(_build(config, ring), config), lambda: print(banner, flush=True)
    )

    async def run_both() -> None:
        upstream_started = asyncio.Event()
        upstream_server = _announcing_server(
            uvicorn.Config(build_demo_app(), log_config=None, access_log=False, lifespan="on"),
            upstream_started.set,
        )
        upstream_task = asyncio.create_task(upstream_server.serve(sockets=[upstream_socket]))
        started = asyncio.create_task(upstream_started.wait())
        try:
            await asyncio.wait({upstream_task, started}, return_when=asyncio.FIRST_COMPLETED)
            if upstream_task.done():
                raise CommandError("the embedded demo server did not start", exits.INTERNAL)
            await gateway_server.serve(sockets=[gateway_socket])
        finally:
            started.cancel()
            upstream_server.should_exit = True
            await upstream_task

    asyncio.run(run_both())
    if gateway_server.interrupted:
        raise KeyboardInterrupt
    return exits.OK


if __name__ == "__main__":
    raise SystemExit(main())
