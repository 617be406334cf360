"""The benchmark: one command, three paths to the same upstream, measured side by side.

    uv run python -m bench             # the full matrix (about 6-8 minutes)
    uv run python -m bench --quick     # a few-seconds smoke run (no timing meaning)
    uv run python -m bench --soak 300  # add a 5-minute RSS soak through the gateway
    uv run python -m bench --profile   # add a py-spy profile of the gateway (py-spy on PATH)

Paths: (a) ``direct`` to the upstream, (b) ``edge`` through ``mcp-edge serve``, (c) ``nginx`` as
a plain reverse proxy (skipped when nginx is not installed). Runs are interleaved: for every
workload and client count, each repetition runs the three paths back to back, in a rotating
order, so a noisy moment of the machine hits all three alike.

Writes ``bench/results/latest.json`` and ``bench/results/latest.md`` (or ``--out-dir``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import micro
from bench import workloads as w
from bench.loadgen import cpu_seconds, rss_bytes
from bench.procs import (
    ManagedProcess,
    children,
    free_port,
    python_module,
    start,
    state_keys,
    venv_command,
    wait_http,
)
from bench.report import elapsed_log, tree_info, write_report

RESULTS_DIR = Path(__file__).resolve().parent / "results"
TARGETS = ("direct", "edge", "nginx")
NGINX = os.environ.get("MCP_EDGE_BENCH_NGINX", "/usr/sbin/nginx")


@dataclass
class Plan:
    workloads: list[str]
    concurrency: list[int]
    duration: float
    warmup: float
    repeats: int
    calibration_s: float
    quick: bool
    #: Before each run, wait up to this long for other work on the machine to calm down.
    quiet_wait_s: float = 0.0
    #: ... but never more than this in total.
    quiet_budget_s: float = 0.0


FULL = Plan(
    list(w.WORKLOADS),
    [1, 16, 128],
    duration=3.0,
    warmup=0.6,
    repeats=2,
    calibration_s=3.0,
    quick=False,
    quiet_wait_s=10.0,
    quiet_budget_s=150.0,
)
QUICK = Plan(
    list(w.WORKLOADS), [1, 4], duration=0.2, warmup=0.05, repeats=1, calibration_s=0.2, quick=True
)


# ---------------------------------------------------------------------------- processes


class LoadGen:
    """The load generator process, driven one JSON line at a time."""

    def __init__(self, log_dir: Path) -> None:
        self._stderr = open(log_dir / "loadgen.log", "ab")  # noqa: SIM115
        self.popen = subprocess.Popen(  # noqa: S603
            python_module("bench.loadgen"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=Path(__file__).resolve().parents[1],
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def run(self, **spec: Any) -> dict[str, Any]:
        assert self.popen.stdin is not None and self.popen.stdout is not None
        self.popen.stdin.write(json.dumps(spec).encode() + b"\n")
        self.popen.stdin.flush()
        line = self.popen.stdout.readline()
        if not line:
            raise RuntimeError("the load generator died; see loadgen.log")
        result = json.loads(line)
        if "fatal" in result:
            raise RuntimeError(f"load generator: {result['fatal']}")
        return result

    def close(self) -> None:
        if self.popen.stdin:
            self.popen.stdin.close()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
        self._stderr.close()


NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log warn;
events {{ worker_connections 4096; multi_accept on; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/nginx-body;
    proxy_temp_path {tmp}/nginx-proxy;
    fastcgi_temp_path {tmp}/nginx-fastcgi;
    uwsgi_temp_path {tmp}/nginx-uwsgi;
    scgi_temp_path {tmp}/nginx-scgi;
    upstream mcp_json {{ server 127.0.0.1:{json_port}; keepalive 256; keepalive_requests 1000000; }}
    upstream mcp_sse {{ server 127.0.0.1:{sse_port}; keepalive 256; keepalive_requests 1000000; }}
    upstream mcp_light {{ server 127.0.0.1:{light_port}; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        keepalive_requests 1000000;
        keepalive_timeout 75s;
        client_max_body_size 4m;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering off;
        proxy_request_buffering off;
        proxy_read_timeout 300s;
        location = /mcp {{
            proxy_set_header Host 127.0.0.1:{json_port};
            proxy_pass http://mcp_json;
        }}
        location = /sse/mcp {{
            proxy_set_header Host 127.0.0.1:{sse_port};
            proxy_pass http://mcp_sse/mcp;
        }}
        location = /cached/mcp {{
            proxy_set_header Host 127.0.0.1:{json_port};
            proxy_pass http://mcp_json/mcp;
        }}
        location = /light/mcp {{
            proxy_set_header Host 127.0.0.1:{light_port};
            proxy_pass http://mcp_light/mcp;
        }}
        location = /policy/mcp {{
            proxy_set_header Host 127.0.0.1:{json_port};
            proxy_pass http://mcp_json/mcp;
        }}
    }}
}}
"""

GATEWAY_CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - {{name: json, path: /mcp, upstream: "http://127.0.0.1:{json_port}/mcp"}}
  - {{name: sse, path: /sse/mcp, upstream: "http://127.0.0.1:{sse_port}/mcp"}}
  - {{name: light, path: /light/mcp, upstream: "http://127.0.0.1:{light_port}/mcp", era: modern}}
  - {{name: cached, path: /cached/mcp, upstream: "http://127.0.0.1:{json_port}/mcp", cache: {{enabled: true}}}}
  - name: policy
    path: /policy/mcp
    upstream: "http://127.0.0.1:{json_port}/mcp"
    legacy_clients: deny
    policy:
      default: allow
      rules:  # ten rules, none of which matches the small call: every one is evaluated
        - {{when: 'has(claims.groups) && "admins" in claims.groups && name.startsWith("delete_")', action: deny}}
        - {{when: 'method == "tools/call" && name == "drop_table"', action: deny}}
        - {{when: 'name.startsWith("admin_")', action: deny}}
        - {{when: 'has(arguments.path) && arguments.path.startsWith("/etc/")', action: deny}}
        - {{when: 'has(claims.tenant) && claims.tenant != "acme" && name == "export_customers"', action: deny}}
        - {{when: 'method == "resources/read" && uri.startsWith("file:///secret/")', action: deny}}
        - {{when: 'name in ["rm", "shutdown", "format_disk"]', action: deny}}
        - {{when: 'has(arguments.amount) && arguments.amount > 1000', action: approve}}
        - {{when: 'name.endsWith("_write")', action: deny}}
        - {{when: 'principal.id == "root"', action: deny}}
"""
#: Routes to the legacy (2025-era) upstreams, when they could be started (they need uv).
LEGACY_ROUTES = """\
  - {{name: legacy_resume, path: /legacy-resume/mcp, upstream: "http://127.0.0.1:{resume_port}/mcp", era: legacy,
      bridge: {{strategy: resume}}}}
  - {{name: legacy_park, path: /legacy-park/mcp, upstream: "http://127.0.0.1:{park_port}/mcp", era: legacy,
      bridge: {{strategy: park}}}}
"""
LEGACY_PATHS = {"legacy_resume": "/legacy-resume/mcp", "legacy_park": "/legacy-park/mcp"}


@dataclass
class Env:
    tmp: Path
    procs: dict[str, ManagedProcess] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    nginx_workers: list[int] = field(default_factory=list)

    def target(self, name: str) -> dict[str, Any]:
        if name == "direct":
            return {
                "host": "127.0.0.1",
                "port": self.ports["up_json"],
                "json_path": "/mcp",
                "sse_port": self.ports["up_sse"],
            }
        if name == "edge":
            return {
                "host": "127.0.0.1",
                "port": self.ports["edge"],
                "json_path": "/mcp",
                "sse_path": "/sse/mcp",
                "cached_path": "/cached/mcp",
                "policy_path": "/policy/mcp",
                "light_path": "/light/mcp",
                "paths": LEGACY_PATHS,
            }
        return {
            "host": "127.0.0.1",
            "port": self.ports["nginx"],
            "json_path": "/mcp",
            "sse_path": "/sse/mcp",
            "cached_path": "/cached/mcp",
            "policy_path": "/policy/mcp",
            "light_path": "/light/mcp",
        }

    def spec(self, name: str, workload: str) -> dict[str, Any]:
        """Where the load generator connects for a target and workload."""
        t = self.target(name)
        if name == "direct":
            route = w.WORKLOADS[workload][2]
            port = {"sse": t["sse_port"], "light": self.ports["up_light"]}.get(
                route, t["port"]
            )  # else the json one
            return {
                "host": t["host"],
                "port": port,
                "json_path": "/mcp",
                "sse_path": "/mcp",
                "cached_path": "/mcp",
                "policy_path": "/mcp",
            }
        return t

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()


def start_env(tmp: Path, *, with_nginx: bool, nginx_workers: int = 1) -> Env:
    env = Env(tmp)
    env.ports = {k: free_port() for k in ("up_json", "up_sse", "up_light", "edge", "nginx")}
    env.procs["up_json"] = start(
        "upstream-json",
        python_module("bench.upstream", "--port", str(env.ports["up_json"]), "--json-response"),
        log_dir=tmp,
    )
    env.procs["up_sse"] = start(
        "upstream-sse",
        python_module("bench.upstream", "--port", str(env.ports["up_sse"])),
        log_dir=tmp,
    )
    env.procs["up_light"] = start(
        "upstream-light",
        python_module("bench.light", "--port", str(env.ports["up_light"])),
        log_dir=tmp,
    )
    key = state_keys()
    conf = tmp / "gateway.yaml"
    conf_text = GATEWAY_CONF.format(
        port=env.ports["edge"],
        json_port=env.ports["up_json"],
        sse_port=env.ports["up_sse"],
        light_port=env.ports["up_light"],
    )
    if shutil.which("uv"):  # the legacy upstreams run mcp 1.x in an isolated environment
        from tests.support.legacy import legacy_python_command

        for name, extra in (("legacy_resume", ["--event-store"]), ("legacy_park", [])):
            env.ports[name] = free_port()
            env.procs[name] = start(
                name,
                legacy_python_command("legacy_server.py", "--port", str(env.ports[name]), *extra),
                log_dir=tmp,
            )
        conf_text += LEGACY_ROUTES.format(
            resume_port=env.ports["legacy_resume"], park_port=env.ports["legacy_park"]
        )
    conf.write_text(conf_text)
    env.procs["edge"] = start(
        "mcp-edge",
        [
            *venv_command("mcp-edge"),
            "serve",
            "--config",
            str(conf),
            "--port",
            str(env.ports["edge"]),
            "--anonymous",
        ],
        log_dir=tmp,
        env={"MCP_EDGE_STATE_KEYS": key},
    )
    if with_nginx:
        nconf = tmp / "nginx.conf"
        nconf.write_text(
            NGINX_CONF.format(
                tmp=tmp,
                port=env.ports["nginx"],
                json_port=env.ports["up_json"],
                sse_port=env.ports["up_sse"],
                light_port=env.ports["up_light"],
                workers=nginx_workers,
            )
        )
        env.procs["nginx"] = start(
            "nginx",
            [NGINX, "-p", str(tmp), "-c", str(nconf), "-e", str(tmp / "nginx-error.log")],
            log_dir=tmp,
        )
    try:
        wait_http(env.procs["up_json"], env.ports["up_json"], "/mcp")
        wait_http(env.procs["up_sse"], env.ports["up_sse"], "/mcp")
        wait_http(env.procs["up_light"], env.ports["up_light"], "/mcp")
        for name in ("legacy_resume", "legacy_park"):
            if name in env.procs:
                wait_http(env.procs[name], env.ports[name], "/stats", ok=(200,), timeout=120)
        wait_http(env.procs["edge"], env.ports["edge"], "/readyz", ok=(200,))
        if with_nginx:
            wait_http(env.procs["nginx"], env.ports["nginx"], "/nginx-alive")
            env.nginx_workers = children(env.procs["nginx"].pid)
    except Exception:
        env.stop()
        raise
    return env


# ---------------------------------------------------------------------------- statistics


def percentile(sorted_values: list[int], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[k] / 1000.0  # µs -> ms


def machine_busy() -> float:
    """CPU seconds all cores spent not idle since boot (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    ticks = [int(x) for x in parts]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def wait_quiet(
    max_wait: float, threshold: float = 0.15, sample_s: float = 0.5
) -> tuple[float, float]:
    """Wait (at most ``max_wait`` s) until the machine's other work uses less than ``threshold`` of
    its CPUs, measured over ``sample_s``. Returns (seconds waited, last busy share)."""
    waited = 0.0
    cores = os.cpu_count() or 1
    while True:
        b0, t0 = machine_busy(), time.monotonic()
        time.sleep(sample_s)
        share = (machine_busy() - b0) / (time.monotonic() - t0) / cores
        if share < threshold or waited >= max_wait:
            return waited, share
        waited += sample_s


class QuietWaits:
    """Before each run, wait up to ``per_run`` s for other work on the machine to calm down, but
    never more than ``budget`` s in all."""

    def __init__(self, per_run: float, budget: float) -> None:
        self.per_run = per_run
        self.left = budget

    def __call__(self) -> None:
        if self.per_run and self.left > 0:
            waited, _ = wait_quiet(min(self.per_run, self.left))
            self.left -= waited


def interleaved_plan(
    workload: str, clients: str, *, quick: bool, duration: float, repeats: int
) -> Plan:
    """One workload at the given client counts (``"1,16"``), rounds interleaved; ``quick``: one
    short round, no waiting for a quiet machine."""
    return Plan(
        [workload],
        [int(c) for c in clients.split(",")],
        duration=0.3 if quick else duration,
        warmup=0.05 if quick else 0.6,
        repeats=1 if quick else repeats,
        calibration_s=0,
        quick=quick,
        quiet_wait_s=0 if quick else 10.0,
        quiet_budget_s=0 if quick else 150.0,
    )


def interleaved_report(plan: Plan, **fields: Any) -> dict[str, Any]:
    """The head of an interleaved benchmark's report (when, which mode, the machine, the plan,
    the tree measured), then ``fields``."""
    return {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if plan.quick else "full",
        "machine": machine_info(),
        "plan": {
            "workload": plan.workloads[0],
            "clients": plan.concurrency,
            "duration_s": plan.duration,
            "repeats": plan.repeats,
        },
        "tree": tree_info(),
        **fields,
    }


def measured_run(gen: LoadGen, plan: Plan, quiet: QuietWaits, **spec: Any) -> dict[str, Any]:
    """One run of the load generator (``spec``: where, what, how many clients, whose CPU), for
    the plan's warm-up and duration, after ``quiet``. Adds ``other_cpu_s``: everything else the
    machine did during the run (other jobs), a noise indicator."""
    quiet()
    busy0, t0 = machine_busy(), time.monotonic()
    r = gen.run(**spec, duration=plan.duration, warmup=plan.warmup)
    busy, span = machine_busy() - busy0, time.monotonic() - t0
    # busy spans warm-up + window + drain, so scale it to the window first.
    ours = sum(v or 0.0 for v in r["cpu_s"].values()) + r["loadgen_cpu_s"]
    r["other_cpu_s"] = max(0.0, busy * plan.duration / span - ours)
    return r


def interleaved_runs(
    gen: LoadGen, plan: Plan, ways: Sequence[str], spec: Callable[[str, str], dict[str, Any]]
) -> Iterator[tuple[str, int, int, str, dict[str, Any]]]:
    """The plan's runs, interleaved: for each workload and client count, ``plan.repeats`` rounds
    that each run every way once, back to back, starting one way further on at each round (so a
    noisy moment of the machine hits every way alike). ``spec(way, workload)``: where a run goes
    and whose CPU it counts. Yields (workload, clients, round, way, run), each run once it is
    measured."""
    rotation = 0
    quiet = QuietWaits(plan.quiet_wait_s, plan.quiet_budget_s)
    for workload in plan.workloads:
        for clients in plan.concurrency:
            for round_ in range(plan.repeats):
                shift = rotation % len(ways)
                rotation += 1
                for way in [*ways[shift:], *ways[:shift]]:
                    r = measured_run(
                        gen,
                        plan,
                        quiet,
                        **spec(way, workload),
                        workload=workload,
                        concurrency=clients,
                    )
                    yield workload, clients, round_, way, r


def round_summary(r: dict[str, Any], round_: int) -> dict[str, Any]:
    """One round's own figures, kept beside its merged cell: ops/s, p50 and CPU ms per call (of
    what ``proxy_cpu_s`` counts)."""
    return {
        "round": round_,
        "ops_per_s": round(r["ops"] / r["window_s"], 1) if r["window_s"] else None,
        "p50_ms": percentile(sorted(r["latencies_us"]), 0.50),
        "cpu_ms_per_call": round(r["proxy_cpu_s"] / r["ops"] * 1000, 4) if r["ops"] else None,
    }


def interleaved_cells(
    runs: dict[tuple[int, str], list[dict[str, Any]]], renamed: dict[str, str | None] | None = None
) -> dict[str, dict[str, Any]]:
    """Per client count and way, its rounds merged (``summarize``), the merged figures renamed as
    ``renamed`` says (to None: left out), then each round's own ``summary``."""
    out: dict[str, dict[str, Any]] = {}
    for (clients, way), cells in runs.items():
        cell = summarize(cells)
        for old, new in (renamed or {}).items():
            value = cell.pop(old, None)
            if new is not None:
                cell[new] = value
        cell["rounds"] = [c["summary"] for c in cells]
        out.setdefault(str(clients), {})[way] = cell
    return out


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge the repetitions of one (workload, clients, target) cell."""
    lat = sorted(v for c in cells for v in c["latencies_us"])
    window = sum(c["window_s"] for c in cells)
    ops = sum(c["ops"] for c in cells)
    proxy_cpu = [c["proxy_cpu_s"] for c in cells if c.get("proxy_cpu_s") is not None]
    up_cpu = [c["upstream_cpu_s"] for c in cells if c.get("upstream_cpu_s") is not None]
    return {
        "ops": ops,
        "window_s": round(window, 3),
        "ops_per_s": round(ops / window, 1) if window else None,
        "http_requests_per_s": round(sum(c["http_requests"] for c in cells) / window, 1)
        if window
        else None,
        "p50_ms": percentile(lat, 0.50),
        "p90_ms": percentile(lat, 0.90),
        "p99_ms": percentile(lat, 0.99),
        "mean_ms": round(sum(lat) / len(lat) / 1000.0, 3) if lat else None,
        "samples": len(lat),
        "errors": sum(c["errors"] for c in cells),
        "error_samples": [s for c in cells for s in c["error_samples"]][:5],
        "proxy_cpu_s_per_1k_ops": round(sum(proxy_cpu) / ops * 1000, 4)
        if proxy_cpu and ops
        else None,
        "upstream_cpu_s_per_1k_ops": round(sum(up_cpu) / ops * 1000, 4) if up_cpu and ops else None,
        "loadgen_cpu_s_per_1k_ops": round(sum(c["loadgen_cpu_s"] for c in cells) / ops * 1000, 4)
        if ops
        else None,
        "other_cpu_share": round(
            sum(c["other_cpu_s"] for c in cells) / window / (os.cpu_count() or 1), 3
        )
        if window
        else None,
    }


# ---------------------------------------------------------------------------- phases


def machine_info() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for pkg in (
        "mcp",
        "httpx",
        "httpcore",
        "uvicorn",
        "uvloop",
        "httptools",
        "starlette",
        "anyio",
        "orjson",
        "cryptography",
        "PyJWT",
        "prometheus-client",
    ):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    nginx = None
    if Path(NGINX).exists():
        out = subprocess.run([NGINX, "-v"], capture_output=True, text=True)
        nginx = (out.stderr or out.stdout).strip().split("/")[-1]
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    commit = None
    try:
        repo = Path(__file__).resolve().parents[1]
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "mcp_edge"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        commit = (head + ("+local changes in mcp_edge/" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "commit": commit,
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "nginx": nginx,
        "versions": versions,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def calibrate(gen: LoadGen, tmp: Path, plan: Plan, log: Any) -> dict[str, Any]:
    """What the load generator can do against a trivial server (its own ceiling)."""
    port = free_port()
    proc = start("trivial", python_module("bench.trivial", "--port", str(port)), log_dir=tmp)
    out: dict[str, Any] = {}
    try:
        wait_http(proc, port, "/")
        for clients in (1, 16):
            r = gen.run(
                host="127.0.0.1",
                port=port,
                json_path="/mcp",
                sse_path="/mcp",
                workload="small_call",
                concurrency=clients,
                duration=plan.calibration_s,
                warmup=0.2,
                pids=[proc.pid],
            )
            lat = sorted(r["latencies_us"])
            out[f"loadgen_c{clients}"] = {
                "req_per_s": round(r["ops"] / r["window_s"], 1),
                "p50_ms": percentile(lat, 0.5),
                "p99_ms": percentile(lat, 0.99),
                "errors": r["errors"],
                "loadgen_cpu_us_per_req": round(r["loadgen_cpu_s"] / max(r["ops"], 1) * 1e6, 1),
            }
            log(
                f"  loadgen vs trivial server, {clients} clients: {out[f'loadgen_c{clients}']['req_per_s']:.0f} req/s"
            )
        wrk = shutil.which("wrk")
        if wrk and not plan.quick:
            out["wrk_c16"] = run_wrk(wrk, port, tmp, plan.calibration_s)
            log(
                f"  wrk (1 thread) vs trivial server, 16 connections: {out['wrk_c16'].get('req_per_s')} req/s"
            )
    finally:
        proc.stop()
    return out


def run_wrk(wrk: str, port: int, tmp: Path, seconds: float) -> dict[str, Any]:
    script = tmp / "post.lua"
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "small", "arguments": {}},
        }
    )
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["MCP-Protocol-Version"] = "2026-07-28"\n'
    )
    out = subprocess.run(
        [
            wrk,
            "-t1",
            "-c16",
            f"-d{max(1, round(seconds))}s",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/mcp",
        ],
        capture_output=True,
        text=True,
    )
    for line in out.stdout.splitlines():
        if line.startswith("Requests/sec:"):
            return {"req_per_s": float(line.split()[1])}
    return {"error": out.stdout[-500:] + out.stderr[-500:]}


def run_matrix(gen: LoadGen, env: Env, plan: Plan, targets: list[str], log: Any) -> dict[str, Any]:
    raw: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    up_pids = {
        "json": env.procs["up_json"].pid,
        "sse": env.procs["up_sse"].pid,
        "cached": env.procs["up_json"].pid,
        "policy": env.procs["up_json"].pid,
        "light": env.procs["up_light"].pid,
    }

    def proxy_pids(target: str) -> list[int]:
        if target == "edge":
            return [env.procs["edge"].pid]
        if target == "nginx":
            return [env.procs["nginx"].pid, *env.nginx_workers]
        return []

    def spec(target: str, workload: str) -> dict[str, Any]:
        pids = [*proxy_pids(target), up_pids[w.WORKLOADS[workload][2]]]
        return {**env.spec(target, workload), "pids": pids}

    for workload, clients, _, target, r in interleaved_runs(gen, plan, targets, spec):
        route = w.WORKLOADS[workload][2]
        proxy = proxy_pids(target)
        cpu = r["cpu_s"]
        r["proxy_cpu_s"] = sum(cpu[str(p)] or 0.0 for p in proxy) if proxy else None
        r["upstream_cpu_s"] = cpu.get(str(up_pids[route]))
        raw.setdefault((workload, clients, target), []).append(r)
        lat = sorted(r["latencies_us"])
        log(
            f"  {workload:13s} c={clients:<3d} {target:6s} {r['ops'] / r['window_s']:8.1f} ops/s "
            f"p50 {percentile(lat, 0.5) or 0:7.2f} ms  p99 {percentile(lat, 0.99) or 0:7.2f} ms"
            + (f"  errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
        )
    out: dict[str, Any] = {}
    for (workload, clients, target), cells in raw.items():
        out.setdefault(workload, {}).setdefault(str(clients), {})[target] = summarize(cells)
    for by_clients in out.values():
        for row in by_clients.values():
            row["compare"] = compare(row)
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _diff(a: float | None, b: float | None) -> float | None:
    return round(a - b, 3) if a is not None and b is not None else None


def compare(row: dict[str, Any]) -> dict[str, Any]:
    d, e, n = row.get("direct", {}), row.get("edge", {}), row.get("nginx", {})
    return {
        "edge_overhead_p50_ms": _diff(e.get("p50_ms"), d.get("p50_ms")),
        "edge_overhead_p99_ms": _diff(e.get("p99_ms"), d.get("p99_ms")),
        "edge_overhead_mean_ms": _diff(e.get("mean_ms"), d.get("mean_ms")),
        "nginx_overhead_p50_ms": _diff(n.get("p50_ms"), d.get("p50_ms")),
        "throughput_edge_over_direct": _ratio(e.get("ops_per_s"), d.get("ops_per_s")),
        "throughput_edge_over_nginx": _ratio(e.get("ops_per_s"), n.get("ops_per_s")),
        "p50_edge_over_direct": _ratio(e.get("p50_ms"), d.get("p50_ms")),
        "p50_edge_over_nginx": _ratio(e.get("p50_ms"), n.get("p50_ms")),
    }


def policy_comparison(results: dict[str, Any]) -> dict[str, Any]:
    """A small ``tools/call`` through the route with ten policy rules against the same call through
    the route without rules, per client count (both through the gateway, in the same run)."""
    out: dict[str, Any] = {}
    for clients, row in results.get("small_call_policy", {}).items():
        ruled = row.get("edge", {})
        plain = results.get("small_call", {}).get(clients, {}).get("edge", {})
        out[clients] = {
            "ops_per_s": {"rules": ruled.get("ops_per_s"), "no_rules": plain.get("ops_per_s")},
            "p50_ms": {"rules": ruled.get("p50_ms"), "no_rules": plain.get("p50_ms")},
            "p99_ms": {"rules": ruled.get("p99_ms"), "no_rules": plain.get("p99_ms")},
            "edge_cpu_s_per_1k_ops": {
                "rules": ruled.get("proxy_cpu_s_per_1k_ops"),
                "no_rules": plain.get("proxy_cpu_s_per_1k_ops"),
            },
            "rules_over_no_rules": _ratio(ruled.get("ops_per_s"), plain.get("ops_per_s")),
            "added_p50_ms": _diff(ruled.get("p50_ms"), plain.get("p50_ms")),
            "cpu_rules_over_no_rules": _ratio(
                ruled.get("proxy_cpu_s_per_1k_ops"), plain.get("proxy_cpu_s_per_1k_ops")
            ),
        }
    return out


def _cell(results: dict[str, Any], workload: str, clients: int, target: str) -> dict[str, Any]:
    return results.get(workload, {}).get(str(clients), {}).get(target, {})


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The performance goals, each read off this run: what was measured, the bound, met or not.

    CPU per small call against nginx's; added p50 at one client; throughput against direct at 16
    clients on the light upstream; an MRTR round trip against two plain calls; SSE and large
    bodies against direct (reported for regressions, no fixed bound)."""
    out: list[dict[str, Any]] = []

    def add(
        goal: str,
        workload: str,
        clients: int,
        value: float | None,
        bound: float | None,
        le: bool = True,
    ) -> None:
        met = None if value is None or bound is None else (value <= bound if le else value >= bound)
        out.append(
            {
                "goal": goal,
                "workload": workload,
                "clients": clients,
                "value": value,
                "bound": bound,
                "met": met,
            }
        )

    for workload in ("small_call", "small_call_light"):
        for clients in (1, 16):
            e, n = (
                _cell(results, workload, clients, "edge"),
                _cell(results, workload, clients, "nginx"),
            )
            add(
                "edge CPU per call ÷ nginx's",
                workload,
                clients,
                _ratio(e.get("proxy_cpu_s_per_1k_ops"), n.get("proxy_cpu_s_per_1k_ops")),
                2.5,
            )
    for workload in ("small_call", "small_call_light"):
        e, d = _cell(results, workload, 1, "edge"), _cell(results, workload, 1, "direct")
        add("added p50 at 1 client (ms)", workload, 1, _diff(e.get("p50_ms"), d.get("p50_ms")), 0.5)
    for workload in ("small_call_light", "small_call"):
        e, d = _cell(results, workload, 16, "edge"), _cell(results, workload, 16, "direct")
        add(
            "throughput ÷ direct at 16 clients",
            workload,
            16,
            _ratio(e.get("ops_per_s"), d.get("ops_per_s")),
            0.8,
            le=False,
        )
    for clients in (1, 16):
        m, sc = (
            _cell(results, "mrtr", clients, "edge"),
            _cell(results, "small_call", clients, "edge"),
        )
        two = sc.get("proxy_cpu_s_per_1k_ops")
        add(
            "MRTR round trip CPU ÷ two small calls'",
            "mrtr",
            clients,
            _ratio(m.get("proxy_cpu_s_per_1k_ops"), 2 * two if two else None),
            1.5,
        )
    for workload in ("sse_progress", "big_call"):
        for clients in (1, 16):
            e, d = (
                _cell(results, workload, clients, "edge"),
                _cell(results, workload, clients, "direct"),
            )
            add(
                "throughput ÷ direct (regressions)",
                workload,
                clients,
                _ratio(e.get("ops_per_s"), d.get("ops_per_s")),
                None,
            )
    return [g for g in out if g["value"] is not None]


def cache_comparison(results: dict[str, Any]) -> dict[str, Any]:
    """``tools/list`` through the gateway with the edge cache, against the same without it (the
    ``tools_list`` workload's edge path) and against direct, per client count."""
    out: dict[str, Any] = {}
    for clients, row in results.get("tools_list_cached", {}).items():
        cached = row.get("edge", {})
        uncached = results.get("tools_list", {}).get(clients, {}).get("edge", {})
        direct = row.get("direct", {})
        out[clients] = {
            "ops_per_s": {
                "cached": cached.get("ops_per_s"),
                "uncached": uncached.get("ops_per_s"),
                "direct": direct.get("ops_per_s"),
            },
            "p50_ms": {
                "cached": cached.get("p50_ms"),
                "uncached": uncached.get("p50_ms"),
                "direct": direct.get("p50_ms"),
            },
            "p99_ms": {
                "cached": cached.get("p99_ms"),
                "uncached": uncached.get("p99_ms"),
                "direct": direct.get("p99_ms"),
            },
            "edge_cpu_s_per_1k_ops": {
                "cached": cached.get("proxy_cpu_s_per_1k_ops"),
                "uncached": uncached.get("proxy_cpu_s_per_1k_ops"),
            },
            "cached_over_uncached": _ratio(cached.get("ops_per_s"), uncached.get("ops_per_s")),
            "cached_over_direct": _ratio(cached.get("ops_per_s"), direct.get("ops_per_s")),
        }
    return out


def bridge_comparison(
    gen: LoadGen, env: Env, plan: Plan, results: dict[str, Any], log: Any
) -> dict[str, Any]:
    """A 2026-07-28 client's MRTR flow (one question) against a legacy server through the bridge,
    next to the same flow against a modern server through the gateway (the matrix's ``mrtr``
    edge cells), per client count. Only the gateway can serve it, so there is no direct path."""
    if "legacy_resume" not in env.procs:
        log("uv not found: the legacy bridge comparison is skipped")
        return {}
    raw: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for clients in plan.concurrency:
        for _ in range(plan.repeats):
            for workload in w.BRIDGE_WORKLOADS:
                upstream = env.procs[w.BRIDGE_WORKLOADS[workload][2]]
                pids = [env.procs["edge"].pid, upstream.pid, *children(upstream.pid)]
                # A bridged flow takes tens of ms: even a smoke run needs a window that holds some.
                r = gen.run(
                    **env.spec("edge", workload),
                    workload=workload,
                    concurrency=clients,
                    duration=max(plan.duration, 1.0),
                    warmup=max(plan.warmup, 0.2),
                    pids=pids,
                )
                r["proxy_cpu_s"] = r["cpu_s"].get(str(env.procs["edge"].pid))
                r["upstream_cpu_s"] = sum(
                    v or 0.0 for k, v in r["cpu_s"].items() if k != str(env.procs["edge"].pid)
                )
                r["other_cpu_s"] = 0.0
                raw.setdefault((workload, clients), []).append(r)
                lat = sorted(r["latencies_us"])
                log(
                    f"  {workload:18s} c={clients:<3d} edge   {r['ops'] / r['window_s']:8.1f} ops/s "
                    f"p50 {percentile(lat, 0.5) or 0:7.2f} ms"
                    + (f"  errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
                )
    out: dict[str, Any] = {}
    for (workload, clients), cells in raw.items():
        out.setdefault(str(clients), {})[workload] = summarize(cells)
    for clients, row in out.items():
        modern = results.get("mrtr", {}).get(clients, {}).get("edge", {})
        row["mrtr_modern"] = modern
        for workload in w.BRIDGE_WORKLOADS:
            cell = row[workload]
            cell["ops_over_modern"] = _ratio(cell.get("ops_per_s"), modern.get("ops_per_s"))
            cell["edge_cpu_over_modern"] = _ratio(
                cell.get("proxy_cpu_s_per_1k_ops"), modern.get("proxy_cpu_s_per_1k_ops")
            )
    return out


def soak(gen: LoadGen, env: Env, seconds: float, log: Any, clients: int = 16) -> dict[str, Any]:
    """Sustained small calls through the gateway; RSS sampled between slices."""
    pid = env.procs["edge"].pid
    samples = [{"t_s": 0.0, "rss_bytes": rss_bytes(pid)}]
    ops = errors = 0
    started = time.monotonic()
    slice_s = min(10.0, seconds)
    while time.monotonic() - started < seconds:
        r = gen.run(
            **env.spec("edge", "small_call"),
            workload="small_call",
            concurrency=clients,
            duration=slice_s,
            warmup=0.0,
            pids=[pid],
        )
        ops += r["ops"]
        errors += r["errors"]
        samples.append({"t_s": round(time.monotonic() - started, 1), "rss_bytes": rss_bytes(pid)})
        log(
            f"  soak t={samples[-1]['t_s']:6.1f}s  {r['ops'] / r['window_s']:7.1f} req/s  "
            f"RSS {samples[-1]['rss_bytes'] / 2**20:6.1f} MiB"
        )
    elapsed = time.monotonic() - started
    return {
        "seconds": round(elapsed, 1),
        "clients": clients,
        "requests": ops,
        "errors": errors,
        "req_per_s": round(ops / elapsed, 1),
        "rss_start_bytes": samples[0]["rss_bytes"],
        "rss_end_bytes": samples[-1]["rss_bytes"],
        "rss_max_bytes": max(s["rss_bytes"] or 0 for s in samples),
        "samples": samples,
    }


# ---------------------------------------------------------------------------- report


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "–" if v is None else fmt.format(v)


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"# mcp-edge benchmark ({report['mode']}, {report['finished_at']})",
        "",
        f"Machine: {m['cores']} cores, {m['cpu_model']}, Python {m['python']}, kernel {m['kernel']}, "
        f"nginx {m['nginx'] or 'not installed'}. mcp {m['versions'].get('mcp')}, httpx {m['versions'].get('httpx')}, "
        f"uvicorn {m['versions'].get('uvicorn')}. Gateway at commit {m.get('commit') or 'unknown'}.",
        f"Each cell: {report['plan']['repeats']} interleaved run(s) of {report['plan']['duration_s']} s "
        f"(after {report['plan']['warmup_s']} s warm-up). One op is one HTTP request, except `mrtr`: "
        "round 1 + the retry with the state (2 requests). Latency in ms; CPU in seconds per 1000 ops.",
        "",
        "| workload | clients | ops/s direct | ops/s edge | ops/s nginx | p50 direct / edge / nginx | "
        "p99 direct / edge / nginx | edge overhead p50 (b−a) | edge overhead p99 | ops/s b/a | ops/s b/c | "
        "p50 b/a | edge CPU s/1k | nginx CPU s/1k | upstream CPU s/1k (direct) | errors | other load |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for workload, by_clients in report["results"].items():
        for clients, row in by_clients.items():
            d, e, n, c = (
                row.get("direct", {}),
                row.get("edge", {}),
                row.get("nginx", {}),
                row["compare"],
            )
            errs = sum(row.get(t, {}).get("errors", 0) for t in TARGETS)
            other = max((row.get(t, {}).get("other_cpu_share") or 0.0) for t in TARGETS)
            lines.append(
                f"| {workload} | {clients} | {_f(d.get('ops_per_s'), '{:.0f}')} | {_f(e.get('ops_per_s'), '{:.0f}')} | "
                f"{_f(n.get('ops_per_s'), '{:.0f}')} | "
                f"{_f(d.get('p50_ms'))} / {_f(e.get('p50_ms'))} / {_f(n.get('p50_ms'))} | "
                f"{_f(d.get('p99_ms'))} / {_f(e.get('p99_ms'))} / {_f(n.get('p99_ms'))} | "
                f"{_f(c['edge_overhead_p50_ms'], '{:+.2f}')} | {_f(c['edge_overhead_p99_ms'], '{:+.2f}')} | "
                f"{_f(c['throughput_edge_over_direct'])} | {_f(c['throughput_edge_over_nginx'])} | "
                f"{_f(c['p50_edge_over_direct'])} | {_f(e.get('proxy_cpu_s_per_1k_ops'), '{:.3f}')} | "
                f"{_f(n.get('proxy_cpu_s_per_1k_ops'), '{:.3f}')} | {_f(d.get('upstream_cpu_s_per_1k_ops'), '{:.3f}')} | "
                f"{errs} | {other:.0%} |"
            )
    if report.get("goals"):
        lines += [
            "",
            "Goals, read off this run (`bench/results/layers.md` has where the time goes):",
            "",
            "| goal | workload | clients | measured | bound | met |",
            "|---|---|--:|--:|--:|---|",
        ]
        for g in report["goals"]:
            bound = "–" if g["bound"] is None else g["bound"]
            met = {True: "yes", False: "**no**", None: "–"}[g["met"]]
            lines.append(
                f"| {g['goal']} | {g['workload']} | {g['clients']} | {g['value']} | {bound} | {met} |"
            )
    for clients, c in (report.get("edge_cache") or {}).items():
        ops, p50 = c["ops_per_s"], c["p50_ms"]
        lines += [
            "",
            f"Edge cache, `tools/list` at {clients} clients: with the cache {_f(ops['cached'], '{:.0f}')} ops/s "
            f"(p50 {_f(p50['cached'])} ms), without it {_f(ops['uncached'], '{:.0f}')} ops/s "
            f"(p50 {_f(p50['uncached'])} ms), direct {_f(ops['direct'], '{:.0f}')} ops/s (p50 {_f(p50['direct'])} ms): "
            f"with/without {_f(c['cached_over_uncached'])}, with/direct {_f(c['cached_over_direct'])}.",
        ]
    for clients, row in (report.get("legacy_bridge") or {}).items():
        modern = row["mrtr_modern"]
        parts = []
        for workload, label in (("mrtr_legacy_resume", "resume"), ("mrtr_legacy_park", "park")):
            c = row[workload]
            parts.append(
                f"{label} {_f(c.get('ops_per_s'), '{:.0f}')} flows/s (p50 {_f(c.get('p50_ms'))} ms, "
                f"{_f(c.get('ops_over_modern'))} of modern, edge CPU {_f(c.get('proxy_cpu_s_per_1k_ops'), '{:.3f}')} "
                f"s/1k = {_f(c.get('edge_cpu_over_modern'))}x modern, errors {c.get('errors', 0)})"
            )
        lines += [
            "",
            f"Legacy bridge, MRTR flow (one question) at {clients} clients: modern server "
            f"{_f(modern.get('ops_per_s'), '{:.0f}')} flows/s (p50 {_f(modern.get('p50_ms'))} ms, edge CPU "
            f"{_f(modern.get('proxy_cpu_s_per_1k_ops'), '{:.3f}')} s/1k); legacy server "
            + "; ".join(parts)
            + ".",
        ]
    for clients, c in (report.get("policy") or {}).items():
        ops, p50, cpu = c["ops_per_s"], c["p50_ms"], c["edge_cpu_s_per_1k_ops"]
        lines += [
            "",
            f"Policy, small `tools/call` at {clients} clients: 10 rules {_f(ops['rules'], '{:.0f}')} ops/s "
            f"(p50 {_f(p50['rules'])} ms, {_f(cpu['rules'], '{:.3f}')} CPU s/1k), no rules "
            f"{_f(ops['no_rules'], '{:.0f}')} ops/s (p50 {_f(p50['no_rules'])} ms, "
            f"{_f(cpu['no_rules'], '{:.3f}')} CPU s/1k): throughput {_f(c['rules_over_no_rules'])}, "
            f"CPU {_f(c['cpu_rules_over_no_rules'])}.",
        ]
    g = report["gateway"]
    lines += [
        "",
        f"Gateway RSS: {_f((g.get('rss_start_bytes') or 0) / 2**20, '{:.1f}')} MiB at start, "
        f"{_f((g.get('rss_end_bytes') or 0) / 2**20, '{:.1f}')} MiB at the end.",
        "",
        "Load generator ceiling (against a trivial server): "
        + ", ".join(f"{k}: {v.get('req_per_s')} req/s" for k, v in report["calibration"].items())
        + ".",
        "",
        "| micro-benchmark | µs/op (median) | best |",
        "|---|--:|--:|",
    ]
    for name, value in report["micro"].items():
        if isinstance(value, dict):
            lines.append(f"| {name} | {value['median_us']:.1f} | {value['best_us']:.1f} |")
    if report.get("soak"):
        s = report["soak"]
        lines += [
            "",
            f"Soak: {s['seconds']} s of small calls at {s['clients']} clients through the gateway, "
            f"{s['req_per_s']} req/s, {s['errors']} errors; RSS {s['rss_start_bytes'] / 2**20:.1f} MiB → "
            f"{s['rss_end_bytes'] / 2**20:.1f} MiB (max {s['rss_max_bytes'] / 2**20:.1f} MiB).",
        ]
    if report.get("profile"):
        p = report["profile"]
        lines += [
            "",
            f"Profile (py-spy, small calls at 16 clients, {p.get('samples')} samples): see {p.get('summary_file')}.",
        ]
    if report["mode"] == "quick":
        lines += ["", "_Quick mode: a smoke run; the numbers carry no meaning._"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a few-seconds smoke run (no timing meaning)"
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="SECONDS",
        default=0.0,
        help="also run SECONDS of small calls through the gateway, reporting RSS",
    )
    parser.add_argument(
        "--no-matrix", action="store_true", help="skip the workload matrix (e.g. soak only)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile the gateway with py-spy"
    )
    parser.add_argument("--workloads", help=f"comma-separated subset of {','.join(w.WORKLOADS)}")
    parser.add_argument("--clients", help="comma-separated client counts (default 1,16,128)")
    parser.add_argument("--duration", type=float, help="seconds per run")
    parser.add_argument("--repeats", type=int, help="interleaved repetitions per cell")
    parser.add_argument("--no-nginx", action="store_true", help="skip the nginx path")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        metavar="SECONDS",
        help="before each run wait up to SECONDS for other work on the machine to calm "
        "down (default 10 in full mode, 0 in quick mode)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    # A plain SIGTERM would skip the clean-up below and leak the started processes.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    base = QUICK if args.quick else FULL
    plan = Plan(
        workloads=args.workloads.split(",") if args.workloads else list(base.workloads),
        concurrency=[int(x) for x in args.clients.split(",")]
        if args.clients
        else list(base.concurrency),
        duration=args.duration or base.duration,
        warmup=base.warmup,
        repeats=args.repeats or base.repeats,
        calibration_s=base.calibration_s,
        quick=base.quick,
        quiet_wait_s=base.quiet_wait_s if args.wait_quiet is None else args.wait_quiet,
        quiet_budget_s=base.quiet_budget_s if args.wait_quiet is None else 15 * args.wait_quiet,
    )
    for name in plan.workloads:
        if name not in w.WORKLOADS:
            parser.error(f"unknown workload {name!r}")
    with_nginx = not args.no_nginx and Path(NGINX).exists()
    targets = ["direct", "edge"] + (["nginx"] if with_nginx else [])
    started = time.monotonic()
    log = elapsed_log(started)

    report: dict[str, Any] = {
        "mode": "quick" if plan.quick else "full",
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "plan": {
            "workloads": plan.workloads,
            "clients": plan.concurrency,
            "duration_s": plan.duration,
            "warmup_s": plan.warmup,
            "repeats": plan.repeats,
            "targets": targets,
            "quiet_wait_s": plan.quiet_wait_s,
        },
        "workloads": {
            k: {"what": v[0], "http_requests_per_op": v[1]} for k, v in w.WORKLOADS.items()
        },
    }
    if not with_nginx:
        log(f"nginx not found at {NGINX} (or --no-nginx): the nginx path is skipped")

    log("micro-benchmarks")
    report["micro"] = micro.run(quick=plan.quick)
    with tempfile.TemporaryDirectory(prefix="mcp-edge-bench-") as tmpname:
        tmp = Path(tmpname)
        gen = LoadGen(tmp)
        env: Env | None = None
        try:
            log("calibrating the load generator")
            report["calibration"] = calibrate(gen, tmp, plan, log)
            log("starting upstreams, gateway" + (", nginx" if with_nginx else ""))
            env = start_env(tmp, with_nginx=with_nginx)
            edge_pid = env.procs["edge"].pid
            report["gateway"] = {
                "rss_start_bytes": rss_bytes(edge_pid),
                "cpu_s_at_start": cpu_seconds(edge_pid),
            }
            if not args.no_matrix:
                log("workload matrix")
                report["results"] = run_matrix(gen, env, plan, targets, log)
                report["edge_cache"] = cache_comparison(report["results"])
                log("legacy bridge: MRTR flow against 2025-era servers")
                report["legacy_bridge"] = bridge_comparison(gen, env, plan, report["results"], log)
                report["policy"] = policy_comparison(report["results"])
                report["goals"] = goals(report["results"])
            else:
                report["results"] = {}
            if args.soak > 0:
                log(f"soak, {args.soak:.0f} s")
                report["soak"] = soak(gen, env, args.soak, log)
            if args.profile:
                from bench.profile import profile_gateway

                log("profiling the gateway (py-spy)")
                report["profile"] = profile_gateway(gen, env, args.out_dir, plan, log, tmp_dir=tmp)
            report["gateway"]["rss_end_bytes"] = rss_bytes(edge_pid)
            report["gateway"]["cpu_s_at_end"] = cpu_seconds(edge_pid)
            if not env.procs["edge"].running:
                raise RuntimeError(f"the gateway died:\n{env.procs['edge'].log_tail()}")
            report["gateway"]["log_tail"] = env.procs["edge"].log_tail(2000)
        finally:
            gen.close()
            if env is not None:
                env.stop()
    report["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    report["elapsed_s"] = round(time.monotonic() - started, 1)
    report["machine"]["loadavg_at_end"] = Path("/proc/loadavg").read_text().split()[:3]

    write_report(args.out_dir, "latest", report, markdown(report))
    log(f"wrote {args.out_dir / 'latest.json'} and {args.out_dir / 'latest.md'}")
    return 0
