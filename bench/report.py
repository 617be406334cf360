"""What the benchmarks' reports share: a log stamped with the seconds since the start, the tree a
run measured (commit, subject, uncommitted changes), the spread of figures taken round by round,
and the JSON and Markdown pair each benchmark writes (with the lines their Markdown shares)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def elapsed_log(started: float) -> Callable[[str], None]:
    """A log to stderr, each line stamped with the seconds since ``started`` (``time.monotonic``)."""

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    return log


def git(tree: Path, *args: str) -> str:
    """``git -C TREE ARGS``'s output, stripped (empty when git fails)."""
    done = subprocess.run(
        ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False, timeout=30
    )
    return done.stdout.strip()


def commit_of(ref: str, tree: Path = REPO) -> str:
    """The full commit ``ref`` names in ``tree`` (raises ``CalledProcessError`` when it names
    none)."""
    return subprocess.run(
        ["git", "-C", str(tree), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()


def tree_info(tree: Path = REPO) -> dict[str, Any]:
    """The commit a run measured, its subject, and whether tracked files were changed."""
    return {
        "commit": git(tree, "rev-parse", "HEAD"),
        "subject": git(tree, "log", "-1", "--format=%s")[:100],
        "dirty": bool(git(tree, "status", "--porcelain", "--untracked-files=no")),
    }


def tree_line(tree: dict[str, Any]) -> str:
    """The Markdown line naming the tree a run measured (``tree_info``)."""
    return (
        f"This tree: `{tree['commit'][:10]}` {tree['subject']}"
        + (" (with uncommitted changes)" if tree["dirty"] else "")
        + ".  "
    )


def spread(values: Iterable[float | None], digits: int = 3) -> dict[str, float] | None:
    """Min, median and max of the figures there are (None where there are none)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    return {
        "min": round(min(vals), digits),
        "median": round(statistics.median(vals), digits),
        "max": round(max(vals), digits),
    }


def spread_text(cell: dict[str, float], digits: int = 2) -> str:
    """A ``spread`` as min–median–max."""
    return "–".join(f"{cell[k]:.{digits}f}" for k in ("min", "median", "max"))


def write_report(out_dir: Path, stem: str, report: dict[str, Any], md: str) -> None:
    """``out_dir/<stem>.json`` and ``<stem>.md``; the Markdown is printed too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(report, indent=1) + "\n")
    (out_dir / f"{stem}.md").write_text(md)
    print(md)
