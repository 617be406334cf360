"""What the edge costs in the app's own process, against the sidecar: small calls
(``tools/call`` of ``small``) to the benchmark's SDK server (``bench.upstream``, JSON answers),
at 1 and 16 clients, in one interleaved run, three ways:

``bare``        the SDK app alone on uvicorn (uvloop + httptools, no access log)
``in-process``  the same app wrapped by ``mcp_edge.Edge`` on the same uvicorn settings, one process
``sidecar``     ``mcp-edge serve`` (a plain route, ``era: modern``) in front of the ``bare`` process

CPU per call is that of every process that serves the call (from ``/proc``, at the edges of each
measured window): the app's process for ``bare`` and ``in-process``; the gateway's and the app's
for ``sidecar`` (the gateway's share is reported too). The edge's own cost is the difference to
``bare``, and each way's ratio to ``bare``; the rounds are interleaved (each round runs the three
back to back, in a rotating order), and each ratio is also computed round by round (its spread is
the noise).

    uv run python -m bench.inprocess [--quick] [--clients 1,16] [--duration 3] [--repeats 3]
    uv run python -m bench.inprocess serve --port N      # the in-process server alone

Writes ``bench/results/inprocess.json`` and ``inprocess.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import run as b
from bench.procs import (
    ManagedProcess,
    free_port,
    python_module,
    start,
    state_keys,
    venv_command,
    wait_http,
)
from bench.report import elapsed_log, spread, spread_text, tree_line, write_report

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORKLOAD = "small_call"
WAYS = ("bare", "in-process", "sidecar")

SIDECAR_CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - {{name: default, path: /mcp, upstream: "http://127.0.0.1:{upstream_port}/mcp", era: modern}}
"""


def serve(port: int) -> None:
    """The benchmark's SDK app wrapped by ``mcp_edge.Edge``, on ``bench.upstream``'s uvicorn
    settings (the key ring from ``MCP_EDGE_STATE_KEYS``, callers anonymous)."""
    import logging

    import uvicorn

    from bench.upstream import build_app
    from mcp_edge import Edge

    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(
        Edge(build_app(json_response=True), anonymous=True),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        server_header=False,
        date_header=False,
        backlog=4096,
    )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        parsed = argparse.ArgumentParser(prog="python -m bench.inprocess serve")
        parsed.add_argument("--port", type=int, required=True)
        serve(parsed.parse_args(argv[1:]).port)
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.inprocess", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    log = elapsed_log(started)
    plan = b.interleaved_plan(
        WORKLOAD, args.clients, quick=args.quick, duration=args.duration, repeats=args.repeats
    )
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-edge-inprocess-")))
        procs: dict[str, ManagedProcess] = {}
        ports = {way: free_port() for way in WAYS}
        gen = b.LoadGen(tmp)
        try:
            key = state_keys()
            edge_env = {"MCP_EDGE_STATE_KEYS": key}
            procs["bare"] = start(
                "bare",
                python_module("bench.upstream", "--port", str(ports["bare"]), "--json-response"),
                log_dir=tmp,
            )
            procs["in-process"] = start(
                "in-process",
                python_module("bench.inprocess", "serve", "--port", str(ports["in-process"])),
                log_dir=tmp,
                env=edge_env,
            )
            conf = tmp / "sidecar.yaml"
            conf.write_text(SIDECAR_CONF.format(port=ports["sidecar"], upstream_port=ports["bare"]))
            procs["sidecar"] = start(
                "sidecar",
                [*venv_command("mcp-edge"), "serve", "--config", str(conf), "--anonymous"],
                log_dir=tmp,
                env=edge_env,
            )
            for way in WAYS:
                wait_http(procs[way], ports[way], "/mcp", timeout=180)
            pids = {
                "bare": [procs["bare"].pid],
                "in-process": [procs["in-process"].pid],
                "sidecar": [procs["sidecar"].pid, procs["bare"].pid],
            }
            results = _matrix(gen, plan, ports, pids, procs["sidecar"].pid, log)
        finally:
            gen.close()
            for proc in reversed(list(procs.values())):
                proc.stop()
    report = b.interleaved_report(
        plan,
        results=results,
        comparison=comparison(results),
        elapsed_s=round(time.monotonic() - started, 1),
    )
    write_report(args.out_dir, "inprocess", report, markdown(report))
    return 0


def _matrix(
    gen: b.LoadGen,
    plan: b.Plan,
    ports: dict[str, int],
    pids: dict[str, list[int]],
    gateway_pid: int,
    log: Any,
) -> dict[str, Any]:
    def spec(way: str, workload: str) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": ports[way],
            "json_path": "/mcp",
            "sse_path": "/mcp",
            "pids": pids[way],
        }

    raw: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for _, clients, round_, way, r in b.interleaved_runs(gen, plan, WAYS, spec):
        cpu = r["cpu_s"]
        # summarize() reads "proxy_cpu_s": here, every process serving the call.
        r["proxy_cpu_s"] = sum(cpu[str(p)] or 0.0 for p in pids[way])
        r["upstream_cpu_s"] = cpu.get(str(gateway_pid)) if way == "sidecar" else None
        raw.setdefault((clients, way), []).append(r)
        r["summary"] = b.round_summary(r, round_)
        log(
            f"  c={clients:<3d} {way:12s} {r['ops'] / r['window_s']:8.1f} ops/s "
            f"cpu {r['summary']['cpu_ms_per_call']} ms/call"
            + (f" errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
        )
    return b.interleaved_cells(
        raw,
        {
            "proxy_cpu_s_per_1k_ops": "cpu_ms_per_call",
            "upstream_cpu_s_per_1k_ops": "gateway_cpu_ms_per_call",
        },
    )


def comparison(results: dict[str, Any]) -> dict[str, Any]:
    """Per client count: each way's CPU per call over ``bare``'s (whole and per round), the
    edge's own CPU per call (minus ``bare``'s) in-process and as a sidecar, and in-process ÷
    sidecar."""
    out: dict[str, Any] = {}
    for clients, row in results.items():
        if not all(way in row for way in WAYS):
            continue
        cpu = {way: row[way]["cpu_ms_per_call"] for way in WAYS}
        rounds = {way: [r["cpu_ms_per_call"] for r in row[way]["rounds"]] for way in WAYS}

        def per_round(way: str, rounds: dict[str, list[Any]] = rounds) -> list[float]:
            return [x / y for x, y in zip(rounds[way], rounds["bare"], strict=False) if x and y]

        out[clients] = {
            "cpu_ms_per_call": cpu,
            "over_bare": {
                "in-process": b._ratio(cpu["in-process"], cpu["bare"]),
                "sidecar": b._ratio(cpu["sidecar"], cpu["bare"]),
            },
            "over_bare_rounds": {
                "in-process": spread(per_round("in-process")),
                "sidecar": spread(per_round("sidecar")),
            },
            "edge_cpu_ms_per_call": {
                "in-process": b._diff(cpu["in-process"], cpu["bare"]),
                "sidecar": b._diff(cpu["sidecar"], cpu["bare"]),
            },
            "in_process_over_sidecar": b._ratio(cpu["in-process"], cpu["sidecar"]),
            "in_process_cheaper": (
                cpu["in-process"] is not None
                and cpu["sidecar"] is not None
                and cpu["in-process"] < cpu["sidecar"]
            ),
        }
    return out


def markdown(report: dict[str, Any]) -> str:
    tree, plan = report["tree"], report["plan"]
    lines = [
        f"# In-process edge against the sidecar ({report['mode']}, {report['started_at']})",
        "",
        tree_line(tree),
        (
            f"Small calls to the SDK app; {plan['repeats']} interleaved rounds × "
            f"{plan['duration_s']} s per cell. CPU is every serving process's, in ms per call "
            "(`sidecar`: the gateway's and the app's; the gateway's share in brackets); `× bare` "
            "is CPU per call over the bare app's, whole (per round: min–median–max)."
        ),
        "",
        "| clients | way | ops/s | p50 / p99 ms | CPU ms/call | × bare (per round) | errors | other load |",
        "|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for clients, row in report["results"].items():
        cmp = report["comparison"].get(clients, {})
        for way in WAYS:
            cell = row.get(way)
            if cell is None:
                continue
            cpu = b._f(cell["cpu_ms_per_call"], "{:.3f}")
            if cell.get("gateway_cpu_ms_per_call") is not None:
                cpu += f" ({b._f(cell['gateway_cpu_ms_per_call'], '{:.3f}')})"
            ratio = "1" if way == "bare" else b._f(cmp.get("over_bare", {}).get(way))
            rounds = cmp.get("over_bare_rounds", {}).get(way)
            if rounds:
                ratio += f" ({spread_text(rounds)})"
            lines.append(
                f"| {clients} | {way} | {cell['ops_per_s']} | {b._f(cell['p50_ms'])} / "
                f"{b._f(cell['p99_ms'])} | {cpu} | {ratio} | {cell['errors']} | "
                f"{b._f(cell['other_cpu_share'], '{:.0%}')} |"
            )
    lines += ["", "| clients | edge CPU ms/call in-process / sidecar | in-process ÷ sidecar |"]
    lines += ["|--:|--:|--:|"]
    for clients, cmp in report["comparison"].items():
        edge = cmp["edge_cpu_ms_per_call"]
        lines.append(
            f"| {clients} | {b._f(edge['in-process'], '{:.3f}')} / "
            f"{b._f(edge['sidecar'], '{:.3f}')} | {b._f(cmp['in_process_over_sidecar'])} |"
        )
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
