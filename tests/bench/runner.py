"""A benchmark run as the smoke tests run one: ``python -m <module> ...`` from the repository,
each stream kept apart (what a benchmark prints on stdout is its result), failing with the tail
of both unless it exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_bench(module: str, *args: str, timeout: float = 200) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"{module} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    return proc
