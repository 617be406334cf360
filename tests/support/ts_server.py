"""Start the MCP server written with the official TypeScript server SDK (`tests/servers/ts_server.mjs`).

`scripts/install-ts-server.sh` installs `@modelcontextprotocol/server` 2.x with its Node.js
adapter (exactly pinned, with the Node 22 that `scripts/install-conformance.sh` provides) into
`.cache/ts-server/` and writes a launcher that runs the program under Node 22. The server speaks
2026-07-28 over Streamable HTTP at `/mcp` (and, through the SDK, 2025-era requests statelessly);
its surface and options are in the program's header. Each process logs every request it gets,
one JSON object a line, to the file given; tests find their own requests by a marker they sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Running, require
from tests.support.processes import ManagedProcess, free_port, wait_for_port
from tests.support.ts_install import TsInstall, installed_launcher

SERVER = TsInstall(
    "ts-server",
    launcher="ts-mcp-server",
    program=Path("tests") / "servers" / "ts_server.mjs",
    role="program",
    launcher_env="MCP_TS_SERVER",
)
INSTALL_HINT = SERVER.install_hint

REVISION = "2026-07-28"
STARTUP_TIMEOUT = 60.0  # Node loading the SDK: seconds on a loaded machine
SERVER_NAME = "mcp-edge-ts-server"
#: What the server lists by default (no flag): names no other fixture server uses.
TOOLS = ("ts_echo", "ts_progress", "ts_confirm", "ts_grow", "ts_touch")
PROMPTS = ("ts_greeting",)
RESOURCES = ("ts://static/info",)
TEMPLATES = ("ts://items/{id}",)
#: What ``collide=True`` adds: the names of tests/servers/everything.py's own items.
COLLIDING = {
    "tool": "test_simple_text",
    "prompt": "test_simple_prompt",
    "resource": "test://static-text",
}


def ts_server_launcher() -> Path | None:
    """The server's launcher: $MCP_TS_SERVER, else the default install, installing it on first use.

    None when it is not installed and cannot be (no npm, or the install failed).
    """
    return installed_launcher(SERVER)


def require_ts_server() -> Path:
    """The launcher; skips without it (fails under REQUIRE_ALL=1, as in CI)."""
    launcher = ts_server_launcher()
    require(launcher is not None, f"the TypeScript SDK server is not installed: {INSTALL_HINT}")
    assert launcher is not None
    return launcher


@dataclass
class TsServer(Running):
    """A running TypeScript SDK server and its request log."""

    log: Path = Path()
    instance: str = ""

    def requests(self, marker: str | None = None) -> list[dict[str, Any]]:
        """The logged requests (those whose arguments carried ``marker``, when given)."""
        return read_request_log(self.log, marker)


def read_request_log(path: Path, marker: str | None = None) -> list[dict[str, Any]]:
    """The entries of a request log (several replicas may share one file), in order."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    entries = [json.loads(line) for line in lines if line.strip()]
    return [e for e in entries if marker is None or e.get("marker") == marker]


def mcp_headers(method: str, name: str | None = None) -> dict[str, str]:
    """The HTTP headers of a 2026-07-28 request (``Mcp-Name`` for a named target)."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": REVISION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def mcp_request(
    request_id: int | str,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    capabilities: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 2026-07-28 JSON-RPC request: ``params`` with the per-request ``_meta`` envelope."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": REVISION,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
    }
    params = dict(params or {})
    params["_meta"] = {**meta, **params.get("_meta", {})}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _answers(url: str, timeout: float) -> None:
    """Wait until a ``server/discover`` gets a 200 (the SDK is loaded and serving)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.post(
                url,
                headers=mcp_headers("server/discover"),
                json=mcp_request("ready", "server/discover"),
                timeout=5,
            )
            if r.status_code == 200:
                return
            last = f"HTTP {r.status_code}: {r.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer server/discover within {timeout:.0f} s ({last})")


def ts_server_args(
    *, name: str | None = None, collide: bool = False, hostile: str | None = None
) -> list[str]:
    """The program's flags for these options."""
    args: list[str] = []
    if name is not None:
        args += ["--name", name]
    if collide:
        args.append("--collide")
    if hostile is not None:
        args += ["--hostile-names", hostile]
    return args


def launch_ts_server(
    stack: ExitStack,
    tmp: Path,
    *,
    instance: str = "ts",
    name: str | None = None,
    collide: bool = False,
    hostile: str | None = None,
    state_key: str | None = None,
    log: Path | None = None,
    env: dict[str, str] | None = None,
) -> TsServer:
    """Start one server on a free port for the life of ``stack``, without waiting for it (start
    several, then :func:`wait_answering` each: they load the SDK side by side).

    Its output goes to ``tmp/ts-server-<port>.log`` and its request log to ``log`` (default
    ``tmp/ts-server-<instance>-<port>.jsonl``; replicas may share one). ``state_key`` (at least 32
    bytes) is its requestState key: replicas given the same key accept each other's state.
    ``collide`` and ``hostile`` add names (see the program's header). Stopped, with everything it
    spawned, when ``stack`` closes.
    """
    launcher = require_ts_server()
    port = free_port()
    log = log or tmp / f"ts-server-{instance}-{port}.jsonl"
    process_env = {"TS_SERVER_LOG": str(log), "TS_SERVER_INSTANCE": instance, **(env or {})}
    if state_key is not None:
        process_env["TS_SERVER_STATE_KEY"] = state_key
    argv = [str(launcher), "--port", str(port)]
    argv += ts_server_args(name=name, collide=collide, hostile=hostile)
    process = ManagedProcess(
        f"ts-server-{instance}-{port}",
        argv,
        log_path=tmp / f"ts-server-{port}.log",
        env=process_env,
    )
    stack.callback(process.stop, 3.0)
    url = f"http://127.0.0.1:{port}/mcp"
    return TsServer(url=url, port=port, process=process, log=log, instance=instance)


def wait_answering(server: TsServer, timeout: float = STARTUP_TIMEOUT) -> TsServer:
    """``server`` once it listens and answers ``server/discover`` (fails, with its output, if it
    exits or does not answer in time)."""
    wait_for_port(server.port, timeout=timeout, process=server.process)
    try:
        _answers(server.url, timeout)
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}\n{server.process.log_tail()}") from None
    return server


def start_ts_server(stack: ExitStack, tmp: Path, **options: Any) -> TsServer:
    """:func:`launch_ts_server`, then :func:`wait_answering`."""
    return wait_answering(launch_ts_server(stack, tmp, **options))


def names(items: Iterable[dict[str, Any]], key: str = "name") -> list[str]:
    """The ``key`` of each listed item, in order."""
    return [item[key] for item in items]
