"""Start the 2025-era fixture servers (`tests/servers/legacy_server.py`, FastMCP from `mcp` 1.x).

They cannot run in this project's environment, which has `mcp` 2.x: each one runs through
`uv run --isolated --no-project --with mcp==1.30.0`, an environment of its own that uv builds
once and caches (the first start of a machine can take a minute, later ones a second or two).
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import Running, require
from tests.support.processes import (
    REPO_ROOT,
    SERVERS_DIR,
    free_port,
    run_bounded,
    serving,
    write_private,
)

LEGACY_MCP = "mcp==1.30.0"
ACCEPT = "application/json, text/event-stream"
LEGACY_CLIENT = REPO_ROOT / "tests" / "clients" / "legacy_mcp_client.py"
LEGACY_STARTUP_TIMEOUT = 90.0  # a first isolated environment build can take ~60 s


def uv_path() -> str | None:
    return shutil.which("uv")


def require_legacy() -> None:
    """Skip (fail under REQUIRE_ALL=1) when uv, needed to build the 1.x environment, is missing."""
    require(uv_path() is not None, "uv is needed to run the mcp 1.x fixture servers")


def legacy_python_command(script: str | Path, *args: str) -> list[str]:
    """argv running `tests/servers/<script>` (or the file at a path given) with Python in an
    isolated `mcp==1.30.0` env."""
    uv = uv_path()
    if uv is None:
        raise RuntimeError("uv not found on PATH")
    return [
        uv,
        "run",
        "--isolated",
        "--no-project",
        "--with",
        LEGACY_MCP,
        "python",
        str(script if isinstance(script, Path) else SERVERS_DIR / script),
        *args,
    ]


def run_legacy_client(tmp: Path, plan: dict[str, Any], *, timeout: float = 90) -> dict[str, Any]:
    """Run ``plan`` through the mcp 1.x client SDK (`tests/clients/legacy_mcp_client.py`, in the
    isolated 1.x env) and return its one JSON report (see the driver's header)."""
    require_legacy()
    path = write_private(tmp / f"legacy-client-{uuid.uuid4().hex[:8]}.json", json.dumps(plan))
    done = run_bounded(legacy_python_command(LEGACY_CLIENT, str(path)), timeout=timeout)
    lines = [line for line in done.output.splitlines() if line.startswith("{")]
    assert lines, f"the 1.x client gave no report: {done.output[-3000:]}"
    return dict(json.loads(lines[-1]))


def start_legacy(
    stack: ExitStack,
    tmp: Path,
    *args: str,
    script: str = "legacy_server.py",
    host: str = "127.0.0.1",
) -> Running:
    """Start a legacy fixture on a free port for the life of `stack` (its output goes to
    `tmp/<script>-<port>.log`); extra `args` go to the script, e.g. "--event-store"."""
    require_legacy()
    port = free_port(host)
    name = Path(script).stem
    process = stack.enter_context(
        serving(
            f"{name}-{port}",
            legacy_python_command(script, "--host", host, "--port", str(port), *args),
            port=port,
            host=host,
            log_path=tmp / f"{name}-{port}.log",
            startup_timeout=LEGACY_STARTUP_TIMEOUT,
            grace=3.0,
        )
    )
    return Running(url=f"http://{host}:{port}/mcp", port=port, process=process)


class LegacyStats:
    """Reads a fixture's `GET /stats` (what reached that process)."""

    def __init__(self, running: Running, timeout: float = 5.0) -> None:
        self.url = running.url.rsplit("/", 1)[0] + "/stats"
        self.timeout = timeout

    async def get(self) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self.timeout) as http:
            r = await http.get(self.url)
            r.raise_for_status()
            return r.json()

    def get_sync(self) -> dict[str, Any]:
        r = httpx.get(self.url, timeout=self.timeout)
        r.raise_for_status()
        return r.json()


def book_answering_its_question(
    http: httpx.Client,
    url: str,
    headers: dict[str, str],
    *,
    call_id: int,
    date: str,
    size: int,
    post_answer: Callable[[dict[str, Any]], httpx.Response],
) -> dict[str, Any]:
    """The 2025 revision's mid-call question, on one SSE stream: ``book_table`` is called, its
    ``elicitation/create`` is answered (``size`` people) by ``post_answer``, a separate POST that
    must be accepted (202), and the call's final message is read from the same stream and
    returned."""
    call = {
        "jsonrpc": "2.0",
        "id": call_id,
        "method": "tools/call",
        "params": {"name": "book_table", "arguments": {"date": date}},
    }
    with http.stream("POST", url, headers=headers, json=call) as stream:
        lines = stream.iter_lines()
        question = next(
            json.loads(line[5:]) for line in lines if line.startswith("data:") and line[5:].strip()
        )
        assert question["method"] == "elicitation/create", question
        answer = {
            "jsonrpc": "2.0",
            "id": question["id"],
            "result": {"action": "accept", "content": {"size": size}},
        }
        accepted = post_answer(answer)
        assert accepted.status_code == 202, accepted.text
        return next(
            json.loads(line[5:])
            for line in lines
            if line.startswith("data:") and '"result"' in line
        )


def legacy_initialize(client: str, capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2025-era client's ``initialize`` request (id 1), naming the client ``client``."""
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities or {},
            "clientInfo": {"name": client, "version": "1"},
        },
    }


def open_legacy_session(
    http: httpx.Client,
    url: str,
    *,
    client: str,
    capabilities: dict[str, Any] | None = None,
    version: str | None = "2025-11-25",
    initialized: bool = True,
) -> dict[str, str]:
    """A 2025-era client's ``initialize`` through the gateway (200, with a session id), then its
    ``notifications/initialized`` (202) unless ``initialized`` is false; the headers of every
    later request of that session (``MCP-Protocol-Version`` among them unless ``version`` is
    None)."""
    r = http.post(url, headers={"Accept": ACCEPT}, json=legacy_initialize(client, capabilities))
    assert r.status_code == 200, r.text
    headers = {"Accept": ACCEPT, "Mcp-Session-Id": r.headers["mcp-session-id"]}
    if version is not None:
        headers["MCP-Protocol-Version"] = version
    if initialized:
        r = http.post(
            url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert r.status_code == 202, r.text  # 2025-era notifications keep working
    return headers
