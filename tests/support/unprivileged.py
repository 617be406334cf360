"""Run the gateway as a gateway that is not root runs: its local servers then share its user.

When the tests run as root (CI), that user is ``nobody``, and everything it runs must be reachable
by it. This project's Python lives under root's home, so:

- ``mcp_edge()``: the ``mcp-edge`` command in a virtual environment on the system's Python with
  the gateway's locked dependencies (``uv export`` of ``uv.lock``, installed from uv's cache, else
  from the registry) and this checkout on its path (copied when nobody can read it in place), the
  command itself being the one the project installs (``.venv/bin/mcp-edge``);
- ``uv()``: uv itself, and ``project_dir()``, where ``uv run`` finds the project;
- ``as_user(argv)``: ``argv`` through ``setpriv``, which ``exec``\\ s it as nobody (no process is
  left in between).

When the tests run as another user, that user is unprivileged already and everything runs as it is.
Staged files go into ``tests.support.sandbox.staging_dir()``, removed when the session ends.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from tests.conftest import require
from tests.support.processes import REPO_ROOT, venv_command
from tests.support.sandbox import (
    _publish,
    reachable_by_others,
    staging_dir,
    system_python,
    venv_with,
)

USER = "nobody"


def is_root() -> bool:
    return os.geteuid() == 0


def ids() -> tuple[int, int]:
    """The unprivileged user's uid and gid."""
    if not is_root():
        return os.getuid(), os.getgid()
    entry = pwd.getpwnam(USER)
    return entry.pw_uid, entry.pw_gid


def as_user(argv: list[str]) -> list[str]:
    if not is_root():
        return argv
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) runs the gateway as nobody")
    uid, gid = ids()
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def give(path: Path) -> Path:
    """``path`` owned by the unprivileged user (its mode unchanged)."""
    if is_root():
        uid, gid = ids()
        os.chown(path, uid, gid)
    return path


def private_dir() -> Path:
    """A new directory only the unprivileged user (and root) can enter."""
    path = Path(tempfile.mkdtemp(prefix="mcp-edge-user-", dir=staging_dir()))
    os.chmod(path, 0o700)
    return give(path)


@cache
def project_dir() -> Path:
    """This checkout when the user can read it, else a copy of what the gateway and uv need."""
    if all(
        reachable_by_others(REPO_ROOT / name)
        for name in ("pyproject.toml", "uv.lock", "mcp_edge/__init__.py", "mcp_edge/server/cli.py")
    ):
        return REPO_ROOT
    root = staging_dir() / "checkout"
    shutil.copytree(REPO_ROOT / "mcp_edge", root / "mcp_edge", ignore=_pycache)
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy2(REPO_ROOT / name, root / name)
    _publish(root)
    return root


def _pycache(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


@cache
def _environment() -> Path:
    python, uv_bin = system_python(), shutil.which("uv")
    require(
        python is not None and uv_bin is not None,
        "a system Python and uv are needed to run the gateway as nobody",
    )
    assert python is not None and uv_bin is not None
    requirements = staging_dir() / "gateway-requirements.txt"
    exported = subprocess.run(
        [
            uv_bin,
            "export",
            "-q",
            "--frozen",
            "--no-dev",
            "--all-extras",
            "--no-emit-project",
            "--no-hashes",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=120,
        check=True,
    )
    requirements.write_bytes(exported.stdout)
    venv = venv_with(
        uv_bin,
        python,
        staging_dir() / "gateway-venv",
        "-r",
        str(requirements),
        what="the gateway's dependencies",
    )
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "_mcp_edge_checkout.pth").write_text(f"{project_dir()}\n")
    script = Path(venv_command("mcp-edge")[0])
    lines = script.read_text().splitlines(keepends=True)
    command = venv / "bin" / "mcp-edge"
    command.write_text(f"#!{venv / 'bin' / 'python'}\n" + "".join(lines[1:]))
    command.chmod(0o755)
    _publish(venv)
    return venv


def mcp_edge() -> list[str]:
    """argv of the ``mcp-edge`` command the unprivileged user can run."""
    if not is_root():
        return venv_command("mcp-edge")
    return [str(_environment() / "bin" / "mcp-edge")]


def environment() -> Path:
    """The virtual environment ``mcp_edge()`` is in (``uv run``'s project environment)."""
    if not is_root():
        return Path(venv_command("mcp-edge")[0]).parent.parent
    return _environment()


@cache
def uv() -> str:
    """The uv binary (what ``uv run`` names in ``UV``), where the unprivileged user can run it."""
    found = os.environ.get("UV")
    if found is None:
        which = shutil.which("uv")
        require(which is not None, "uv is needed")
        found = subprocess.run(
            [
                str(which),
                "run",
                "--no-project",
                "python",
                "-c",
                "import os; print(os.environ['UV'])",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.strip()
    real = Path(found)
    if not is_root() or reachable_by_others(real):
        return str(real)
    staged = staging_dir() / "uv"
    if not staged.exists():
        shutil.copy2(real, staged)
        staged.chmod(0o755)
    return str(staged)
