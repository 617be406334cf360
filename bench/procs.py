"""Start and stop the benchmark's processes (each in its own process group, never leaked), with
the same process helpers the tests use."""

from __future__ import annotations

import http.client
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.processes import ManagedProcess, free_port, venv_command

__all__ = [
    "ManagedProcess",
    "children",
    "free_port",
    "python_module",
    "start",
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
