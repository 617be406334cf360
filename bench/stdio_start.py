"""What a local (stdio) server process costs the gateway: the time from starting it to its
``initialize`` answered (what a caller's first request waits when its process starts lazily,
``isolation: principal``), and the memory each process holds once ready.

    uv run python -m bench.stdio_start [--runs 5] [-- command args...]

Without a command it measures the published Node everything server (``.cache/stdio-servers``,
scripts/install-stdio-servers.sh) and the Python SDK fixture server tests/servers/session_state.py
(``mcp==1.30.0`` in an environment of its own, see tests/support/sandbox.py). Each process is
started through the gateway's own ``StdioInstance`` (exec shim, sandbox, handshake), one at a
time, then ``--together`` of them at once (a burst of new principals). Memory: the proportional
set size (PSS, from ``/proc/<pid>/smaps_rollup``) of the process and everything in its process
group, so shared library pages are split between processes rather than counted in each.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.stdio.process import StdioInstance
from mcp_edge.upstream.stdio.spec import StdioSpec

REPO = Path(__file__).resolve().parent.parent


def _group_pss_kib(pgid: int) -> int:
    """PSS of every process in process group ``pgid`` (the server and what it started)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != pgid:
                continue
            with open(f"/proc/{entry}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except (OSError, ProcessLookupError):
            continue
    return total


async def _start(instance: StdioInstance, timeout: float) -> float:
    began = time.perf_counter()
    instance.start()
    await asyncio.wait_for(instance.ready.wait(), timeout)
    return time.perf_counter() - began


async def measure(command: list[str], runs: int, together: int) -> dict[str, object]:
    spec = StdioSpec(command=tuple(command))
    metrics = Metrics()
    alone: list[float] = []
    pss: list[int] = []
    for i in range(runs):
        instance = StdioInstance("bench", i, spec, metrics)
        try:
            alone.append(await _start(instance, 120))
            await asyncio.sleep(1.0)  # settled: what it holds while idle
            assert instance.process is not None
            pss.append(_group_pss_kib(instance.process.pid))
        finally:
            await instance.stop()
    instances = [StdioInstance("bench", 100 + i, spec, metrics) for i in range(together)]
    try:
        burst = await asyncio.gather(*(_start(i, 240) for i in instances))
    finally:
        await asyncio.gather(*(i.stop() for i in instances))
    return {
        "start_ms_median": round(statistics.median(alone) * 1000),
        "start_ms_max": round(max(alone) * 1000),
        f"start_ms_{together}_at_once_max": round(max(burst) * 1000),
        "pss_mib_median": round(statistics.median(pss) / 1024, 1),
    }


def _defaults() -> dict[str, list[str]]:
    sys.path.insert(0, str(REPO))
    from tests.support.sandbox import public_everything, stdio_server_command

    commands: dict[str, list[str]] = {}
    launcher = REPO / ".cache" / "stdio-servers" / "bin" / "mcp-server-everything"
    if launcher.exists():
        node, _ = public_everything(str(launcher))
        commands["node everything"] = [node]
    commands["python sdk (mcp 1.30)"] = stdio_server_command("session_state.py")
    return commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--together", type=int, default=4)
    parser.add_argument("command", nargs="*")
    args = parser.parse_args()
    commands = {"command": args.command} if args.command else _defaults()
    for name, command in commands.items():
        result = asyncio.run(measure(command, args.runs, args.together))
        print(f"{name}: {result}")


if __name__ == "__main__":
    main()
