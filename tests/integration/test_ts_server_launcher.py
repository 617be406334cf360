"""The TypeScript server's launcher holds no absolute path: it finds Node and the SDK relative to
itself, and runs the server program of the checkout it is reached through, so every checkout
linking one shared install runs its own program, and the install survives being moved."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from tests.conftest import require
from tests.support.processes import REPO_ROOT, run_bounded
from tests.support.ts_server import INSTALL_DIR, INSTALL_HINT, ts_server_launcher

PROGRAM = Path("tests") / "servers" / "ts_server.mjs"


def version(launcher: Path, cwd: Path) -> dict[str, str]:
    done = run_bounded([str(launcher), "--version"], timeout=60, cwd=cwd)
    assert done.returncode == 0, done.output
    return json.loads(done.output)


def test_each_checkout_runs_its_own_program_and_the_install_can_move(tmp_path: Path):
    require(ts_server_launcher() is not None, INSTALL_HINT)
    require(shutil.which("npm") is not None, "npm not found")
    conformance = Path(os.environ.get("CONFORMANCE_DIR") or REPO_ROOT / ".cache" / "conformance")
    # A shared .cache with the machine's Node and SDK in it (linked, so nothing is fetched).
    shared = tmp_path / "shared"
    (shared / "conformance").mkdir(parents=True)
    (shared / "ts-server").mkdir()
    for name in ("node22", "harness"):
        (shared / "conformance" / name).symlink_to((conformance / name).resolve())
    (shared / "ts-server" / "sdk").symlink_to((INSTALL_DIR / "sdk").resolve())
    # Two checkouts linking it, each with its own copy of the program; the first installs.
    checkouts = [tmp_path / "first", tmp_path / "second"]
    for repo in checkouts:
        (repo / PROGRAM).parent.mkdir(parents=True)
        shutil.copy(REPO_ROOT / PROGRAM, repo / PROGRAM)
        (repo / ".cache").symlink_to(shared)
    shutil.copytree(REPO_ROOT / "scripts", checkouts[0] / "scripts")
    env = {"TS_SERVER_DIR": "", "CONFORMANCE_DIR": "", "MCP_TS_SERVER_PROGRAM": ""}
    done = run_bounded(
        ["bash", str(checkouts[0] / "scripts" / "install-ts-server.sh")],
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.output
    launcher = Path(".cache") / "ts-server" / "bin" / "ts-mcp-server"
    text = (shared / "ts-server" / "bin" / "ts-mcp-server").read_text()
    # No absolute path baked in (the linked Node and SDK may be reached through this checkout's
    # own .cache: that is where the files physically are).
    assert '"/' not in text and str(tmp_path) not in text, text

    for repo in checkouts:
        seen = version(repo / launcher, cwd=tmp_path)
        assert Path(seen["program"]) == (repo / PROGRAM).resolve(), seen
        assert seen["sdk"].startswith("2."), seen

    moved = shared.rename(tmp_path / "moved")
    for repo in checkouts:
        (repo / ".cache").unlink()
        (repo / ".cache").symlink_to(moved)
    seen = version(checkouts[1] / launcher, cwd=tmp_path)
    assert Path(seen["program"]) == (checkouts[1] / PROGRAM).resolve(), seen
