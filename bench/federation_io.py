"""A route with members, over real sockets: five member servers, one gateway, side by side with
the direct path and a single-upstream route, in one interleaved run.

Members: five processes of ``python -m bench.federation_io member`` (a bare ASGI app on uvicorn
with uvloop and httptools, no SDK): each lists 20 tools with descriptions and input schemas
(``cacheScope: public``, ``ttlMs: 60000`` on ``/mcp``; ``ttlMs: 0`` on ``/nocache/mcp``), answers
``tools/call`` of ``small`` with a tiny result and ``server/discover`` as a 2026-07-28 server.
``m5`` answers its lists 200 ms late (``--list-delay-ms 200``).

The gateway (``mcp-edge serve``, one process) has these routes:

| route | what |
|---|---|
| `/one/mcp` | `m1` as a single-upstream route (`era: modern`) |
| `/fed4/mcp` | members `m1`..`m4` (all fast) |
| `/fed/mcp` | members `m1`..`m5`, `m5` with `list_timeout_ms: 100` (its deadline is shorter than its delay) |
| `/fedwait/mcp` | members `m1`..`m5`, `m5` with the default deadline (2 s): the list waits for it |
| `/fedhit/mcp` | as `/fedwait/mcp`, with the edge cache on: after the first list every part is a hit |
| `/fedmiss/mcp` | as `/fedhit/mcp`, members reached at `/nocache/mcp` (`ttlMs: 0`): every part a miss |

Measured, each cell a closed loop of keep-alive clients in this process (every answer checked:
status, the request's id, what it holds; the first answer of every cell parsed whole: the
number of tools and the missing members):

(a) ``tools/list`` latency: direct to ``m1``, ``/one``, ``/fed4``, ``/fed`` (the slow member cut
    off at its deadline: the list is answered without it), ``/fedwait`` (the list waits for it);
(b) ``tools/list`` on ``/fedhit`` (every member's part from the edge cache) against ``/fedmiss``;
(c) ``tools/call`` of ``m1__small`` on ``/fed`` against ``small`` on ``/one`` (and direct):
    the gateway's CPU per call (``/proc``, at the edges of each window), and the ratio.

Rounds are interleaved (each round runs every cell once, in a rotating order); ratios are also
computed round by round (their spread is the noise).

    uv run python -m bench.federation_io [--quick] [--duration 3] [--repeats 3]

Writes ``bench/results/federation-io.json`` and ``federation-io.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import run as b
from bench.loadgen import Conn, cpu_seconds
from bench.procs import (
    ManagedProcess,
    free_port,
    python_module,
    start,
    state_keys,
    venv_command,
    wait_http,
)
from bench.report import elapsed_log, spread, spread_text, tree_info, tree_line, write_report
from bench.workloads import BadAnswer, _meta

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MEMBERS = ("m1", "m2", "m3", "m4", "m5")
SLOW = "m5"
SLOW_MS = 200
DEADLINE_MS = 100
TOOLS_PER_MEMBER = 20
MODERN = "2026-07-28"

# ---------------------------------------------------------------------------- the member server


def _tools(member: str) -> list[dict[str, Any]]:
    return [
        {
            "name": "small" if i == 0 else f"{member}_tool_{i}",
            "description": f"Tool {i} of {member}: does one small thing and says so.",
            "inputSchema": {
                "type": "object",
                "properties": {"q": {"type": "string", "description": "what to look for"}},
                "required": ["q"] if i else [],
            },
        }
        for i in range(TOOLS_PER_MEMBER)
    ]


class MemberApp:
    """A fake but complete 2026-07-28 member: lists, one tool, discover; lists ``delay`` late."""

    def __init__(self, name: str, delay: float) -> None:
        self.delay = delay
        tools = _tools(name)
        self.lists = {
            ttl: {"tools": tools, "ttlMs": ttl, "cacheScope": "public", "resultType": "complete"}
            for ttl in (60_000, 0)
        }
        self.small = {
            "content": [{"type": "text", "text": "ok"}],
            "structuredContent": {"result": "ok"},
            "isError": False,
            "resultType": "complete",
        }
        self.discover = {
            "supportedVersions": [MODERN],
            "capabilities": {"tools": {"listChanged": False}},
            "instructions": f"The {name} server.",
            "ttlMs": 60_000,
            "cacheScope": "public",
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": name, "version": "1"}},
        }

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            doc = orjson.loads(b"".join(parts))
            rid, method = doc.get("id"), doc.get("method")
        except (orjson.JSONDecodeError, AttributeError):
            rid, method = None, None
        if method == "tools/list":
            if self.delay:
                await asyncio.sleep(self.delay)
            ttl = 0 if scope["path"].startswith("/nocache") else 60_000
            out: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "result": self.lists[ttl]}
        elif method in ("prompts/list", "resources/list", "resources/templates/list"):
            key = {"prompts/list": "prompts", "resources/list": "resources"}.get(
                method, "resourceTemplates"
            )
            if self.delay:
                await asyncio.sleep(self.delay)
            out = {"jsonrpc": "2.0", "id": rid, "result": {key: [], "resultType": "complete"}}
        elif method == "tools/call":
            out = {"jsonrpc": "2.0", "id": rid, "result": self.small}
        elif method == "server/discover":
            out = {"jsonrpc": "2.0", "id": rid, "result": self.discover}
        else:
            out = {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {"code": -32601, "message": "Method not found"},
            }
        body = orjson.dumps(out)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def serve_member(name: str, port: int, delay_ms: int) -> None:
    import uvicorn

    uvicorn.run(
        MemberApp(name, delay_ms / 1000),
        host="127.0.0.1",
        port=port,
        loop="uvloop",
        http="httptools",
        access_log=False,
        log_level="warning",
        lifespan="off",
        backlog=4096,
    )


# ---------------------------------------------------------------------------- the gateway

CONF = """\
listen: {{host: 127.0.0.1, port: {port}}}
logging: {{level: warning, format: json, access_log: false}}
routes:
  - {{name: one, path: /one/mcp, upstream: "{m1}/mcp", era: modern}}
  - name: fed4
    path: /fed4/mcp
    members:
{fast}
  - name: fed
    path: /fed/mcp
    members:
{cut}
  - name: fedwait
    path: /fedwait/mcp
    members:
{wait}
  - name: fedhit
    path: /fedhit/mcp
    cache: {{enabled: true}}
    members:
{wait}
  - name: fedmiss
    path: /fedmiss/mcp
    cache: {{enabled: true}}
    members:
{nocache}
"""


def gateway_config(port: int, urls: dict[str, str]) -> str:
    def members(names: tuple[str, ...], path: str = "/mcp", cut: bool = False) -> str:
        lines = []
        for name in names:
            extra = f", list_timeout_ms: {DEADLINE_MS}" if cut and name == SLOW else ""
            lines.append(
                f'      - {{name: {name}, upstream: "{urls[name]}{path}", era: modern{extra}}}'
            )
        return "\n".join(lines)

    return CONF.format(
        port=port,
        m1=urls["m1"],
        fast=members(MEMBERS[:4]),
        cut=members(MEMBERS, cut=True),
        wait=members(MEMBERS),
        nocache=members(MEMBERS, "/nocache/mcp"),
    )


# ---------------------------------------------------------------------------- the cells


@dataclass(frozen=True)
class Cell:
    name: str
    part: str  # "a", "b", "c"
    target: str  # "direct" (m1) or "gateway"
    path: str
    method: str  # "tools/list" or "tools/call"
    tool: str | None
    tools: int  # tools a list answer holds
    missing: tuple[str, ...] = ()  # members a list answer says are missing
    label: str = ""


N = TOOLS_PER_MEMBER
CELLS = (
    Cell("list direct", "a", "direct", "/mcp", "tools/list", None, N, label="direct to m1"),
    Cell("list one", "a", "gateway", "/one/mcp", "tools/list", None, N, label="single-upstream route (m1)"),
    Cell("list fed4", "a", "gateway", "/fed4/mcp", "tools/list", None, 4 * N, label="4 fast members"),
    Cell(
        "list fed",
        "a",
        "gateway",
        "/fed/mcp",
        "tools/list",
        None,
        4 * N,
        (SLOW,),
        label=f"5 members, {SLOW} ({SLOW_MS} ms late) cut at its {DEADLINE_MS} ms deadline",
    ),
    Cell(
        "list fedwait",
        "a",
        "gateway",
        "/fedwait/mcp",
        "tools/list",
        None,
        5 * N,
        label=f"5 members, the list waits for {SLOW} (deadline 2 s)",
    ),
    Cell("list hit", "b", "gateway", "/fedhit/mcp", "tools/list", None, 5 * N, label="5 members, every part an edge-cache hit"),
    Cell("list miss", "b", "gateway", "/fedmiss/mcp", "tools/list", None, 5 * N, label="5 members, every part an edge-cache miss"),
    Cell("call direct", "c", "direct", "/mcp", "tools/call", "small", 0, label="direct to m1"),
    Cell("call one", "c", "gateway", "/one/mcp", "tools/call", "small", 0, label="single-upstream route: `small`"),
    Cell("call fed", "c", "gateway", "/fed/mcp", "tools/call", "m1__small", 0, label="route with 5 members: `m1__small`"),
)  # fmt: skip


def request_bytes(cell: Cell, port: int, rid: int) -> bytes:
    params: dict[str, Any] = {"_meta": _meta({})}
    if cell.tool is not None:
        params.update(name=cell.tool, arguments={})
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": cell.method, "params": params})
    lines = [
        f"POST {cell.path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"MCP-Protocol-Version: {MODERN}",
        f"Mcp-Method: {cell.method}",
    ]
    if cell.tool is not None:
        lines.append(f"Mcp-Name: {cell.tool}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def check(cell: Cell, rid: int, status: int, body: bytes, whole: bool) -> dict[str, Any] | None:
    """Every answer: status, the request's id, what it is; ``whole``: parsed, counted."""
    if status != 200:
        raise BadAnswer(f"HTTP {status}: {body[:200]!r}")
    if b'"id":%d,' % rid not in body[:64]:
        raise BadAnswer(f"not the answer to request {rid}: {body[:200]!r}")
    marker = b'"tools"' if cell.method == "tools/list" else b'"ok"'
    if marker not in body:
        raise BadAnswer(f"not a {cell.method} result: {body[:200]!r}")
    if not whole:
        return None
    result = orjson.loads(body)["result"]
    if cell.method != "tools/list":
        return {}
    missing = (result.get("_meta") or {}).get("io.mcp-edge/federation", {}).get("missing", [])
    seen = {
        "tools": len(result["tools"]),
        "missing": [f"{m['member']} ({m['reason']})" for m in missing],
        "ttlMs": result.get("ttlMs"),
        "cacheScope": result.get("cacheScope"),
    }
    if seen["tools"] != cell.tools or [m["member"] for m in missing] != list(cell.missing):
        raise BadAnswer(f"{cell.name}: expected {cell.tools} tools, missing {cell.missing}: {seen}")
    return seen


async def measure(
    cell: Cell, port: int, clients: int, duration: float, warmup: float, pids: list[int]
) -> dict[str, Any]:
    """A closed loop of ``clients`` keep-alive connections: warm-up, then the measured window."""
    loop = asyncio.get_running_loop()
    conns: list[Conn] = []
    for _ in range(clients):
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Conn(loop), "127.0.0.1", port), 10
        )
        conns.append(conn)
    state = {"measuring": False, "stop": False}
    latencies: list[float] = []
    errors: list[str] = []
    seen: list[dict[str, Any]] = []
    ids = iter(range(1, 1 << 30))

    async def client(conn: Conn) -> None:
        while not state["stop"]:
            rid = next(ids)
            data = request_bytes(cell, port, rid)
            t0 = time.perf_counter()
            try:
                status, body = await asyncio.wait_for(conn.send(data), 30)
                got = check(cell, rid, status, body, whole=not seen)
            except (BadAnswer, OSError, TimeoutError, KeyError, ValueError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            if got is not None and not seen:
                seen.append(got)
            if state["measuring"]:
                latencies.append(time.perf_counter() - t0)

    tasks = [asyncio.ensure_future(client(c)) for c in conns]
    try:
        await asyncio.sleep(warmup)
        cpu0 = {p: cpu_seconds(p) for p in pids}
        t0 = time.monotonic()
        state["measuring"] = True
        await asyncio.sleep(duration)
        state["measuring"] = False
        window = time.monotonic() - t0
        cpu1 = {p: cpu_seconds(p) for p in pids}
        ops = len(latencies)
        state["stop"] = True
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 35)
    finally:
        for task in tasks:
            task.cancel()
        for conn in conns:
            conn.close()
    cpu = sum((cpu1[p] or 0.0) - (cpu0[p] or 0.0) for p in pids)
    lat = sorted(x * 1000 for x in latencies)
    return {
        "ops": ops,
        "window_s": round(window, 3),
        "ops_per_s": round(ops / window, 1) if window else None,
        "p50_ms": _pct(lat, 0.5),
        "p99_ms": _pct(lat, 0.99),
        "cpu_ms_per_op": round(cpu / ops * 1000, 4) if ops else None,
        "errors": len(errors),
        "error_samples": errors[:3],
        "answer": seen[0] if seen else None,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def _median(values: list[Any]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 4) if values else None


# ---------------------------------------------------------------------------- the run


async def matrix(
    plan: dict[str, Any], ports: dict[str, int], gateway_pid: int, log: Callable[[str], None]
) -> dict[str, Any]:
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
    order = [(cell, c) for cell in CELLS for c in plan["clients"][cell.part]]
    quiet = b.QuietWaits(plan["quiet_wait_s"], plan["quiet_budget_s"])
    for round_ in range(plan["repeats"]):
        shift = round_ % len(order)
        for cell, clients in order[shift:] + order[:shift]:
            quiet()
            port = ports["m1"] if cell.target == "direct" else ports["gateway"]
            busy0, t0 = b.machine_busy(), time.monotonic()
            r = await measure(
                cell,
                port,
                clients,
                plan["duration"],
                plan["warmup"],
                [gateway_pid] if cell.target == "gateway" else [],
            )
            span = time.monotonic() - t0
            r["machine_busy"] = round((b.machine_busy() - busy0) / span / (os.cpu_count() or 1), 3)
            rounds.setdefault((cell.name, clients), []).append(r)
            log(
                f"  round {round_} {cell.name:13s} c={clients:<2d} p50 {r['p50_ms']} ms "
                f"cpu {r['cpu_ms_per_op']} ms/op"
                + (f" errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
            )
    out: dict[str, Any] = {}
    for (name, clients), cells in rounds.items():
        lat = [c["p50_ms"] for c in cells]
        out.setdefault(name, {})[str(clients)] = {
            "ops": sum(c["ops"] for c in cells),
            "ops_per_s": _median([c["ops_per_s"] for c in cells]),
            "p50_ms": _median(lat),
            "p99_ms": _median([c["p99_ms"] for c in cells]),
            "cpu_ms_per_op": _median([c["cpu_ms_per_op"] for c in cells]),
            "errors": sum(c["errors"] for c in cells),
            "error_samples": [s for c in cells for s in c["error_samples"]][:3],
            "answer": next((c["answer"] for c in cells if c["answer"]), None),
            "machine_busy": _median([c["machine_busy"] for c in cells]),
            "rounds": [
                {k: c[k] for k in ("p50_ms", "p99_ms", "cpu_ms_per_op", "ops_per_s")} for c in cells
            ],
        }
    return out


def _per_round(results: dict[str, Any], a: str, b_: str, clients: str, key: str) -> list[float]:
    ra = results.get(a, {}).get(clients, {}).get("rounds", [])
    rb = results.get(b_, {}).get(clients, {}).get("rounds", [])
    return [x[key] / y[key] for x, y in zip(ra, rb, strict=False) if x[key] and y[key]]


def comparison(results: dict[str, Any], plan: dict[str, Any]) -> dict[str, Any]:
    """The ratios asked for, whole (medians over rounds) and round by round."""
    out: dict[str, Any] = {}
    c_list = str(plan["clients"]["a"][0])

    def ratio(a: str, b_: str, clients: str, key: str) -> dict[str, Any]:
        x = results.get(a, {}).get(clients, {}).get(key)
        y = results.get(b_, {}).get(clients, {}).get(key)
        return {
            "ratio": round(x / y, 3) if x and y else None,
            "rounds": spread(_per_round(results, a, b_, clients, key)),
        }

    def p50(name: str, clients: str) -> float | None:
        value = results.get(name, {}).get(clients, {}).get("p50_ms")
        return float(value) if value is not None else None

    fed, wait = p50("list fed", c_list), p50("list fedwait", c_list)
    out["a"] = {
        "clients": int(c_list),
        "fed4_over_one_p50": ratio("list fed4", "list one", c_list, "p50_ms"),
        "one_over_direct_p50": ratio("list one", "list direct", c_list, "p50_ms"),
        "fed_p50_minus_deadline_ms": round(fed - DEADLINE_MS, 3) if fed is not None else None,
        "fedwait_p50_minus_slow_ms": round(wait - SLOW_MS, 3) if wait is not None else None,
        "deadline_saves_ms": round(wait - fed, 3) if fed is not None and wait is not None else None,
    }
    out["b"] = {
        c: {
            "hit_over_miss_p50": ratio("list hit", "list miss", c, "p50_ms"),
            "hit_over_miss_cpu": ratio("list hit", "list miss", c, "cpu_ms_per_op"),
        }
        for c in (str(x) for x in plan["clients"]["b"])
    }
    out["c"] = {
        c: {
            "fed_over_one_cpu": ratio("call fed", "call one", c, "cpu_ms_per_op"),
            "fed_over_one_p50": ratio("call fed", "call one", c, "p50_ms"),
        }
        for c in (str(x) for x in plan["clients"]["c"])
    }
    return out


def _r(entry: dict[str, Any]) -> str:
    text = b._f(entry["ratio"])
    spread = entry["rounds"]
    if spread:
        text += f" ({spread_text(spread)})"
    return text


def markdown(report: dict[str, Any]) -> str:
    plan, cmp, results = report["plan"], report["comparison"], report["results"]
    m = report["machine"]
    lines = [
        f"# A route with members, over real sockets ({report['mode']}, {report['started_at']})",
        "",
        tree_line(report["tree"]),
        f"Machine: {m.get('cores')} CPUs ({m.get('cpu_model')}), "
        f"{(m.get('memory_bytes') or 0) / 2**30:.0f} GiB, Python {m.get('python')}, Linux "
        f"{m.get('kernel', '')}; the members, the gateway and this client share the CPUs "
        "(`machine busy`: all of them, everything running, during the cell).  ",
        f"Five members (`python -m bench.federation_io member`, {TOOLS_PER_MEMBER} tools each; "
        f"`{SLOW}` answers lists {SLOW_MS} ms late); {plan['repeats']} interleaved rounds × "
        f"{plan['duration']} s per cell. p50/p99 are the medians over the rounds; CPU is the "
        "gateway process's per operation (`/proc`); ratios whole (per round: min–median–max).",
        "",
        "| part | cell | clients | what | ops/s | p50 / p99 ms | gateway CPU ms/op | answer | errors | machine busy |",
        "|---|---|--:|---|--:|--:|--:|---|--:|--:|",
    ]
    for cell in CELLS:
        for clients, row in results.get(cell.name, {}).items():
            answer = row.get("answer") or {}
            said = ""
            if "tools" in answer:
                said = f"{answer['tools']} tools, ttlMs {answer['ttlMs']}, {answer['cacheScope']}"
                if answer["missing"]:
                    said += ", missing " + ", ".join(answer["missing"])
            lines.append(
                f"| {cell.part} | {cell.name} | {clients} | {cell.label} | {b._f(row['ops_per_s'], '{:.1f}')} | "
                f"{b._f(row['p50_ms'])} / {b._f(row['p99_ms'])} | "
                f"{b._f(row['cpu_ms_per_op'], '{:.3f}')} | {said} | {row['errors']} | "
                f"{b._f(row['machine_busy'], '{:.0%}')} |"
            )
    a = cmp["a"]
    lines += [
        "",
        f"(a) `tools/list` at {a['clients']} client(s): 4 fast members ÷ single-upstream route, "
        f"p50: {_r(a['fed4_over_one_p50'])}; single-upstream route ÷ direct: "
        f"{_r(a['one_over_direct_p50'])}. With `{SLOW}` cut at its {DEADLINE_MS} ms deadline the "
        f"list's p50 is the deadline + {b._f(a['fed_p50_minus_deadline_ms'])} ms (and the answer "
        f"is incomplete: `ttlMs` 0, private, `{SLOW}` named missing); waiting for it costs its "
        f"{SLOW_MS} ms + {b._f(a['fedwait_p50_minus_slow_ms'])} ms. The deadline saves "
        f"{b._f(a['deadline_saves_ms'])} ms per list here.  ",
    ]
    for clients, bb in cmp["b"].items():
        lines.append(
            f"(b) edge cache on the federated list at {clients} client(s), hit ÷ miss: "
            f"p50 {_r(bb['hit_over_miss_p50'])}, gateway CPU per list "
            f"{_r(bb['hit_over_miss_cpu'])}.  "
        )
    for clients, c in cmp["c"].items():
        lines.append(
            f"(c) `tools/call` at {clients} client(s), route with 5 members ÷ single-upstream "
            f"route: gateway CPU per call {_r(c['fed_over_one_cpu'])}, p50 "
            f"{_r(c['fed_over_one_p50'])}.  "
        )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["member"]:
        p = argparse.ArgumentParser(prog="python -m bench.federation_io member")
        p.add_argument("--name", required=True)
        p.add_argument("--port", type=int, required=True)
        p.add_argument("--list-delay-ms", type=int, default=0)
        a = p.parse_args(argv[1:])
        serve_member(a.name, a.port, a.list_delay_ms)
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.federation_io", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--list-clients", default="1")
    parser.add_argument("--cache-clients", default="1,8")
    parser.add_argument("--call-clients", default="1,8")
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    log = elapsed_log(started)

    lists = [int(c) for c in args.list_clients.split(",")]
    plan = {
        "clients": {
            "a": lists,
            "b": [int(c) for c in args.cache_clients.split(",")],
            "c": [int(c) for c in args.call_clients.split(",")],
        },
        "duration": 0.4 if args.quick else args.duration,
        "warmup": 0.25 if args.quick else 0.6,
        "repeats": 1 if args.quick else args.repeats,
        "quiet_wait_s": 0 if args.quick else 5.0,
        "quiet_budget_s": 0 if args.quick else 60.0,
    }
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-edge-fedio-")))
        procs: dict[str, ManagedProcess] = {}
        ports = {name: free_port() for name in (*MEMBERS, "gateway")}
        try:
            for name in MEMBERS:
                delay = SLOW_MS if name == SLOW else 0
                procs[name] = start(
                    name,
                    python_module(
                        "bench.federation_io",
                        "member",
                        "--name",
                        name,
                        "--port",
                        str(ports[name]),
                        "--list-delay-ms",
                        str(delay),
                    ),
                    log_dir=tmp,
                )
            key = state_keys()
            conf = tmp / "gateway.yaml"
            urls = {name: f"http://127.0.0.1:{ports[name]}" for name in MEMBERS}
            conf.write_text(gateway_config(ports["gateway"], urls))
            for name in MEMBERS:
                wait_http(procs[name], ports[name], "/mcp", timeout=60)
            procs["gateway"] = start(
                "gateway",
                [*venv_command("mcp-edge"), "serve", "--config", str(conf), "--anonymous"],
                log_dir=tmp,
                env={"MCP_EDGE_STATE_KEYS": key},
            )
            wait_http(procs["gateway"], ports["gateway"], "/one/mcp", timeout=180)
            results = asyncio.run(matrix(plan, ports, procs["gateway"].pid, log))
        finally:
            for proc in reversed(list(procs.values())):
                proc.stop()
    report = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "machine": b.machine_info(),
        "plan": plan,
        "tree": tree_info(),
        "results": results,
        "comparison": comparison(results, plan),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    write_report(args.out_dir, "federation-io", report, markdown(report))
    failed = sum(row["errors"] for cells in results.values() for row in cells.values())
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
