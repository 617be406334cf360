"""Start and stop the real processes tests talk to, without ever leaking one.

Each child runs in its own session (so in its own process group): stopping it signals the
whole group, which also reaches grandchildren such as the Python started by a launcher
script. Stopping is SIGTERM, then SIGKILL after a grace period. Anything still running when
the interpreter exits is killed as well.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVERS_DIR = REPO_ROOT / "tests" / "servers"

_live: dict[int, ManagedProcess | WatchedProcess] = {}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def write_private(path: Path, text: str) -> Path:
    """Write a file only its owner can read (a gateway's config or key file: the gateway refuses
    one that other users can read when it holds keys or runs local servers)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT
    return path


def python_script(name: str, *args: str) -> list[str]:
    """argv running a fixture server from tests/servers with this interpreter."""
    return [sys.executable, str(SERVERS_DIR / name), *args]


def venv_command(name: str) -> list[str]:
    """argv for a console script of this project's environment (e.g. `mcp-edge`).

    Uses the script next to the running interpreter, which is what `uv run NAME` would
    start, without letting uv re-sync the environment from inside a test.
    """
    script = Path(sys.executable).with_name(name)
    if script.exists():
        return [str(script)]
    return ["uv", "run", "--no-sync", name]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ManagedProcess:
    """A child process with its output in a log file, stopped by process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.popen.pid  # == its process group id
        _live[self.pid] = self

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, max_chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-max_chars:]

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the group, SIGKILL it after `grace` seconds; returns the exit code."""
        if self.running:
            _signal_group(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        # Kill whatever is left of the group (the leader may be gone, a child not).
        _signal_group(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        _live.pop(self.pid, None)
        return self.popen.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@atexit.register
def _stop_leftovers() -> None:
    for process in list(_live.values()):
        process.stop(grace=1.0)


def wait_for_port(
    port: int,
    *,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
    process: ManagedProcess | None = None,
) -> None:
    """Wait until something accepts TCP connections on host:port.

    Fails early, with the log tail, if `process` exits first.
    """
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and not process.running:
            raise RuntimeError(
                f"{process.name} exited with {process.popen.returncode} before listening on "
                f"{host}:{port}:\n{process.log_tail()}"
            )
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            tail = process.log_tail() if process is not None else ""
            raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f}s\n{tail}")
        time.sleep(0.05)


@contextlib.contextmanager
def serving(
    name: str,
    argv: Sequence[str],
    *,
    port: int,
    log_path: Path,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    startup_timeout: float = 30.0,
    grace: float = 5.0,
) -> Iterator[ManagedProcess]:
    """Run a server for the duration of the block; it is stopped however the block ends."""
    process = ManagedProcess(name, argv, log_path=log_path, env=env)
    try:
        wait_for_port(port, host=host, timeout=startup_timeout, process=process)
        yield process
    finally:
        process.stop(grace=grace)


class WatchedProcess:
    """A child whose stdout and stderr are read line by line as they come (by two threads), so a
    test can act the moment a line appears. Stopped by process group, like ManagedProcess."""

    def __init__(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path = REPO_ROOT
    ) -> None:
        import threading

        self.argv = list(argv)
        self.popen = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self.name = " ".join(self.argv[:3])
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._changed = threading.Condition()
        self._open = 2
        self._threads = [
            threading.Thread(target=self._pump, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.popen.stdout), ("stderr", self.popen.stderr))
        ]
        for thread in self._threads:
            thread.start()
        _live[self.pid] = self

    def _pump(self, name: str, stream: Any) -> None:
        for raw in stream:
            with self._changed:
                self.lines[name].append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._open -= 1
            self._changed.notify_all()

    @property
    def running(self) -> bool:
        return self.popen.poll() is None

    def wait_for_line(self, stream: str, predicate: Callable[[str], bool], timeout: float) -> str:
        """The first line of ``stream`` that satisfies ``predicate``, waiting up to ``timeout``
        seconds; fails (with what was read) if the streams end or time runs out first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                found = next((line for line in self.lines[stream] if predicate(line)), None)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self._open == 0:
                    raise AssertionError(
                        f"no such line on {stream} of {self.name} (exit {self.popen.poll()}):"
                        f"\n{self.output()}"
                    )
                self._changed.wait(min(left, 1.0))

    def signal_group(self, sig: signal.Signals) -> None:
        _signal_group(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """The exit code, once the process has exited and both streams are read to the end."""
        code = self.popen.wait(timeout=timeout)
        for thread in self._threads:
            thread.join(timeout=timeout)
        return code

    def output(self) -> str:
        return "\n".join(["--- stdout", *self.lines["stdout"], "--- stderr", *self.lines["stderr"]])

    def stop(self, grace: float = 5.0) -> int | None:
        if self.running:
            _signal_group(self.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=grace)
        _signal_group(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        _live.pop(self.pid, None)
        return self.popen.returncode

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class Completed:
    argv: list[str]
    returncode: int | None  # None when it was killed for running too long
    output: str
    timed_out: bool


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path = REPO_ROOT,
    grace: float = 3.0,
) -> Completed:
    """Run a command to completion, killing its whole process group if it overruns."""
    popen = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    timed_out = False
    try:
        output, _ = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(popen.pid, signal.SIGTERM)
        try:
            output, _ = popen.communicate(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(popen.pid, signal.SIGKILL)
            output, _ = popen.communicate()  # keeps what was read before the timeout
    return Completed(
        argv=list(argv),
        returncode=None if timed_out else popen.returncode,
        output=output.decode("utf-8", "replace"),
        timed_out=timed_out,
    )
