"""Start and stop the benchmark's processes (each in its own process group, never leaked)."""

from __future__ import annotations

import atexit
import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
_live: dict[int, Proc] = {}


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def console_script(name: str) -> list[str]:
    """argv for a console script of the running environment (what ``uv run NAME`` starts)."""
    script = Path(sys.executable).with_name(name)
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from gateway.cli import main; sys.exit(main())"]


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


class Proc:
    def __init__(self, name: str, argv: Sequence[str], *, log_dir: Path,
                 env: Mapping[str, str] | None = None, cwd: Path = REPO_ROOT) -> None:  # fmt: skip
        self.name = name
        self.argv = list(argv)
        self.log_path = log_dir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(  # noqa: S603 - argv built by the harness
                self.argv,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.popen.pid
        _live[self.pid] = self

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, grace: float = 5.0) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        _live.pop(self.pid, None)


@atexit.register
def stop_all() -> None:
    for proc in list(_live.values()):
        proc.stop(grace=2.0)


def wait_http(proc: Proc, port: int, path: str = "/", *, method: str = "GET", ok: Sequence[int] = (),
              timeout: float = 30.0) -> None:  # fmt: skip
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
