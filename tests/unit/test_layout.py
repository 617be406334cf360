"""The package layers hold: imports only go down, ``mcp_edge.core`` stays sans-I/O, and no two
sibling modules or packages import each other (the contracts in pyproject.toml, checked by
import-linter)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _lint_imports() -> list[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert exe, "lint-imports is not installed (the dev dependency group has import-linter)"
    return [exe, "--no-cache"]


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        _lint_imports(), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )  # fmt: skip -- one call, readable on two lines
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_layer_violation_is_caught(tmp_path: Path) -> None:
    """The check can fail: a core module that imports the edge breaks the layers contract."""
    copy = tmp_path / "tree"
    shutil.copytree(
        ROOT / "mcp_edge", copy / "mcp_edge", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "mcp_edge" / "core" / "upward.py").write_text("import mcp_edge.edge.context\n")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(
        _lint_imports(), cwd=copy, env=env, capture_output=True, text=True, timeout=300
    )  # fmt: skip -- one call, readable on two lines
    assert done.returncode != 0
    assert "mcp_edge.core.upward -> mcp_edge.edge.context" in done.stdout
