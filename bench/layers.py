"""Where the gateway's time per call goes, and what other ASGI servers and process counts do with
it: small calls against the light upstream (``bench.light``), at 1 and 16 clients, through

``nginx``               the reference reverse proxy (1 worker)
``<server>-canned``     an ASGI server answering by itself (``bench.passthrough:canned``): the server's floor
``<server>-proxy``      the same server relaying to the upstream with a pooled aiohttp client and
                        nothing else (``bench.passthrough:proxy``): the floor of server + client
``gateway-<server>``    mcp-edge itself (this working tree) on that server, one process, a plain route
``gateway-uvicorn-w2``  mcp-edge with ``--workers 2`` (Prometheus multi-process metrics)
``full``                mcp-edge on uvicorn on a route with a policy (a CEL allow rule), rate limits
                        and the edge cache all on
``gateway``             with ``--baseline REF``: ``gateway-uvicorn`` under a short name, beside
``gateway-baseline``,   ``gateway`` and ``full`` run by another version of mcp-edge (a git ref,
``full-baseline``       checked out into a temporary worktree with its own environment, started
                        through its own CLI), all in the same interleaved run

for ``<server>`` in uvicorn (httptools + uvloop, what mcp-edge runs on), granian and hypercorn
(both with uvloop). Runs are interleaved and repeated like the main benchmark's; CPU is the
proxy's (all its processes) per 1000 calls.

    uv run --group bench-servers python -m bench.layers [--quick] [--variants a,b] [--out-dir DIR]
    uv run python -m bench.layers --baseline main [--repeats 3]     # A/B: this tree against main

Writes ``bench/results/layers.json`` and ``layers.md`` (with ``--baseline``: ``layers-ab.json``
and ``layers-ab.md``, and by default only the variants an A/B needs: nginx, uvicorn-native,
gateway, full and their baselines). Variants whose server is not installed (without ``--group
bench-servers``) are skipped and listed as such.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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
from bench.report import (
    commit_of,
    elapsed_log,
    git,
    spread,
    spread_text,
    tree_line,
    write_report,
)

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
WORKLOAD = "small_call_light"

GATEWAY_CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - {{name: light, path: /mcp, upstream: "http://127.0.0.1:{light_port}/mcp", era: modern}}
"""

#: A route with every per-request feature on: a policy whose one rule allows the call (evaluated
#: on every request), rate limits per caller and for the route (never reached), the edge cache
#: (a tools/call is not cacheable: the lookup is skipped, the check is not). Valid on main too.
FULL_CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - name: full
    path: /mcp
    upstream: "http://127.0.0.1:{light_port}/mcp"
    era: modern
    legacy_clients: deny
    policy:
      default: deny
      rules:
        - {{when: 'method == "tools/call" && name == "small" && !has(arguments.path)', action: allow}}
    rate_limits:
      per_principal: 1000000/second
      global: 1000000/second
    cache: {{enabled: true}}
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
        return python_module(
            "uvicorn",
            app,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
            "--backlog",
            "4096",
            *(["--factory"] if factory else []),
        )
    if server == "granian":
        return [
            *venv_command("granian"),
            "--interface",
            "asgi",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
            "--no-ws",
            "--log-level",
            "warning",
            *(["--factory"] if factory else []),
            app,
        ]
    if server == "hypercorn":
        target = f"{app}()" if factory else app
        # Its default closes a keep-alive connection after 1000 requests; the others keep it.
        conf = Path(tempfile.gettempdir()) / "mcp-edge-layers-hypercorn.toml"
        conf.write_text("keep_alive_max_requests = 1000000000\nkeep_alive_timeout = 75\n")
        return python_module(
            "hypercorn",
            "--config",
            str(conf),
            "--worker-class",
            "uvloop",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "1",
            "--log-level",
            "warning",
            "--backlog",
            "4096",
            target,
        )
    raise ValueError(server)


def _installed(server: str) -> bool:
    return importlib.util.find_spec(server) is not None


#: variant -> (server it needs, how to start it: (tmp, port, light_port, key) -> (argv, env))
Starter = Callable[[Path, int, int, str], tuple[list[str], dict[str, str]]]


def _passthrough(server: str, which: str) -> Starter:
    def starter(
        tmp: Path, port: int, light_port: int, key: str
    ) -> tuple[list[str], dict[str, str]]:
        app = f"bench.passthrough:{which}_factory"
        return _server_argv(server, app, port, factory=True), {
            "BENCH_UPSTREAM": f"http://127.0.0.1:{light_port}/mcp"
        }

    return starter


@contextlib.contextmanager
def baseline_checkout(ref: str, log: Callable[[str], None]) -> Iterator[Path]:
    """``ref`` checked out into a temporary git worktree with its own environment (``uv sync
    --frozen``, from the shared uv cache), removed again whatever happens. A directory is used as
    it is (a checkout whose environment is already synced)."""
    if Path(ref).is_dir() and (Path(ref) / "pyproject.toml").exists():
        yield Path(ref).resolve()
        return
    commit = commit_of(ref)
    tree = Path(tempfile.mkdtemp(prefix="mcp-edge-baseline-"))
    try:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit],
            check=True,
            capture_output=True,
            timeout=120,
        )
        if (REPO / ".cache").exists():  # Node, the conformance harness: shared, never copied
            (tree / ".cache").symlink_to((REPO / ".cache").resolve())
        log(f"baseline {ref} ({commit[:10]}) in {tree}: uv sync --frozen")
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
        }
        subprocess.run(
            ["uv", "sync", "--frozen", "--quiet"], cwd=tree, env=env, check=True, timeout=900
        )
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
            capture_output=True,
            check=False,
            timeout=120,
        )
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "prune"],
            capture_output=True,
            check=False,
            timeout=60,
        )


def _edge_cli(tree: Path | None) -> list[str]:
    """mcp-edge's command line: this environment's, or another checkout's own (its module paths
    may differ: only the CLI is common to every version)."""
    if tree is None:
        return venv_command("mcp-edge")
    script = tree / ".venv" / "bin" / "mcp-edge"
    return (
        [str(script)]
        if script.exists()
        else ["uv", "run", "--frozen", "--project", str(tree), "mcp-edge"]
    )


def _edge(conf_text: str, tree: Path | None = None, workers: int = 1) -> Starter:
    """mcp-edge on uvicorn through its CLI, from this environment or from ``tree``."""

    def starter(
        tmp: Path, port: int, light_port: int, key: str
    ) -> tuple[list[str], dict[str, str]]:
        conf = Path(tempfile.mkstemp(prefix="gateway-", suffix=".yaml", dir=tmp)[1])
        conf.write_text(conf_text.format(port=port, light_port=light_port))
        return (
            [
                *_edge_cli(tree),
                "serve",
                "--config",
                str(conf),
                "--port",
                str(port),
                "--anonymous",
                "--workers",
                str(workers),
            ],
            {"MCP_EDGE_STATE_KEYS": key},
        )

    return starter


def _gateway(server: str) -> Starter:
    def starter(
        tmp: Path, port: int, light_port: int, key: str
    ) -> tuple[list[str], dict[str, str]]:
        conf = tmp / f"gateway-{server}.yaml"
        conf.write_text(GATEWAY_CONF.format(port=port, light_port=light_port))
        # Other servers load the app the way a worker process does (mcp_edge.server.cli.worker_app).
        env = {
            "MCP_EDGE_STATE_KEYS": key,
            "MCP_EDGE__WORKER_ARGS": json.dumps(
                {"config": str(conf), "flags": {"anonymous": True, "port": port}}
            ),
        }
        return _server_argv(server, "mcp_edge.server.cli:worker_app", port, factory=True), env

    return starter


VARIANTS: dict[str, tuple[str | None, Starter | None]] = {
    "nginx": (None, None),
    "uvicorn-canned": ("uvicorn", _passthrough("uvicorn", "canned")),
    "uvicorn-proxy": ("uvicorn", _passthrough("uvicorn", "proxy")),
    "uvicorn-native": ("uvicorn", _passthrough("uvicorn", "native")),
    "gateway-uvicorn": ("uvicorn", _edge(GATEWAY_CONF)),
    "gateway-uvicorn-w2": ("uvicorn", _edge(GATEWAY_CONF, workers=2)),
    "full": ("uvicorn", _edge(FULL_CONF)),
    "granian-canned": ("granian", _passthrough("granian", "canned")),
    "granian-proxy": ("granian", _passthrough("granian", "proxy")),
    "gateway-granian": ("granian", _gateway("granian")),
    "hypercorn-canned": ("hypercorn", _passthrough("hypercorn", "canned")),
    "hypercorn-proxy": ("hypercorn", _passthrough("hypercorn", "proxy")),
    "gateway-hypercorn": ("hypercorn", _gateway("hypercorn")),
}
#: What an A/B (``--baseline``) runs unless ``--variants`` says otherwise; each of ``gateway`` and
#: ``full`` gets its ``-baseline`` twin.
AB_VARIANTS = ["nginx", "uvicorn-native", "gateway", "full"]


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = b.children(todo.pop())
        out.extend(kids)
        todo.extend(kids)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.layers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--variants", help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--baseline",
        metavar="REF",
        help="A/B: also run mcp-edge at this git ref (or checkout directory) as gateway-baseline "
        "and full-baseline, interleaved with this tree's",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    log = elapsed_log(started)

    variants = dict(VARIANTS)
    if args.baseline:
        variants["gateway"] = variants["gateway-uvicorn"]
        wanted = args.variants.split(",") if args.variants else list(AB_VARIANTS)
        for name in ("gateway", "full"):
            if name in wanted and f"{name}-baseline" not in wanted:
                wanted.insert(wanted.index(name) + 1, f"{name}-baseline")
    else:
        wanted = args.variants.split(",") if args.variants else list(VARIANTS)
    unknown = [
        n for n in wanted if n not in variants and n not in ("gateway-baseline", "full-baseline")
    ]
    if unknown:
        parser.error(f"unknown variants: {', '.join(unknown)}")
    plan = b.interleaved_plan(
        WORKLOAD, args.clients, quick=args.quick, duration=args.duration, repeats=args.repeats
    )

    skipped: dict[str, str] = {}
    baseline: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if args.baseline:
            tree = stack.enter_context(baseline_checkout(args.baseline, log))
            baseline = {
                "ref": args.baseline,
                "commit": git(tree, "rev-parse", "HEAD"),
                "subject": git(tree, "log", "-1", "--format=%s")[:100],
            }
            variants["gateway-baseline"] = ("uvicorn", _edge(GATEWAY_CONF, tree))
            variants["full-baseline"] = ("uvicorn", _edge(FULL_CONF, tree))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-edge-layers-")))
        procs: dict[str, ManagedProcess] = {}
        ports: dict[str, int] = {}
        gen = b.LoadGen(tmp)
        try:
            ports["direct"] = free_port()
            procs["direct"] = start(
                "light", python_module("bench.light", "--port", str(ports["direct"])), log_dir=tmp
            )
            wait_http(procs["direct"], ports["direct"], "/mcp")
            key = state_keys()
            for name in wanted:
                server, starter = variants[name]
                port = ports[name] = free_port()
                if name == "nginx":
                    if not Path(b.NGINX).exists():
                        skipped[name] = f"{b.NGINX} not found"
                        continue
                    conf = tmp / "nginx-layers.conf"
                    conf.write_text(
                        NGINX_CONF.format(tmp=tmp, port=port, light_port=ports["direct"])
                    )
                    procs[name] = start(
                        name, [b.NGINX, "-p", str(tmp), "-c", str(conf)], log_dir=tmp
                    )
                    wait_http(procs[name], port, "/alive")
                    continue
                assert server is not None and starter is not None
                if not _installed(server):
                    skipped[name] = f"{server} is not installed (uv run --group bench-servers ...)"
                    continue
                argv_, env = starter(tmp, port, ports["direct"], key)
                procs[name] = start(name, argv_, log_dir=tmp, env=env)
                wait_http(
                    procs[name], port, "/mcp", timeout=180
                )  # slow to start on a loaded machine
            targets = ["direct", *(n for n in wanted if n in procs)]
            pids = {n: [procs[n].pid, *descendants(procs[n].pid)] for n in targets}
            log(f"variants: {', '.join(targets)}" + (f"; skipped: {skipped}" if skipped else ""))
            results = _matrix(gen, plan, targets, ports, pids, procs["direct"].pid, log)
        finally:
            gen.close()
            for proc in reversed(list(procs.values())):
                proc.stop()
    report = b.interleaved_report(
        plan,
        skipped=skipped,
        results=results,
        elapsed_s=round(time.monotonic() - started, 1),
    )
    if args.baseline:
        report["baseline"] = baseline
        report["ab"] = ab_comparison(results)
    stem = "layers-ab" if args.baseline else "layers"
    write_report(args.out_dir, stem, report, markdown(report))
    return 0


def _matrix(
    gen: b.LoadGen,
    plan: b.Plan,
    targets: list[str],
    ports: dict[str, int],
    pids: dict[str, list[int]],
    upstream_pid: int,
    log: Any,
) -> dict[str, Any]:
    def proxy(target: str) -> list[int]:
        return pids[target] if target != "direct" else []

    def spec(target: str, workload: str) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": ports[target],
            "json_path": "/mcp",
            "sse_path": "/mcp",
            "pids": [*proxy(target), upstream_pid],
        }

    raw: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for _, clients, round_, target, r in b.interleaved_runs(gen, plan, targets, spec):
        cpu = r["cpu_s"]
        r["proxy_cpu_s"] = sum(cpu[str(p)] or 0.0 for p in proxy(target)) if proxy(target) else None
        r["upstream_cpu_s"] = cpu.get(str(upstream_pid))
        raw.setdefault((clients, target), []).append(r)
        lat = sorted(r["latencies_us"])
        r["round"] = round_
        r["summary"] = {
            "ops_per_s": round(r["ops"] / r["window_s"], 1) if r["window_s"] else None,
            "p50_ms": b.percentile(lat, 0.50),
            "p99_ms": b.percentile(lat, 0.99),
            "cpu_ms_per_call": round(r["proxy_cpu_s"] / r["ops"] * 1000, 4)
            if r["proxy_cpu_s"] is not None and r["ops"]
            else None,
            "other_cpu_share": round(r["other_cpu_s"] / plan.duration / (os.cpu_count() or 1), 3),
        }
        log(
            f"  c={clients:<3d} {target:20s} {r['ops'] / r['window_s']:8.1f} ops/s p50 "
            f"{b.percentile(lat, 0.5) or 0:6.2f} ms"
            + (f" errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
        )
    return b.interleaved_cells(raw)


def ab_comparison(results: dict[str, Any]) -> dict[str, Any]:
    """The A/B's derived numbers per client count: the gateway's CPU per call above the relay floor
    (``uvicorn-native``: uvicorn relaying through the gateway's own upstream client, no checks) for
    this tree and the baseline and their ratio; the same ratio of whole CPU per call on the route
    with everything on; added p50 / p99 over direct. Each also per round (the rounds are
    interleaved, so a round's ratio compares neighbours in time): the spread is the noise."""
    out: dict[str, Any] = {}

    def cpu(row: dict[str, Any], name: str) -> float | None:
        return row.get(name, {}).get("proxy_cpu_s_per_1k_ops")  # s per 1000 calls = ms per call

    def per_round(row: dict[str, Any], name: str) -> list[float | None]:
        return [r.get("cpu_ms_per_call") for r in row.get(name, {}).get("rounds", [])]

    for clients, row in results.items():
        native = cpu(row, "uvicorn-native")
        entry: dict[str, Any] = {}
        for new, old in (("gateway", "gateway-baseline"), ("full", "full-baseline")):
            if new not in row or old not in row:
                continue
            own_new = b._diff(cpu(row, new), native)
            own_old = b._diff(cpu(row, old), native)
            rn, ro, rf = per_round(row, new), per_round(row, old), per_round(row, "uvicorn-native")
            round_cpu_ratio = [x / y for x, y in zip(rn, ro, strict=False) if x is not None and y]
            round_own_ratio = [
                (x - f) / (y - f)
                for x, y, f in zip(rn, ro, rf, strict=False)
                if None not in (x, y, f) and y - f > 0
            ]
            d50 = row.get("direct", {}).get("p50_ms")
            d99 = row.get("direct", {}).get("p99_ms")
            entry[new] = {
                "cpu_ms_per_call": {
                    "new": cpu(row, new),
                    "baseline": cpu(row, old),
                    "floor": native,
                },
                "cpu_ratio_new_over_baseline": b._ratio(cpu(row, new), cpu(row, old)),
                "above_floor_ms": {"new": own_new, "baseline": own_old},
                "above_floor_ratio_new_over_baseline": b._ratio(own_new, own_old),
                "added_p50_ms": {
                    "new": b._diff(row[new].get("p50_ms"), d50),
                    "baseline": b._diff(row[old].get("p50_ms"), d50),
                },
                "added_p99_ms": {
                    "new": b._diff(row[new].get("p99_ms"), d99),
                    "baseline": b._diff(row[old].get("p99_ms"), d99),
                },
                "noise": {
                    "cpu_ms_per_call_rounds": {
                        "new": spread(rn, 4),
                        "baseline": spread(ro, 4),
                        "floor": spread(rf, 4),
                    },
                    "cpu_ratio_rounds": spread(round_cpu_ratio, 4),
                    "above_floor_ratio_rounds": spread(round_own_ratio, 4),
                },
            }
        out[clients] = entry
    return out


def markdown(report: dict[str, Any]) -> str:
    title = "A/B" if report.get("baseline") else "Layers"
    lines = [
        f"# {title}: small calls against the light upstream ({report['mode']}, {report['started_at']})",
        "",
    ]
    tree = report.get("tree")
    if tree:
        lines += [tree_line(tree)]
    if report.get("baseline"):
        base = report["baseline"]
        lines += [f"Baseline: `{base['ref']}` = `{base['commit'][:10]}` {base['subject']}.", ""]
    plan = report["plan"]
    lines += [
        (
            f"{plan['repeats']} interleaved rounds × {plan['duration_s']} s per cell (each round runs every "
            "variant back to back, in a rotating order)."
        ),
        "",
        (
            "CPU in ms per call (all processes of the proxy, from `/proc`), with its min–max over the rounds; "
            "p50 / p99 in ms over all rounds; `added` is the variant's figure minus direct's; `of direct` is "
            "throughput relative to direct; `÷ nginx` is CPU relative to nginx's."
        ),
        "",
    ]
    for clients, row in report["results"].items():
        direct = row.get("direct", {})
        nginx = row.get("nginx", {})
        lines += [
            f"## {clients} client(s)",
            "",
            "| variant | ops/s | of direct | p50 / p99 | added p50 / p99 | CPU ms/call | min–max over rounds | ÷ nginx | other load | errors |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for name, cell in row.items():
            cpu = cell.get("proxy_cpu_s_per_1k_ops")
            n_cpu = nginx.get("proxy_cpu_s_per_1k_ops")
            rounds = spread([r.get("cpu_ms_per_call") for r in cell.get("rounds", [])], 4)
            lines.append(
                f"| {name} | {cell['ops_per_s']} | {b._f(b._ratio(cell['ops_per_s'], direct.get('ops_per_s')))} | "
                f"{b._f(cell['p50_ms'])} / {b._f(cell['p99_ms'])} | "
                f"{b._f(b._diff(cell['p50_ms'], direct.get('p50_ms')), '{:+.2f}')} / "
                f"{b._f(b._diff(cell['p99_ms'], direct.get('p99_ms')), '{:+.2f}')} | "
                f"{b._f(cpu, '{:.3f}')} | "
                + (
                    f"{rounds['min']:.3f}–{rounds['max']:.3f}"
                    if rounds and cpu is not None
                    else "–"
                )
                + f" | {b._f(b._ratio(cpu, n_cpu))} | {b._f(cell['other_cpu_share'], '{:.0%}')} | {cell['errors']} |"
            )
        lines.append("")
    if report.get("ab"):
        lines += [
            "## A/B: this tree (new) against the baseline",
            "",
            (
                "`above floor` is CPU per call minus `uvicorn-native`'s (uvicorn relaying through the gateway's "
                "own upstream client with no checks): the gateway's own work. Ratios are new ÷ baseline; "
                "`per round` is the min–median–max of the same ratio computed round by round (the noise)."
            ),
            "",
            "| route | clients | CPU ms/call new / baseline | ratio (per round) | above floor new / baseline | ratio (per round) | added p50 new / baseline | added p99 new / baseline |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]

        def rng(sp: dict[str, float] | None) -> str:
            return "–" if not sp else spread_text(sp)

        for clients, entry in report["ab"].items():
            for route, e in entry.items():
                c, o, n = e["cpu_ms_per_call"], e["above_floor_ms"], e["noise"]
                lines.append(
                    f"| {'plain' if route == 'gateway' else 'policy + limits + cache'} | {clients} | "
                    f"{b._f(c['new'], '{:.3f}')} / {b._f(c['baseline'], '{:.3f}')} | "
                    f"{b._f(e['cpu_ratio_new_over_baseline'])} ({rng(n['cpu_ratio_rounds'])}) | "
                    f"{b._f(o['new'], '{:.3f}')} / {b._f(o['baseline'], '{:.3f}')} | "
                    f"{b._f(e['above_floor_ratio_new_over_baseline'])} ({rng(n['above_floor_ratio_rounds'])}) | "
                    f"{b._f(e['added_p50_ms']['new'], '{:+.2f}')} / {b._f(e['added_p50_ms']['baseline'], '{:+.2f}')} | "
                    f"{b._f(e['added_p99_ms']['new'], '{:+.2f}')} / {b._f(e['added_p99_ms']['baseline'], '{:+.2f}')} |"
                )
        lines.append("")
    if report["skipped"]:
        lines += ["Skipped: " + "; ".join(f"{k} ({v})" for k, v in report["skipped"].items()), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
