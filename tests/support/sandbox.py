"""Local (stdio) servers the gateway can run as another user.

A gateway started as root (CI, containers) runs its local servers as ``nobody``: the server's
program, interpreter and files must then be reachable by every user. This project's Python and uv
live under root's home, and the repository may be cloned anywhere, so the tests stage what a
local server needs in a directory of their own under /tmp, readable by all:

- ``public_python()``: a virtual environment on the system's Python with ``mcp==1.30.0`` (from
  uv's cache when it has it), for the SDK fixture servers;
- ``public_file(path)``: a fixture server's script, copied next to it (``stdio_server_command``
  puts the two together);
- ``public_everything()``: the published Node server from ``.cache/stdio-servers``, used in place
  when every user can reach it there, else copied (with Node 22) into the staging directory.

Everything staged is removed when the test session ends.

A gateway that is not root, when the tests run as root: ``unprivileged_gateway()`` gives the argv
that runs this checkout's gateway as ``nobody``: on the system's Python, in a virtual environment
with the gateway's locked dependencies (from uv's cache when it has them), with a copy of the
``gateway`` package (this project's interpreter and checkout may be out of other users' reach).
"""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import stat
import tempfile
from functools import cache
from pathlib import Path

from tests.conftest import require
from tests.support.legacy import LEGACY_MCP
from tests.support.processes import REPO_ROOT, SERVERS_DIR, run_bounded

SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")


def gateway_is_root() -> bool:
    return os.geteuid() == 0


def nobody_uid() -> int:
    return pwd.getpwnam("nobody").pw_uid


def reachable_by_others(path: Path) -> bool:
    """Can any user read ``path`` (and enter every directory above it)?"""
    path = path.resolve()
    if not path.stat().st_mode & stat.S_IROTH:
        return False
    return all(p.stat().st_mode & stat.S_IXOTH for p in path.parents)


def _publish(path: Path) -> None:
    """Readable (and, for directories and programs, enterable) by every user."""
    for root, dirs, files in os.walk(path):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                os.chmod(
                    full,
                    os.stat(full).st_mode | 0o444 | (0o111 if os.stat(full).st_mode & 0o100 else 0),
                )
    os.chmod(path, 0o755)


@cache
def staging_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="mcp-edge-public-"))
    os.chmod(path, 0o755)
    atexit.register(shutil.rmtree, path, True)
    return path


def system_python() -> str | None:
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK) and reachable_by_others(Path(candidate)):
            return candidate
    return None


def venv_with(uv: str, python: str, venv: Path, *requirements: str, what: str) -> Path:
    """A virtual environment at ``venv`` on ``python`` with ``requirements`` (``uv pip install``
    arguments) copied in, from uv's cache when it has them all, else from the registry; every user
    can run it. ``what`` names the requirements in an error."""
    out = run_bounded([uv, "venv", "-q", "--python", python, str(venv)], timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"uv venv failed: {out.output}")
    install = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
    install += ["--link-mode", "copy", *requirements]
    out = run_bounded([*install, "--offline"], timeout=300)
    if out.returncode != 0:  # not all in uv's cache: from the registry
        out = run_bounded(install, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"installing {what} failed: {out.output}")
    _publish(venv)
    return venv


@cache
def public_python() -> str | None:
    """A Python with ``mcp==1.30.0`` that every user can run, or None (no system Python / uv)."""
    python, uv = system_python(), shutil.which("uv")
    if python is None or uv is None:
        return None
    venv = venv_with(uv, python, staging_dir() / "venv", LEGACY_MCP, what=LEGACY_MCP)
    return str(venv / "bin" / "python")


def stdio_server_command(script: str, *args: str) -> list[str]:
    """argv running ``tests/servers/<script>`` (an ``mcp`` 1.x server) as a local server that any
    user can run (skips, or fails under REQUIRE_ALL=1, without a system Python and uv)."""
    python = public_python()
    require(python is not None, "a system Python and uv are needed to run an mcp 1.x stdio server")
    return [str(python), public_file(SERVERS_DIR / script), *args]


def public_file(path: Path) -> str:
    """``path`` itself when every user can read it, else a copy that they can."""
    if reachable_by_others(path):
        return str(path)
    copy = staging_dir() / "files" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copy2(path, copy)
    _publish(copy.parent)
    return str(copy)


@cache
def public_everything(launcher: str) -> tuple[str, str]:
    """The Node everything server for any user: its launcher (scripts/install-stdio-servers.sh)
    and the npm prefix it is installed in (for ``npx --prefix``)."""
    quoted = [part for part in Path(launcher).read_text().split('"') if part.startswith("/")]
    node, entry = Path(quoted[0]), Path(quoted[1])
    modules = entry.parents[
        3
    ]  # <prefix>/node_modules/@modelcontextprotocol/server-everything/dist/index.js
    if all(reachable_by_others(p) for p in (Path(launcher), node, entry)):
        return launcher, str(modules.parent)
    root = staging_dir() / "everything"
    shutil.copytree(modules, root / "node_modules", symlinks=True)
    shutil.copy2(node, root / "node")
    staged = root / "mcp-server-everything"
    staged.write_text(
        f'#!/bin/sh\nexec "{root / "node"}" "{root / entry.relative_to(modules.parent)}" stdio "$@"\n'
    )
    _publish(root)
    return str(staged), str(root)


#: Runs the Python code argv[4] (its argv: argv[4:]) as uid argv[1], gid argv[2] (no other group),
#: with the gateway's package from directory argv[3].
_AS_USER = (
    "import os, sys\n"
    "uid, gid = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.setgroups([]); os.setresgid(gid, gid, gid); os.setresuid(uid, uid, uid)\n"
    "sys.path.insert(0, sys.argv[3])\n"
    "sys.argv = sys.argv[4:]\n"
    "exec(compile(sys.argv[0], '<unprivileged>', 'exec'))\n"
)
_CLI = "import sys\nfrom mcp_edge.server.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def unprivileged_user() -> tuple[int, int]:
    """(uid, gid) of ``nobody``."""
    entry = pwd.getpwnam("nobody")
    return entry.pw_uid, entry.pw_gid


@cache
def public_gateway() -> tuple[str, str] | None:
    """A Python every user can run with the gateway's dependencies (as locked, for that Python's
    version), and a directory holding a copy of the ``mcp_edge`` package: (python, directory).
    None without a system Python and uv."""
    python, uv = system_python(), shutil.which("uv")
    if python is None or uv is None:
        return None
    root = staging_dir() / "gateway"
    root.mkdir()
    export = [
        uv,
        "export",
        "--frozen",
        "--no-dev",
        "--all-extras",
        "--no-emit-project",
        "--no-hashes",
        "-q",
    ]
    out = run_bounded([*export, "-o", str(root / "requirements.txt")], timeout=120, cwd=REPO_ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"uv export failed: {out.output}")
    requirements = ("-r", str(root / "requirements.txt"))
    venv = venv_with(uv, python, root / "venv", *requirements, what="the gateway's dependencies")
    shutil.copytree(
        REPO_ROOT / "mcp_edge",
        root / "src" / "mcp_edge",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    _publish(root)
    return str(venv / "bin" / "python"), str(root / "src")


def unprivileged_python(code: str, *args: str) -> list[str]:
    """argv running the Python ``code`` (with ``args``) as ``nobody``, the gateway importable (the
    tests run as root); skips, or fails under REQUIRE_ALL=1, without a system Python and uv."""
    staged = public_gateway()
    require(staged is not None, "a system Python and uv are needed to run the gateway as nobody")
    assert staged is not None
    python, src = staged
    uid, gid = unprivileged_user()
    return [python, "-I", "-c", _AS_USER, str(uid), str(gid), src, code, *args]


def unprivileged_gateway(*args: str) -> list[str]:
    """argv running ``mcp-edge ARGS`` as ``nobody`` (see :func:`unprivileged_python`)."""
    return unprivileged_python(_CLI, *args)
