"""The installs of the official MCP TypeScript SDK programs the tests run: the client driver
(`tests/clients/ts_mcp_client.mjs`) and the server program (`tests/servers/ts_server.mjs`); the
test authorization server (`tests/servers/authserver/`, oidc-provider) installs the same way.

`scripts/install-<name>.sh` installs the SDK (exactly pinned, with the Node 22 that
`scripts/install-conformance.sh` provides) into `.cache/<name>/` and writes a launcher that runs
the program of the checkout it is reached through under Node 22. What finds (or first installs)
a launcher, and what checks that an install can be shared by checkouts and moved, is the same
for both.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from pathlib import Path

from tests.conftest import require
from tests.support.processes import REPO_ROOT, run_bounded


class TsInstall:
    """One TypeScript SDK program's install: where it goes, its launcher, how to point at them."""

    def __init__(
        self,
        name: str,
        *,
        launcher: str,
        program: Path,
        role: str,
        launcher_env: str,
        version_mark: str = '"sdk":"2.',
    ) -> None:
        #: ``ts-client`` or ``ts-server``: the install's directory in ``.cache`` and its script.
        self.name = name
        #: The program, relative to a checkout.
        self.program = program
        #: What the launcher's ``--version`` calls the program it runs.
        self.role = role
        #: The environment variable naming another launcher.
        self.launcher_env = launcher_env
        #: What the launcher's ``--version`` prints when the installed packages are the right ones.
        self.version_mark = version_mark
        #: The environment variables naming another install root and another program.
        self.dir_env = name.upper().replace("-", "_") + "_DIR"
        self.program_env = f"{launcher_env}_{role.upper()}"
        self.install_dir = Path(os.environ.get(self.dir_env) or REPO_ROOT / ".cache" / name)
        self.launcher = Path("bin") / launcher
        self.default_launcher = self.install_dir / self.launcher
        self.install_script = REPO_ROOT / "scripts" / f"install-{name}.sh"
        self.install_hint = (
            f"run scripts/install-{name}.sh (needs npm), or point {launcher_env} at a launcher"
        )

    def works(self, launcher: Path) -> bool:
        """An executable launcher whose Node, SDK and program are all still there."""
        if not (launcher.is_file() and os.access(launcher, os.X_OK)):
            return False
        done = run_bounded([str(launcher), "--version"], timeout=60)
        return done.returncode == 0 and self.version_mark in done.output


@functools.cache
def installed_launcher(install: TsInstall) -> Path | None:
    """The launcher: ``$<launcher_env>``, else the default install, installing it on first use.

    None when it is not installed and cannot be (no npm, or the install failed).
    """
    configured = os.environ.get(install.launcher_env)
    if configured:
        return Path(configured) if install.works(Path(configured)) else None
    if install.works(install.default_launcher):
        return install.default_launcher
    if shutil.which("npm") is None:
        return None
    # First run on this machine (or a stale install): Node 22 and the SDK into .cache/.
    done = run_bounded(["bash", str(install.install_script)], timeout=900)
    if done.returncode != 0:
        print(
            f"scripts/install-{install.name}.sh failed (rc={done.returncode}):\n"
            f"{done.output[-3000:]}"
        )
        return None
    return install.default_launcher if install.works(install.default_launcher) else None


def assert_launcher_relocates(install: TsInstall, tmp_path: Path) -> None:
    """The launcher holds no absolute path: it finds Node and the SDK relative to itself and runs
    the program of the checkout it is reached through, so every checkout linking one shared
    install runs its own program, and the install survives being moved."""
    require(installed_launcher(install) is not None, install.install_hint)
    require(shutil.which("npm") is not None, "npm not found")
    conformance = Path(os.environ.get("CONFORMANCE_DIR") or REPO_ROOT / ".cache" / "conformance")
    # A shared .cache with the machine's Node and SDK in it (linked, so nothing is fetched).
    shared = tmp_path / "shared"
    (shared / "conformance").mkdir(parents=True)
    (shared / install.name).mkdir()
    for name in ("node22", "harness"):
        (shared / "conformance" / name).symlink_to((conformance / name).resolve())
    (shared / install.name / "sdk").symlink_to((install.install_dir / "sdk").resolve())
    # Two checkouts linking it, each with its own copy of the program; the first installs.
    checkouts = [tmp_path / "first", tmp_path / "second"]
    for repo in checkouts:
        (repo / install.program).parent.mkdir(parents=True)
        shutil.copy(REPO_ROOT / install.program, repo / install.program)
        (repo / ".cache").symlink_to(shared)
    shutil.copytree(REPO_ROOT / "scripts", checkouts[0] / "scripts")
    env = {install.dir_env: "", "CONFORMANCE_DIR": "", install.program_env: ""}
    done = run_bounded(
        ["bash", str(checkouts[0] / "scripts" / install.install_script.name)],
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.output
    text = (shared / install.name / install.launcher).read_text()
    # No absolute path baked in. (The shared cache's Node and SDK are links into this checkout's own
    # .cache, so the relative paths may pass through it: that is where the files physically are.)
    assert '"/' not in text and str(tmp_path) not in text, text

    for repo in checkouts:
        _assert_runs_program_of(install, repo, cwd=tmp_path)

    moved = shared.rename(tmp_path / "moved")
    for repo in checkouts:
        (repo / ".cache").unlink()
        (repo / ".cache").symlink_to(moved)
    _assert_runs_program_of(install, checkouts[1], cwd=tmp_path)


def _assert_runs_program_of(install: TsInstall, repo: Path, *, cwd: Path) -> None:
    """The launcher reached through ``repo`` runs ``repo``'s own program with a 2.x SDK."""
    launcher = repo / ".cache" / install.name / install.launcher
    done = run_bounded([str(launcher), "--version"], timeout=60, cwd=cwd)
    assert done.returncode == 0, done.output
    seen = json.loads(done.output)
    assert Path(seen[install.role]) == (repo / install.program).resolve(), seen
    assert seen["sdk"].startswith("2."), seen
