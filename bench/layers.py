"""Where the gateway's time per call goes, and what other ASGI servers and process counts do with
it: small calls against the light upstream (``bench.light``), at 1 and 16 clients, through

``nginx``               the reference reverse proxy (1 worker)
``<server>-canned``     an ASGI server answering by itself (``bench.passthrough:canned``): the server's floor
``<server>-proxy``      the same server relaying to the upstream with a pooled aiohttp client and
                        nothing else (``bench.passthrough:proxy``): the floor of server + client
``gateway-<server>``    mcp-edge itself on that server, one process
``gateway-uvicorn-w2``  mcp-edge with ``--workers 2`` (Prometheus multi-process metrics)

for ``<server>`` in uvicorn (httptools + uvloop, what mcp-edge runs on), granian and hypercorn
(both with uvloop). Runs are interleaved and repeated like the main benchmark's; CPU is the
proxy's (all its processes) per 1000 calls.

    uv run --group bench-servers python -m bench.layers [--quick] [--variants a,b] [--out-dir DIR]

Writes ``bench/results/layers.json`` and ``layers.md``. Variants whose server is not installed
(without ``--group bench-servers``) are skipped and listed as such.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import run as b
from bench.procs import ManagedProcess, free_port, python_module, start, venv_command, wait_http

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORKLOAD = "small_call_light"

GATEWAY_CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - {{name: light, path: /mcp, upstream: "http://127.0.0.1:{light_port}/mcp", era: modern}}
"""

NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 1;
pid {tmp}/nginx-layers.pid;
error_log {tmp}/nginx-layers-error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream light {{ server 127.0.0.1:{light_port}; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host 127.0.0.1:{light_port};
        proxy_buffering off;
        proxy_request_buffering off;
        location / {{ proxy_pass http://light/mcp; }}
    }}
}}
"""


def _server_argv(server: str, app: str, port: int, *, factory: bool = False) -> list[str]:
    if server == "uvicorn":
        return python_module("uvicorn", app, "--host", "127.0.0.1", "--port", str(port), "--loop", "uvloop", "--http",
                             "httptools", "--no-access-log", "--log-level", "warning", "--backlog", "4096",
                             *(["--factory"] if factory else []))  # fmt: skip
    if server == "granian":
        return [*venv_command("granian"), "--interface", "asgi", "--loop", "uvloop", "--http", "1", "--host",
                "127.0.0.1", "--port", str(port), "--workers", "1", "--no-ws", "--log-level", "warning",
                *(["--factory"] if factory else []), app]  # fmt: skip
    if server == "hypercorn":
        target = f"{app}()" if factory else app
        # Its default closes a keep-alive connection after 1000 requests; the others keep it.
        conf = Path(tempfile.gettempdir()) / "mcp-edge-layers-hypercorn.toml"
        conf.write_text("keep_alive_max_requests = 1000000000\nkeep_alive_timeout = 75\n")
        return python_module("hypercorn", "--config", str(conf), "--worker-class", "uvloop", "--bind",
                             f"127.0.0.1:{port}", "--workers", "1", "--log-level", "warning", "--backlog", "4096",
                             target)  # fmt: skip
    raise ValueError(server)


def _installed(server: str) -> bool:
    return importlib.util.find_spec(server) is not None


#: variant -> (server it needs, how to start it: (tmp, port, light_port, key) -> (argv, env))
Starter = Callable[[Path, int, int, str], tuple[list[str], dict[str, str]]]


def _passthrough(server: str, which: str) -> Starter:
    def starter(tmp: Path, port: int, light_port: int, key: str) -> tuple[list[str], dict[str, str]]:
        app = f"bench.passthrough:{which}_factory"
        return _server_argv(server, app, port, factory=True), {"BENCH_UPSTREAM": f"http://127.0.0.1:{light_port}/mcp"}

    return starter


def _baseline(checkout: Path) -> Starter:
    """mcp-edge from another checkout (``--baseline DIR``, e.g. a ``git worktree`` of main), in
    this environment: an A/B of two versions of the gateway in one interleaved run."""

    def starter(tmp: Path, port: int, light_port: int, key: str) -> tuple[list[str], dict[str, str]]:
        conf = tmp / "gateway-baseline.yaml"
        conf.write_text(GATEWAY_CONF.format(port=port, light_port=light_port))
        # First on sys.path, before the working directory (this checkout) and the installed one.
        boot = f"import sys; sys.path.insert(0, {str(checkout.resolve())!r}); from gateway.server.cli import main; sys.exit(main())"
        return ([sys.executable, "-c", boot, "serve", "--config", str(conf), "--port", str(port), "--anonymous"],
                {"MCP_EDGE_STATE_KEYS": key})  # fmt: skip

    return starter


def _gateway(server: str, workers: int = 1) -> Starter:
    def starter(tmp: Path, port: int, light_port: int, key: str) -> tuple[list[str], dict[str, str]]:
        conf = tmp / f"gateway-{server}-{workers}.yaml"
        conf.write_text(GATEWAY_CONF.format(port=port, light_port=light_port))
        env = {"MCP_EDGE_STATE_KEYS": key}
        if server == "uvicorn":
            return [*venv_command("mcp-edge"), "serve", "--config", str(conf), "--port", str(port), "--anonymous",
                    "--workers", str(workers)], env  # fmt: skip
        # Other servers load the app the way a worker process does (gateway.server.cli.worker_app).
        env["MCP_EDGE__WORKER_ARGS"] = json.dumps({"config": str(conf), "flags": {"anonymous": True, "port": port}})
        return _server_argv(server, "gateway.server.cli:worker_app", port, factory=True), env

    return starter


VARIANTS: dict[str, tuple[str | None, Starter | None]] = {
    "nginx": (None, None),
    "uvicorn-canned": ("uvicorn", _passthrough("uvicorn", "canned")),
    "uvicorn-proxy": ("uvicorn", _passthrough("uvicorn", "proxy")),
    "uvicorn-native": ("uvicorn", _passthrough("uvicorn", "native")),
    "gateway-uvicorn": ("uvicorn", _gateway("uvicorn")),
    "gateway-uvicorn-w2": ("uvicorn", _gateway("uvicorn", 2)),
    "granian-canned": ("granian", _passthrough("granian", "canned")),
    "granian-proxy": ("granian", _passthrough("granian", "proxy")),
    "gateway-granian": ("granian", _gateway("granian")),
    "hypercorn-canned": ("hypercorn", _passthrough("hypercorn", "canned")),
    "hypercorn-proxy": ("hypercorn", _passthrough("hypercorn", "proxy")),
    "gateway-hypercorn": ("hypercorn", _gateway("hypercorn")),
}


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = b.children(todo.pop())
        out.extend(kids)
        todo.extend(kids)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.layers", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also run mcp-edge from this checkout (variant gateway-baseline)")  # fmt: skip
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    if args.baseline:
        VARIANTS["gateway-baseline"] = ("uvicorn", _baseline(args.baseline))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wanted = args.variants.split(",") if args.variants else list(VARIANTS)
    if args.baseline and "gateway-baseline" not in wanted:
        wanted.append("gateway-baseline")
    plan = b.Plan([WORKLOAD], [int(c) for c in args.clients.split(",")], duration=0.3 if args.quick else args.duration,
                  warmup=0.05 if args.quick else 0.6, repeats=1 if args.quick else args.repeats, calibration_s=0,
                  quick=args.quick, quiet_wait_s=0 if args.quick else 10.0, quiet_budget_s=0 if args.quick else 120.0)  # fmt: skip
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mcp-edge-layers-") as tmpname:
        tmp = Path(tmpname)
        procs: dict[str, ManagedProcess] = {}
        ports: dict[str, int] = {}
        gen = b.LoadGen(tmp)
        try:
            ports["direct"] = free_port()
            procs["direct"] = start("light", python_module("bench.light", "--port", str(ports["direct"])), log_dir=tmp)
            wait_http(procs["direct"], ports["direct"], "/mcp")
            key = subprocess.run([*venv_command("mcp-edge"), "keys", "generate"], capture_output=True, text=True,
                                 check=True).stdout.strip()  # fmt: skip
            for name in wanted:
                server, starter = VARIANTS[name]
                port = ports[name] = free_port()
                if name == "nginx":
                    if not Path(b.NGINX).exists():
                        skipped[name] = f"{b.NGINX} not found"
                        continue
                    conf = tmp / "nginx-layers.conf"
                    conf.write_text(NGINX_CONF.format(tmp=tmp, port=port, light_port=ports["direct"]))
                    procs[name] = start(name, [b.NGINX, "-p", str(tmp), "-c", str(conf)], log_dir=tmp)
                    wait_http(procs[name], port, "/alive")
                    continue
                assert server is not None and starter is not None
                if not _installed(server):
                    skipped[name] = f"{server} is not installed (uv run --group bench-servers ...)"
                    continue
                argv_, env = starter(tmp, port, ports["direct"], key)
                procs[name] = start(name, argv_, log_dir=tmp, env=env)
                wait_http(procs[name], port, "/mcp", timeout=60)
            targets = ["direct", *(n for n in wanted if n in procs)]
            pids = {n: [procs[n].pid, *descendants(procs[n].pid)] for n in targets}
            log(f"variants: {', '.join(targets)}" + (f"; skipped: {skipped}" if skipped else ""))
            results = _matrix(gen, plan, targets, ports, pids, procs["direct"].pid, log)
        finally:
            gen.close()
            for proc in reversed(list(procs.values())):
                proc.stop()
    report = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": b.machine_info(),
        "plan": {"workload": WORKLOAD, "clients": plan.concurrency, "duration_s": plan.duration,
                 "repeats": plan.repeats},  # fmt: skip
        "skipped": skipped,
        "results": results,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "layers.json").write_text(json.dumps(report, indent=1) + "\n")
    md = markdown(report)
    (args.out_dir / "layers.md").write_text(md)
    print(md)
    return 0


def _matrix(gen: b.LoadGen, plan: b.Plan, targets: list[str], ports: dict[str, int], pids: dict[str, list[int]],
            upstream_pid: int, log: Any) -> dict[str, Any]:  # fmt: skip
    raw: dict[tuple[int, str], list[dict[str, Any]]] = {}
    rotation = 0
    quiet_left = plan.quiet_budget_s
    for clients in plan.concurrency:
        for _ in range(plan.repeats):
            order = targets[rotation % len(targets):] + targets[: rotation % len(targets)]
            rotation += 1
            for target in order:
                proxy = pids[target] if target != "direct" else []
                if plan.quiet_wait_s and quiet_left > 0:
                    waited, _ = b.wait_quiet(min(plan.quiet_wait_s, quiet_left))
                    quiet_left -= waited
                busy0, t0 = b.machine_busy(), time.monotonic()
                r = gen.run(host="127.0.0.1", port=ports[target], json_path="/mcp", sse_path="/mcp", workload=WORKLOAD,
                            concurrency=clients, duration=plan.duration, warmup=plan.warmup,
                            pids=[*proxy, upstream_pid])  # fmt: skip
                busy, span = b.machine_busy() - busy0, time.monotonic() - t0
                cpu = r["cpu_s"]
                r["proxy_cpu_s"] = sum(cpu[str(p)] or 0.0 for p in proxy) if proxy else None
                r["upstream_cpu_s"] = cpu.get(str(upstream_pid))
                ours = sum(v or 0.0 for v in cpu.values()) + r["loadgen_cpu_s"]
                r["other_cpu_s"] = max(0.0, busy * plan.duration / span - ours)
                raw.setdefault((clients, target), []).append(r)
                lat = sorted(r["latencies_us"])
                log(f"  c={clients:<3d} {target:20s} {r['ops'] / r['window_s']:8.1f} ops/s p50 "
                    f"{b.percentile(lat, 0.5) or 0:6.2f} ms" + (f" errors={r['errors']} {r['error_samples'][:1]}"
                                                                 if r["errors"] else ""))  # fmt: skip
    out: dict[str, Any] = {}
    for (clients, target), cells in raw.items():
        out.setdefault(str(clients), {})[target] = b.summarize(cells)
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Layers: small calls against the light upstream ({report['mode']}, {report['started_at']})", "",
             "CPU in ms per call (all processes of the proxy); p50 in ms; `added p50` is the variant's p50 minus "
             "direct's; `of direct` is throughput relative to direct; `÷ nginx` is CPU relative to nginx's.", ""]  # fmt: skip
    for clients, row in report["results"].items():
        direct = row.get("direct", {})
        nginx = row.get("nginx", {})
        lines += [f"## {clients} client(s)", "",
                  "| variant | ops/s | of direct | p50 | added p50 | CPU ms/call | ÷ nginx | other load | errors |",
                  "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]  # fmt: skip
        for name, cell in row.items():
            cpu = cell.get("proxy_cpu_s_per_1k_ops")
            n_cpu = nginx.get("proxy_cpu_s_per_1k_ops")
            lines.append(
                f"| {name} | {cell['ops_per_s']} | {b._f(b._ratio(cell['ops_per_s'], direct.get('ops_per_s')))} | "
                f"{b._f(cell['p50_ms'])} | {b._f(b._diff(cell['p50_ms'], direct.get('p50_ms')), '{:+.2f}')} | "
                f"{b._f(cpu, '{:.3f}')} | {b._f(b._ratio(cpu, n_cpu))} | {b._f(cell['other_cpu_share'], '{:.0%}')} | "
                f"{cell['errors']} |"
            )
        lines.append("")
    if report["skipped"]:
        lines += ["Skipped: " + "; ".join(f"{k} ({v})" for k, v in report["skipped"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
