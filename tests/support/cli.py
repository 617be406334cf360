"""Run the real ``mcp-edge`` command and check what a user would see: one line on stderr, an exit
code, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass

from tests.support.processes import REPO_ROOT, _signal_group, venv_command

CLI = venv_command("mcp-edge")


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any MCP_EDGE_* variable, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("MCP_EDGE_")}, **extra}


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> Result:
    """Run ``mcp-edge ARGS`` to completion (its whole process group killed if it overruns)."""
    popen = subprocess.Popen(
        [*CLI, *args],
        env=env if env is not None else clean_env(),
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = popen.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal_group(popen.pid, signal.SIGKILL)
        out, err = popen.communicate()
        raise AssertionError(
            f"mcp-edge {' '.join(args)} ran over {timeout} s:\n{out.decode()}\n{err.decode()}"
        ) from None
    return Result(popen.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def no_traceback(result: Result | str) -> None:
    text = str(result)
    assert "Traceback" not in text and "Logging error" not in text, text


def one_line(result: Result, code: int, *phrases: str) -> str:
    """The single stderr line of a command that ended with ``code``; it names every phrase."""
    no_traceback(result)
    assert result.code == code, result
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mcp-edge: "), result
    for phrase in phrases:
        assert phrase in lines[0], (phrase, result)
    return lines[0]
