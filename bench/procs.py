"""Start and stop the benchmark's processes (each in its own process group, never leaked), with
the same process helpers the tests use."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.processes import ManagedProcess, free_port, venv_command

__all__ = [
    "ManagedProcess",
    "checkout_commit",
    "checkout_gateway",
    "children",
    "free_port",
    "python_module",
    "start",
    "state_keys",
    "venv_command",
    "wait_http",
]


def start(
    name: str, argv: Sequence[str], *, log_dir: Path, env: Mapping[str, str] | None = None
) -> ManagedProcess:
    """Start a benchmark process, its output in ``log_dir/<name>.log``."""
    return ManagedProcess(name, argv, log_path=log_dir / f"{name}.log", env=env)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def state_keys() -> str:
    """A fresh key ring for the gateway's ``MCP_EDGE_STATE_KEYS`` (``mcp-edge keys generate``)."""
    return subprocess.run(
        [*venv_command("mcp-edge"), "keys", "generate"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def checkout_gateway(
    checkout: Path,
    tmp: Path,
    upstream: str,
    port: int,
    *,
    era: str = "modern",
    limits: Mapping[str, object] | None = None,
    members: list[dict[str, object]] | None = None,
) -> list[str]:
    """argv of ``mcp-edge serve`` on ``port`` from another checkout's source (first on
    ``sys.path``, before this one and the installed one) in this environment: one route, ``/mcp``
    to ``upstream`` (``era``: ``modern`` unless said), or to ``members`` (a route with
    ``members:``), callers anonymous, ``limits`` as given; its configuration in
    ``tmp/gateway.yaml``."""
    conf = tmp / "gateway.yaml"
    route: dict[str, object] = {"name": "default", "path": "/mcp"}
    if members is None:
        route.update(upstream=upstream, era=era)
    else:
        route["members"] = members
    config: dict[str, object] = {"auth": {"mode": "anonymous"}, "routes": [route]}
    if limits:
        config["limits"] = dict(limits)
    conf.write_text(json.dumps(config))
    boot = f"import sys; sys.path.insert(0, {str(checkout)!r}); from mcp_edge.server.cli import main; sys.exit(main())"
    return [sys.executable, "-c", boot, "serve", "--config", str(conf), "--port", str(port)]


def checkout_commit(checkout: Path) -> str:
    """The checkout's short commit ("" when it is not a git checkout)."""
    return subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()


def wait_http(
    proc: ManagedProcess,
    port: int,
    path: str = "/",
    *,
    method: str = "GET",
    ok: Sequence[int] = (),
    timeout: float = 30.0,
) -> None:
    """Wait until the process answers HTTP on the port (any status, or one of ``ok``)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not proc.running:
            raise RuntimeError(f"{proc.name} exited early:\n{proc.log_tail()}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request(method, path)
            status = conn.getresponse().status
            conn.close()
            if not ok or status in ok:
                return
            last = f"HTTP {status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise RuntimeError(f"{proc.name} did not come up on port {port} ({last}):\n{proc.log_tail()}")


def children(pid: int) -> list[int]:
    """Direct children of a process (nginx workers of the master)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        if int(data[data.rindex(b")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out
