"""Prometheus metrics across worker processes (``--workers N``).

Each worker counts in its own process; a scrape lands on one of them. With
``PROMETHEUS_MULTIPROC_DIR`` set before the workers start, prometheus_client keeps every value in
a memory-mapped file in that directory and :func:`render` adds up all workers' files, so
``/metrics`` shows the whole gateway whichever worker answers. Gauges say how their workers'
values combine (``livesum``: only live workers, summed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

ENV = "PROMETHEUS_MULTIPROC_DIR"


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def prepare() -> Path:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at an empty directory for this gateway's workers: the
    operator's (emptied: files of an earlier run would be added in) or a new temporary one."""
    given = os.environ.get(ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
        return path
    path = Path(tempfile.mkdtemp(prefix="mcp-edge-metrics-"))
    os.environ[ENV] = str(path)
    return path


def forked() -> None:
    """In a worker forked from the supervisor, which imported prometheus_client before it set the
    directory: the values made from now on are the directory's files (prometheus_client chooses
    how to keep values once, when it is imported)."""
    values.ValueClass = values.get_value_class()


def cleanup(path: Path, *, created: bool) -> None:
    if created:
        shutil.rmtree(path, ignore_errors=True)


def render(registry: CollectorRegistry) -> bytes:
    """The exposition text: this process's registry, or every worker's values when the gateway
    runs several."""
    if not enabled():
        return generate_latest(registry)
    merged = CollectorRegistry()
    MultiProcessCollector(merged)
    return generate_latest(merged)
