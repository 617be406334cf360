"""A gateway that is not root runs its local (stdio) servers as its own user: nothing they can
read holds the key ring, however the gateway is started, or it refuses to start.

Real parts: a hostile server written with the published SDK (tests/servers/environ_reader.py,
FastMCP from ``mcp==1.30.0``) that reads the environment of every process of its user and every
command line, looking for the key; real gateway processes run as an unprivileged user (nobody
when the tests run as root, tests/support/unprivileged.py), started directly, through ``uv run``,
and with ``--workers 2`` (one worker killed and respawned while the server watches).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mcp_edge import exits
from mcp_edge.core.seal import generate_key
from tests.support import unprivileged
from tests.support.cli import no_traceback
from tests.support.processes import WatchedProcess, write_private
from tests.support.sandbox import stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODERN = "2026-07-28"
LISTENING = re.compile(r"^mcp-edge \S+ listening on (http://127\.0\.0\.1:\d+) \(")
ENDED = re.compile(r"^mcp-edge: ")


def _user_name() -> str:
    return pwd.getpwuid(unprivileged.ids()[0]).pw_name


@pytest.fixture(scope="module")
def user_dir() -> Path:
    return unprivileged.private_dir()


def _config(where: Path, **extra: Any) -> Path:
    routes = [
        {"name": "reader", "upstream": {"command": stdio_server_command("environ_reader.py")}}
    ]
    doc = {"auth": {"mode": "anonymous"}, "routes": routes, **extra}
    return unprivileged.give(
        write_private(where / f"gateway-{time.monotonic_ns()}.yaml", yaml.safe_dump(doc))
    )


def _env(home: Path, key: str | None, **extra: str) -> dict[str, str]:
    """A plain environment (not the test runner's), with the key ring when ``key`` is given."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    return env | ({"MCP_EDGE_STATE_KEYS": key} if key else {}) | extra


@contextmanager
def _gateway(
    argv: list[str], env: dict[str, str], cwd: Path | None = None
) -> Iterator[WatchedProcess]:
    with WatchedProcess(unprivileged.as_user(argv), env=env, cwd=cwd or Path("/")) as proc:
        proc.wait_for_line(
            "stderr", lambda line: bool(LISTENING.match(line) or ENDED.match(line)), timeout=150
        )
        yield proc


def _url(proc: WatchedProcess) -> str | None:
    found = next((m for line in proc.lines["stderr"] if (m := LISTENING.match(line))), None)
    return found[1] + "/mcp" if found else None


def call(url: str, name: str, arguments: dict, timeout: float = 90) -> dict:
    """One tools/call on the reader; its report."""
    r = httpx.post(
        url,
        timeout=timeout,
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": name,
        },
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": name,
                "arguments": arguments,
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        },
    )
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [
            json.loads(x[5:])
            for x in r.text.splitlines()
            if x.startswith("data:") and x[5:].strip()
        ]
        message = next(e for e in reversed(events) if "result" in e or "error" in e)
    else:
        message = r.json()
    assert "result" in message, message
    return json.loads(message["result"]["content"][0]["text"])


def _refusal(proc: WatchedProcess, key: str, *phrases: str) -> str:
    """The gateway stopped at start: exit code 2 and one line naming every phrase, not the key."""
    url = _url(proc)
    if url is not None:  # it serves: show what the reader finds
        found = call(url, "scan", {"marker": key})
        pytest.fail(
            f"it served instead of refusing; the reader found the key in {found['holders']}"
        )
    assert proc.wait(60) == exits.USAGE, proc.output()
    no_traceback(proc.output())
    lines = [line for line in proc.lines["stderr"] if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("mcp-edge: configuration error: "), proc.output()
    for phrase in phrases:
        assert phrase in lines[0], (phrase, lines[0])
    assert key not in lines[0]
    return lines[0]


# ---- files --------------------------------------------------------------------------------


def test_a_key_file_is_refused_when_local_servers_share_the_gateways_user(user_dir: Path):
    """The local server could read it (it can read every file its user can): one line saying so
    and what to do instead; the key is in no line."""
    key = generate_key()
    keyfile = unprivileged.give(write_private(user_dir / "state-keys", key + "\n"))
    config = _config(user_dir, state={"key_files": [str(keyfile)]})
    argv = [*unprivileged.mcp_edge(), "serve", "--config", str(config), "--port", "0"]
    with _gateway(argv, _env(user_dir, None)) as proc:
        _refusal(
            proc,
            key,
            f"state.key_files: the local servers of route reader run as {_user_name()}, "
            "the gateway's own user",
            f"{keyfile} too: give the keys in MCP_EDGE_STATE_KEYS, to the gateway process alone",
        )


# ---- environments -------------------------------------------------------------------------


def test_through_uv_run_it_refuses_and_started_directly_nothing_holds_the_key(user_dir: Path):
    """``uv run`` keeps the variable in its own environment, which the local server can read: the
    gateway names it and refuses. Started as the line says (the command itself), it serves, and
    the reader finds the key nowhere, until a process of its user that holds it appears (a decoy,
    started after the gateway: the reader does find what there is to find)."""
    key = generate_key()
    config = _config(user_dir)
    env = _env(
        user_dir,
        key,
        UV_CACHE_DIR=str(user_dir / "uv-cache"),
        UV_PROJECT_ENVIRONMENT=str(unprivileged.environment()),
        UV_NO_SYNC="1",
    )
    uv_run = [
        unprivileged.uv(),
        "run",
        "--no-sync",
        "mcp-edge",
        "serve",
        "--config",
        str(config),
        "--port",
        "0",
    ]
    with _gateway(uv_run, env, cwd=unprivileged.project_dir()) as proc:
        _refusal(
            proc,
            key,
            f"the key ring is in the environment of process {proc.pid} (uv)",
            "exec .venv/bin/mcp-edge serve",
        )

    direct = [*unprivileged.mcp_edge(), "serve", "--config", str(config), "--port", "0"]
    with _gateway(direct, _env(user_dir, key)) as proc:
        url = _url(proc)
        assert url is not None, proc.output()
        report = call(url, "scan", {"marker": key})
        assert report["uid"] == unprivileged.ids()[0]
        assert report["holders"] == [], report
        assert proc.pid in report["seen"] and proc.pid not in report["readable"], report
        decoy = subprocess.Popen(
            unprivileged.as_user(["sleep", "120"]),
            env=_env(user_dir, None, DECOY=key),
            start_new_session=True,
        )
        try:
            found = call(url, "scan", {"marker": key})
        finally:
            decoy.kill()
            decoy.wait(timeout=10)
    assert found["holders"] == [{"pid": decoy.pid, "comm": "sleep", "place": "environment"}], found


# ---- workers ------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                    found.append(int(entry))
    return found


def _is_reader(pid: int) -> bool:
    with suppress(OSError):
        return b"environ_reader.py" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return False


def _workers(supervisor: int) -> dict[int, int]:
    """worker pid -> its reader's pid, for the workers whose reader runs."""
    out = {}
    for worker in _children(supervisor):
        readers = [c for c in _children(worker) if _is_reader(c)]
        if readers:
            out[worker] = readers[0]
    return out


def _until(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {what} after {timeout} s")


def test_workers_hold_the_key_nowhere_even_while_one_is_respawned(user_dir: Path):
    """``--workers 2``: the reader finds the key in no process (a helper the supervisor started,
    a worker), and keeps finding none while a worker is killed and its replacement starts (it
    sees the replacement come, and cannot read it)."""
    key = generate_key()
    config = _config(user_dir, listen={"workers": 2})
    argv = [*unprivileged.mcp_edge(), "serve", "--config", str(config), "--port", "0"]
    started, stop = user_dir / "watch-started", user_dir / "watch-stop"
    with _gateway(argv, _env(user_dir, key)) as proc:
        url = _url(proc)
        assert url is not None, proc.output()
        _until("two workers with their reader", lambda: len(_workers(proc.pid)) == 2, 120)
        report = call(url, "scan", {"marker": key})
        assert report["holders"] == [], report

        watched: dict = {}
        arguments = {
            "marker": key,
            "started_file": str(started),
            "stop_file": str(stop),
            "timeout": 150,
        }
        watcher = threading.Thread(
            target=lambda: watched.update(call(url, "watch", arguments, timeout=200))
        )
        watcher.start()
        try:
            reader = int(_until("the watch", lambda: started.exists() and started.read_text(), 60))
            workers = _workers(proc.pid)
            (killed,) = [w for w, r in workers.items() if r != reader]
            os.kill(killed, signal.SIGKILL)
            fresh = _until(
                "a respawned worker with its reader",
                lambda: [w for w in _workers(proc.pid) if w not in workers],
                120,
            )
        finally:
            unprivileged.give(write_private(stop, ""))
            watcher.join(timeout=220)
    assert watched, "the watch call did not return"
    assert watched["holders"] == [], watched
    assert fresh[0] in watched["seen"] and fresh[0] not in watched["readable"], (fresh, watched)
    assert watched["stopped"] and watched["passes"] > 10, watched
