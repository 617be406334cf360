"""Profile the gateway under load with py-spy (a sampling profiler, installed outside the project:
``pip install py-spy`` or ``uv tool install py-spy``; it needs ptrace rights, e.g. root).

    uv run python -m bench --profile            # as part of a run, small calls at 16 clients
    uv run python -m bench.profile summarize FILE   # summarise a collapsed-stack file
    uv run python -m bench.profile hotpath [--variant plain|all] [--calls N] [--top N]

``hotpath`` runs the gateway's request path in one process under cProfile, without sockets or
a server (``bench.hotpath``: the ASGI app called with a small ``tools/call``, its upstream
client answering from memory), and prints the functions by own and by inclusive time: which of
the gateway's functions to look at first. Deterministic call counts, unlike a sampling profile.

Writes an SVG flame graph (``profile-small_call-c16.svg``) and a text summary
(``profile-small_call-c16-summary.txt``): where the samples fall by component and the top
functions by self and inclusive time.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

#: Components, matched in order against a frame's file; the first match wins.
COMPONENTS = [
    ("importlib (failed imports)", r"<frozen importlib"),
    ("httpcore / httpcore2", r"httpcore2?/"),
    ("httpx / httpx2", r"httpx2?/"),
    ("aiohttp (upstream client)", r"aiohttp/"),
    ("anyio", r"anyio/"),
    ("uvicorn (server, httptools protocol)", r"uvicorn/"),
    ("prometheus_client", r"prometheus_client/"),
    ("starlette", r"starlette/"),
    ("gateway: upstream adapters", r"mcp_edge/upstream/"),
    ("gateway: edge (middlewares, responses)", r"mcp_edge/edge/"),
    ("gateway: core rules", r"mcp_edge/core/"),
    ("gateway: other", r"gateway/"),
    ("rfc8785", r"rfc8785/"),
    ("asyncio / uvloop", r"asyncio/|uvloop"),
]


def find_py_spy() -> str | None:
    return os.environ.get("PY_SPY") or shutil.which("py-spy")


def _frame_file(frame: str) -> str:
    m = re.search(r"\(([^()]*):\d+\)$", frame)
    return m.group(1) if m else frame


def _frame_func(frame: str) -> str:
    """``func (path/to/file.py:123)`` -> ``func (file.py)``, so lines of one function merge."""
    m = re.match(r"(.*) \(([^()]*):\d+\)$", frame)
    if not m:
        return frame
    path = m.group(2)
    parts = path.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) > 1 else path
    return f"{m.group(1)} ({short})"


def summarize(collapsed: Path, top: int = 30) -> dict[str, Any]:
    """Component shares by *self* time, and top functions by self and inclusive time."""
    self_fn: collections.Counter[str] = collections.Counter()
    incl_fn: collections.Counter[str] = collections.Counter()
    comp: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        leaf = frames[-1]
        self_fn[_frame_func(leaf)] += n
        for f in {_frame_func(f) for f in frames}:
            incl_fn[f] += n
        # Attribute self time to the innermost frame that belongs to a named component.
        for frame in reversed(frames):
            path = _frame_file(frame)
            name = next((c for c, rx in COMPONENTS if re.search(rx, path)), None)
            if name:
                comp[name] += n
                break
        else:
            comp["other"] += n
    pct = lambda n: round(100.0 * n / total, 1) if total else 0.0  # noqa: E731
    return {
        "samples": total,
        "by_component_self_pct": {k: pct(v) for k, v in comp.most_common()},
        "top_self_pct": [[k, pct(v)] for k, v in self_fn.most_common(top)],
        "top_inclusive_pct": [[k, pct(v)] for k, v in incl_fn.most_common(top)],
    }


def format_summary(s: dict[str, Any]) -> str:
    lines = [f"samples: {s['samples']}", "", "self time by component:"]
    lines += [f"  {v:5.1f}%  {k}" for k, v in s["by_component_self_pct"].items()]
    lines += ["", "top functions, self time:"]
    lines += [f"  {v:5.1f}%  {k}" for k, v in s["top_self_pct"]]
    lines += ["", "top functions, inclusive time:"]
    lines += [f"  {v:5.1f}%  {k}" for k, v in s["top_inclusive_pct"]]
    return "\n".join(lines) + "\n"


def record(
    pid: int, seconds: float, out: Path, *, rate: int = 250, fmt: str = "raw"
) -> subprocess.Popen[bytes]:
    py_spy = find_py_spy()
    if py_spy is None:
        raise RuntimeError(
            "py-spy not found: install it (pip install py-spy) or set PY_SPY=/path/to/py-spy"
        )
    return subprocess.Popen(  # noqa: S603
        [
            py_spy,
            "record",
            "-p",
            str(pid),
            "-d",
            str(max(1, round(seconds))),
            "-r",
            str(rate),
            "-f",
            fmt,
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def profile_gateway(
    gen: Any,
    env: Any,
    out_dir: Path,
    plan: Any,
    log: Any,
    *,
    tmp_dir: Path,
    clients: int = 16,
    workload: str = "small_call",
) -> dict[str, Any]:
    """Load the gateway (``workload`` at ``clients``) while py-spy samples it."""
    pid = env.procs["edge"].pid
    seconds = 2.0 if plan.quick else 15.0
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = Path(tmp_dir) / f"profile-{workload}-c{clients}.txt"  # large: kept out of the results
    svg = out_dir / f"profile-{workload}-c{clients}.svg"
    result: dict[str, Any] = {"workload": workload, "clients": clients, "seconds": seconds}
    try:
        proc = record(pid, seconds, raw)
    except RuntimeError as exc:
        log(f"  {exc}")
        return {"error": str(exc)}
    r = gen.run(
        **env.spec("edge", workload),
        workload=workload,
        concurrency=clients,
        duration=seconds + 1.0,
        warmup=0.3,
        pids=[pid],
    )
    _, err = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0 or not raw.exists():
        msg = err.decode(errors="replace")[-500:]
        log(f"  py-spy failed: {msg}")
        return {"error": msg}
    # A flame graph from the same run's stacks is not possible with py-spy; record a short SVG too.
    svg_proc = record(pid, min(5.0, seconds), svg, fmt="flamegraph")
    gen.run(
        **env.spec("edge", workload),
        workload=workload,
        concurrency=clients,
        duration=min(5.0, seconds) + 1.0,
        warmup=0.3,
        pids=[pid],
    )
    svg_proc.communicate(timeout=120)
    summary = summarize(raw)
    text = out_dir / f"profile-{workload}-c{clients}-summary.txt"
    text.write_text(format_summary(summary))
    result.update(summary)
    result["ops_per_s"] = round(r["ops"] / r["window_s"], 1)
    result["svg_file"] = svg.name if svg.exists() else None
    result["summary_file"] = text.name
    log(
        f"  {summary['samples']} samples; top components: "
        + ", ".join(f"{k} {v}%" for k, v in list(summary["by_component_self_pct"].items())[:4])
    )
    return result


def profile_hotpath(
    variant: str, calls: int, top: int, sort: tuple[str, ...] = ("tottime", "cumulative")
) -> str:
    """cProfile over ``calls`` sequential small calls through the gateway's ASGI app in this
    process (``bench.hotpath``); the text of the top functions for each sort key."""
    import cProfile
    import io
    import pstats

    import uvloop

    from bench import hotpath

    app = hotpath.gateway_app(hotpath.ALL_ON if variant == "all" else hotpath.PLAIN)
    profiler = cProfile.Profile()

    async def profiled() -> float:
        await hotpath.drive(app, 500)  # warm up outside the profile, on the same loop
        profiler.enable()
        try:
            return await hotpath.drive(app, calls)
        finally:
            profiler.disable()

    spent = uvloop.run(profiled())
    out = io.StringIO()
    out.write(
        f"{variant}: {calls} calls, {spent / calls * 1e6:.1f} us CPU per call under the profiler\n"
    )
    for key in sort:
        stats = pstats.Stats(profiler, stream=out)
        stats.strip_dirs().sort_stats(key).print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summarize", help="summarise a py-spy raw (collapsed) file")
    s.add_argument("file", type=Path)
    s.add_argument("--top", type=int, default=30)
    h = sub.add_parser(
        "hotpath", help="cProfile of the gateway's request path in one process (bench.hotpath)"
    )
    h.add_argument("--variant", choices=("plain", "all"), default="plain")
    h.add_argument("--calls", type=int, default=20000)
    h.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    if args.cmd == "hotpath":
        sys.stdout.write(profile_hotpath(args.variant, args.calls, args.top))
        return
    sys.stdout.write(format_summary(summarize(args.file, args.top)))


if __name__ == "__main__":
    main()
