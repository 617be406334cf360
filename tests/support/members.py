"""Members for federation tests: real servers of every kind the gateway fronts, started for a
test, each described the way a gateway's configuration names it; and gateways in front of them.

A :class:`Member` is one server and its entry under a route's ``members:``. The kinds:

================  ============================================  ===========================
function          server                                        the gateway reaches it by
================  ============================================  ===========================
python_member     ``mcp`` 2.x (``tests/servers/<script>``,      URL, 2026-07-28
                  default the conformance everything server)
ts_member         the TypeScript SDK server                     URL, 2026-07-28
                  (``tests/servers/ts_server.mjs``)
legacy_member     ``mcp`` 1.x (``tests/servers/legacy_server``) URL, 2025-era (the bridge)
stdio_member      the npm ``server-everything`` (or any         ``{command: [...]}`` (the
                  command line)                                 gateway starts it)
================  ============================================  ===========================

Each starter takes ``wait=False`` to return as soon as its process is started: start several,
then :meth:`Member.ready` each, and they load side by side. Everything started is stopped with
what it spawned when the ``ExitStack`` closes; every process writes its output to ``tmp``.

The configuration is built in ONE place, :func:`federation_route` (the shape of
``members:`` routes); :func:`member_route` makes a member a single-upstream route of its own
(what works today, and the comparison for "a federation of one").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx

from tests.conftest import Running, require, start_gateway
from tests.support.everything import everything_launcher
from tests.support.legacy import LEGACY_STARTUP_TIMEOUT, legacy_python_command, require_legacy
from tests.support.processes import (
    ManagedProcess,
    free_port,
    python_script,
    wait_for_port,
)
from tests.support.sandbox import public_everything
from tests.support.ts_server import launch_ts_server, wait_answering

MemberKind = Literal["python", "ts", "legacy", "stdio"]
DEFAULT_SEPARATOR = "__"
STARTUP_TIMEOUT = 60.0  # a Python or Node server loading its SDK on a loaded machine


@dataclass
class Member:
    """One server behind a federated route, and its configuration entry."""

    #: The member's name in the route (``[a-z][a-z0-9-]{0,31}``); also its default prefix.
    name: str
    kind: MemberKind
    #: What the gateway is given: the server's URL, or ``{"command": [...]}`` for a local server.
    upstream: str | dict[str, Any]
    #: More keys of the member's entry (``era``, ``prefix``, ``tools``, ``bridge``...).
    settings: dict[str, Any] = field(default_factory=dict)
    #: Where a test reaches the server itself (None for a local server: the gateway runs it).
    url: str | None = None
    process: ManagedProcess | None = None
    #: The server's own request log (JSON lines, in that server's format), when it keeps one.
    request_log: Path | None = None
    _wait: Callable[[], None] | None = field(default=None, repr=False)

    def config(self) -> dict[str, Any]:
        """The member's entry under ``members:``."""
        return {"name": self.name, "upstream": self.upstream, **self.settings}

    def ready(self) -> Member:
        """This member, once its server answers (at once for a local server)."""
        if self._wait is not None:
            self._wait()
            self._wait = None
        return self


def _launch(
    stack: ExitStack, tmp: Path, label: str, argv: Sequence[str], port: int
) -> ManagedProcess:
    process = ManagedProcess(f"{label}-{port}", argv, log_path=tmp / f"{label}-{port}.log")
    stack.callback(process.stop, 3.0)
    return process


def _port_waiter(process: ManagedProcess, port: int, timeout: float) -> Callable[[], None]:
    return lambda: wait_for_port(port, timeout=timeout, process=process)


def python_member(
    stack: ExitStack,
    tmp: Path,
    name: str = "py",
    *args: str,
    script: str = "everything.py",
    wait: bool = True,
    **settings: Any,
) -> Member:
    """An ``mcp`` 2.x server from ``tests/servers`` (``script``, given ``--port`` and ``args``)."""
    port = free_port()
    process = _launch(
        stack, tmp, Path(script).stem, python_script(script, "--port", str(port), *args), port
    )
    member = Member(
        name=name,
        kind="python",
        upstream=f"http://127.0.0.1:{port}/mcp",
        settings={"era": "modern", **settings},
        url=f"http://127.0.0.1:{port}/mcp",
        process=process,
        _wait=_port_waiter(process, port, STARTUP_TIMEOUT),
    )
    return member.ready() if wait else member


def ts_member(
    stack: ExitStack,
    tmp: Path,
    name: str = "ts",
    *,
    collide: bool = False,
    hostile: str | None = None,
    state_key: str | None = None,
    server_name: str | None = None,
    wait: bool = True,
    **settings: Any,
) -> Member:
    """The TypeScript SDK server (options as :func:`tests.support.ts_server.launch_ts_server`)."""
    server = launch_ts_server(
        stack,
        tmp,
        instance=name,
        name=server_name,
        collide=collide,
        hostile=hostile,
        state_key=state_key,
    )

    def answering() -> None:
        wait_answering(server)

    member = Member(
        name=name,
        kind="ts",
        upstream=server.url,
        settings={"era": "modern", **settings},
        url=server.url,
        process=server.process,
        request_log=server.log,
        _wait=answering,
    )
    return member.ready() if wait else member


def legacy_member(
    stack: ExitStack,
    tmp: Path,
    name: str = "legacy",
    *args: str,
    wait: bool = True,
    **settings: Any,
) -> Member:
    """An ``mcp`` 1.x server (``tests/servers/legacy_server.py`` with ``args``), reached over
    2025-era HTTP through the gateway's bridge; it logs its requests."""
    require_legacy()
    port = free_port()
    log = tmp / f"legacy-{name}-{port}.jsonl"
    argv = legacy_python_command(
        "legacy_server.py", "--port", str(port), "--instance", name, "--log", str(log), *args
    )
    process = _launch(stack, tmp, "legacy_server", argv, port)
    member = Member(
        name=name,
        kind="legacy",
        upstream=f"http://127.0.0.1:{port}/mcp",
        settings={"era": "legacy", **settings},
        url=f"http://127.0.0.1:{port}/mcp",
        process=process,
        request_log=log,
        _wait=_port_waiter(process, port, LEGACY_STARTUP_TIMEOUT),
    )
    return member.ready() if wait else member


def stdio_member(
    name: str = "everything", command: Sequence[str] | None = None, **settings: Any
) -> Member:
    """A local server the gateway starts: ``command``, by default the npm
    ``@modelcontextprotocol/server-everything`` over stdio (installed on first use; runnable by
    the user the gateway runs local servers as)."""
    if command is None:
        launcher = everything_launcher()
        require(
            launcher is not None, "server-everything needs npm (scripts/install-stdio-servers.sh)"
        )
        assert launcher is not None
        command = [public_everything(launcher)[0]]
    return Member(name=name, kind="stdio", upstream={"command": list(command)}, settings=settings)


# ---- configuration ---------------------------------------------------------------------------


def federation_route(
    members: Iterable[Member],
    *,
    name: str = "federation",
    path: str = "/mcp",
    separator: str | None = None,
    **route: Any,
) -> dict[str, Any]:
    """A route with ``members:`` (the one place that knows the shape of that configuration)."""
    entry: dict[str, Any] = {"name": name, "path": path, **route}
    if separator is not None:
        entry["separator"] = separator
    entry["members"] = [member.config() for member in members]
    return entry


def member_route(
    member: Member, *, name: str | None = None, path: str | None = None
) -> dict[str, Any]:
    """The member alone as a single-upstream route (its name and ``/<name>`` by default)."""
    entry = {key: value for key, value in member.config().items() if key not in _MEMBER_ONLY_KEYS}
    entry["name"] = name or member.name
    entry["path"] = path or f"/{member.name}"
    return entry


#: Keys of a member's entry that a single-upstream route does not have.
_MEMBER_ONLY_KEYS = frozenset(
    {"name", "prefix", "list_timeout_ms", "tools", "prompts", "resources"}
)


def gateway_config(routes: Iterable[dict[str, Any]], **sections: Any) -> dict[str, Any]:
    """A whole gateway configuration: these routes, plus any other sections."""
    return {**sections, "routes": list(routes)}


def start_gateway_with(
    stack: ExitStack,
    tmp: Path,
    routes: Iterable[dict[str, Any]],
    *,
    keys: str,
    members: Iterable[Member] = (),
    env: dict[str, str] | None = None,
    ready_timeout: float = 60.0,
    **sections: Any,
) -> Running:
    """A gateway process (``mcp-edge serve`` with a YAML written in ``tmp``) serving ``routes``,
    once ``members`` answer (they go on loading while the gateway starts) and its ``/readyz``
    answers 200."""
    config = gateway_config(routes, **sections)
    gateway = start_gateway(stack, tmp, keys=keys, config=config, env=env)
    for member in members:
        member.ready()
    wait_ready(gateway, ready_timeout)
    return gateway


def start_federation(
    stack: ExitStack,
    tmp: Path,
    members: Sequence[Member],
    *,
    keys: str,
    env: dict[str, str] | None = None,
    **route: Any,
) -> Running:
    """A gateway with one federated route (``route`` as :func:`federation_route`) in front of
    ``members`` (which may still be starting)."""
    route_config = federation_route(members, **route)
    return start_gateway_with(stack, tmp, [route_config], keys=keys, members=members, env=env)


def wait_ready(gateway: Running, timeout: float = 60.0) -> dict[str, Any]:
    """The gateway's ``/readyz`` answer once it is 200 (fails with its log tail otherwise)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.get(gateway.base + "/readyz", timeout=5)
            if r.status_code == 200:
                return r.json()
            last = f"HTTP {r.status_code}: {r.text[:500]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise TimeoutError(
        f"gateway not ready after {timeout:.0f} s ({last})\n{gateway.process.log_tail()}"
    )
