"""What RFC 8693 token exchange costs per call: one gateway (callers' JWTs validated against the
test authorization server, oidc-provider) with two routes to the same light upstream
(``bench.light``), side by side in one interleaved run:

``static``    ``upstream_auth`` a static ``Authorization: Bearer`` credential of the route
``exchange``  ``upstream_auth.token_exchange``: the caller's token exchanged for the upstream's
              audience, the exchanged token cached (the measured window runs on the cached path)

1. CPU per call in one process, no sockets (``bench.hotpath``'s way: the gateway app called
   directly, its upstream client answering from memory): the gateway's own work per call, best
   of the repeats, both routes alternating; the least noisy figure on a busy machine.
2. CPU per call of the gateway process (from ``/proc``) for small ``tools/call`` at 1 and 16
   clients, the same caller's token on both routes; ``exchange ÷ static`` whole and per round.
3. The latency of a call that needs an exchange: sequential calls each with a caller token the
   gateway has not seen (so each is exchanged), against the same calls on ``static`` and a token
   exchange asked of the server directly (its own share).

    uv run python -m bench.identity [--quick] [--clients 1,16] [--duration 3] [--repeats 3]
                                    [--exchanges 40]

Writes ``bench/results/identity.json`` and ``identity.md``. Needs the test authorization server
(``scripts/install-authserver.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

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
WORKLOAD = "small_call_light"
WAYS = ("static", "exchange")
GATEWAY_AUD = "https://gateway.bench/mcp"
UPSTREAM_AUD = "https://light.bench/mcp"
PATHS = {"static": "/static/mcp", "exchange": "/exchange/mcp"}
HOTPATH_KEY = "Z0kwwUzIQHEEpzV56eJz-c0QI4Lz4E-GyoOO4JpoxxQ"


def gateway_config(auth: Any, port: int, light_port: int) -> dict[str, Any]:
    upstream = f"http://127.0.0.1:{light_port}/mcp"
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "logging": {"level": "warning", "format": "json", "access_log": False},
        "auth": {
            "mode": "jwt",
            "jwt": {
                "issuer": auth.issuer,
                "jwks_url": auth.jwks_uri,
                "algorithms": ["RS256"],
                "audience": [GATEWAY_AUD],
            },
        },
        "routes": [
            {
                "name": "static",
                "path": PATHS["static"],
                "upstream": upstream,
                "era": "modern",
                "upstream_auth": {"value_env": "UPSTREAM_TOKEN"},
            },
            {
                "name": "exchange",
                "path": PATHS["exchange"],
                "upstream": upstream,
                "era": "modern",
                "upstream_auth": {
                    "token_exchange": {
                        "issuer": auth.issuer,
                        "client": {"client_id": "gateway-basic", "secret_env": "EXCHANGE_SECRET"},
                        "audience": UPSTREAM_AUD,
                    }
                },
            },
        ],
    }


def call_body(rid: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {
            "name": "small",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


def timed_call(client: httpx.Client, port: int, way: str, token: str, rid: int) -> float:
    """One call's latency in ms; raises on an answer that is not the small result."""
    t0 = time.perf_counter()
    response = client.post(
        f"http://127.0.0.1:{port}{PATHS[way]}",
        json=call_body(rid),
        headers={
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "small",
            "Authorization": f"Bearer {token}",
        },
    )
    elapsed = (time.perf_counter() - t0) * 1000
    doc = response.json()
    if response.status_code != 200 or "result" not in doc:
        raise RuntimeError(f"{way}: {response.status_code} {response.text[:300]}")
    return elapsed


def direct_exchange(client: httpx.Client, auth: Any, token: str) -> float:
    """A token exchange asked of the server directly, as the gateway asks it (ms)."""
    basic = auth.basic
    t0 = time.perf_counter()
    response = client.post(
        auth.token_endpoint,
        data={
            "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
            "subject_token": token,
            "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "audience": UPSTREAM_AUD,
        },
        auth=(basic.client_id, basic.secret),
    )
    elapsed = (time.perf_counter() - t0) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"direct exchange: {response.status_code} {response.text[:300]}")
    return elapsed


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def latency_part(port: int, auth: Any, count: int, log: Any) -> dict[str, Any]:
    """Sequential calls with fresh caller tokens: each ``exchange`` call needs an exchange."""
    tokens = [
        auth.user_token("alice", audience=GATEWAY_AUD, marker=uuid.uuid4().hex)
        for _ in range(count)
    ]
    direct_tokens = [auth.user_token("bob", audience=GATEWAY_AUD) for _ in range(count)]
    times: dict[str, list[float]] = {
        "static": [],
        "exchange": [],
        "exchange_cached": [],
        "as_direct": [],
    }
    with httpx.Client(timeout=30, trust_env=False) as client:
        for _ in range(3):  # warm connections and the gateway's first exchange
            timed_call(client, port, "exchange", direct_tokens[0], 0)
            timed_call(client, port, "static", direct_tokens[0], 0)
        for n, token in enumerate(tokens):
            # Which route sees the new token first alternates (its first use costs the same
            # validation on both).
            if n % 2:
                times["static"].append(timed_call(client, port, "static", token, n))
            times["exchange"].append(timed_call(client, port, "exchange", token, n))
            times["exchange_cached"].append(timed_call(client, port, "exchange", token, n))
            if not n % 2:
                times["static"].append(timed_call(client, port, "static", token, n))
            times["as_direct"].append(direct_exchange(client, auth, direct_tokens[n]))
    out = {
        way: {"p50_ms": _pct(v, 0.5), "p90_ms": _pct(v, 0.9), "max_ms": _pct(v, 1.0), "n": len(v)}
        for way, v in times.items()
    }
    p50 = {way: out[way]["p50_ms"] for way in out}
    out["exchange_minus_static_p50_ms"] = b._diff(p50["exchange"], p50["static"])
    out["exchange_minus_static_minus_as_p50_ms"] = b._diff(
        out["exchange_minus_static_p50_ms"], p50["as_direct"]
    )
    log(f"  latency p50 ms: {p50}")
    return out


async def _inprocess(auth: Any, token: str, calls: int, repeats: int) -> dict[str, Any]:
    """Part 1: both routes called in this process, their upstream client answering from memory
    (``bench.hotpath``); µs of CPU per call, best of ``repeats`` (each ``calls`` per route, in
    alternating chunks of 50)."""
    from bench.hotpath import MemoryClient, request, timed_calls
    from mcp_edge.server.app import GatewayApp
    from mcp_edge.server.config import GatewayConfig, load_key_ring

    doc = gateway_config(auth, 0, 9)
    del doc["listen"]
    config = GatewayConfig.model_validate({**doc, "state": {"keys": [HOTPATH_KEY]}})
    app = GatewayApp(config, load_key_ring(config.state), upstream_client=MemoryClient())  # type: ignore[arg-type]
    app.reachable = True

    async def drive(way: str, n: int) -> float:
        scope0, body0 = request(1)
        path = PATHS[way]
        scope0 = {
            **scope0,
            "path": path,
            "raw_path": path.encode(),
            "headers": [*scope0["headers"], (b"authorization", f"Bearer {token}".encode())],
        }
        spent, statuses = await timed_calls(app, n, scope0, body0)
        if statuses.count(200) != n:
            raise RuntimeError(f"{way}: unexpected answers {sorted(set(statuses))}")
        return spent / n * 1e6

    async def layer_alone(n: int = 200_000) -> float:
        """The identity layer and its cached lookup alone, around an app that does nothing."""
        from mcp_edge.auth.base import Principal
        from mcp_edge.edge.context import SCOPE_KEY, RequestContext
        from mcp_edge.identity.layer import UpstreamIdentityLayer

        source = app.stacks.identity.sources["exchange"]
        principal = Principal(id='["jwt-sub","bench","alice"]')
        source.memory.put((principal.id, token), "exchanged", time.time() + 3600)

        async def nothing(scope: Any, receive: Any, send: Any) -> None:
            return None

        layer = UpstreamIdentityLayer(nothing, source=source, member="exchange")
        scope = {"type": "http", SCOPE_KEY: RequestContext(principal=principal, client_token=token)}
        started = time.process_time()
        for _ in range(n):
            await layer(scope, None, None)  # type: ignore[arg-type]
        layered = time.process_time() - started
        started = time.process_time()
        for _ in range(n):
            await nothing(scope, None, None)
        return (layered - (time.process_time() - started)) / n * 1e6

    try:
        for way in WAYS:  # warm up (the exchange made once, the keys fetched once)
            await drive(way, 300)
        # Many short chunks, the two routes alternating, so a burst of other work on the machine
        # falls on both alike; a repeat sums its chunks (``calls`` calls per route).
        chunk = 50
        best = {way: float("inf") for way in WAYS}
        ratios = []
        for _ in range(repeats):
            spent = dict.fromkeys(WAYS, 0.0)
            for n in range(max(1, calls // chunk)):
                for way in WAYS if n % 2 == 0 else WAYS[::-1]:
                    spent[way] += await drive(way, chunk) * chunk
            got = {way: spent[way] / (max(1, calls // chunk) * chunk) for way in WAYS}
            ratios.append(got["exchange"] / got["static"])
            best = {way: min(best[way], got[way]) for way in WAYS}
        layer_us = await layer_alone()
    finally:
        await app.aclose()
    return {
        "calls": calls,
        "repeats": repeats,
        "us_per_call": {way: round(v, 2) for way, v in best.items()},
        "exchange_over_static": round(best["exchange"] / best["static"], 4),
        "exchange_over_static_rounds": spread(ratios, 4),
        "exchange_minus_static_us": round(best["exchange"] - best["static"], 2),
        "layer_alone_us": round(layer_us, 3),
    }


def _matrix(
    gen: b.LoadGen, plan: b.Plan, port: int, pid: int, token: str, log: Any
) -> dict[str, Any]:
    def spec(way: str, workload: str) -> dict[str, Any]:
        return {
            "host": "127.0.0.1",
            "port": port,
            "json_path": PATHS[way],
            "sse_path": PATHS[way],
            "light_path": PATHS[way],
            "headers": [f"Authorization: Bearer {token}"],
            "pids": [pid],
        }

    raw: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for _, clients, round_, way, r in b.interleaved_runs(gen, plan, WAYS, spec):
        r["proxy_cpu_s"] = r["cpu_s"][str(pid)] or 0.0
        r["upstream_cpu_s"] = None
        raw.setdefault((clients, way), []).append(r)
        r["summary"] = b.round_summary(r, round_)
        log(
            f"  c={clients:<3d} {way:9s} {r['summary']['ops_per_s']:8.1f} ops/s "
            f"cpu {r['summary']['cpu_ms_per_call']} ms/call"
            + (f" errors={r['errors']} {r['error_samples'][:1]}" if r["errors"] else "")
        )
    return b.interleaved_cells(
        raw, {"proxy_cpu_s_per_1k_ops": "cpu_ms_per_call", "upstream_cpu_s_per_1k_ops": None}
    )


def comparison(results: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for clients, row in results.items():
        if not all(way in row for way in WAYS):
            continue
        cpu = {way: row[way]["cpu_ms_per_call"] for way in WAYS}
        rounds = [
            x["cpu_ms_per_call"] / y["cpu_ms_per_call"]
            for x, y in zip(row["exchange"]["rounds"], row["static"]["rounds"], strict=False)
            if x["cpu_ms_per_call"] and y["cpu_ms_per_call"]
        ]
        out[clients] = {
            "cpu_ms_per_call": cpu,
            "exchange_over_static": b._ratio(cpu["exchange"], cpu["static"]),
            "exchange_over_static_rounds": spread(rounds),
        }
    return out


def _rounds(cell: dict[str, float] | None) -> str:
    return spread_text(cell, 3) if cell else "-"


def markdown(report: dict[str, Any]) -> str:
    tree, plan = report["tree"], report["plan"]
    lines = [
        f"# Token exchange against a static credential ({report['mode']}, {report['started_at']})",
        "",
        tree_line(tree),
        (
            f"Small calls to the light upstream through one gateway (callers' JWTs validated on "
            f"both routes); {plan['repeats']} interleaved rounds × {plan['duration_s']} s per "
            "cell. CPU is the gateway process's, in ms per call; `exchange` runs on its cached "
            "exchanged token. `÷ static`: whole (per round: min–median–max)."
        ),
        "",
        f"In one process, no sockets ({report['inprocess']['calls']} calls per route in "
        f"alternating chunks of 50, best of {report['inprocess']['repeats']}): static "
        f"{report['inprocess']['us_per_call']['static']} µs/call, exchange (cached) "
        f"{report['inprocess']['us_per_call']['exchange']} µs/call: ÷ static "
        f"{report['inprocess']['exchange_over_static']} (per repeat: "
        f"{_rounds(report['inprocess']['exchange_over_static_rounds'])}), "
        f"{report['inprocess']['exchange_minus_static_us']} µs more; the identity layer and "
        f"its cached lookup alone: {report['inprocess']['layer_alone_us']} µs per call.",
        "",
        "Through the gateway process, over sockets:",
        "",
        "| clients | route | ops/s | p50 / p99 ms | CPU ms/call | ÷ static (per round) | errors | other load |",
        "|--:|---|--:|--:|--:|--:|--:|--:|",
    ]
    for clients, row in report["results"].items():
        cmp = report["comparison"].get(clients, {})
        for way in WAYS:
            cell = row.get(way)
            if cell is None:
                continue
            ratio = "1" if way == "static" else b._f(cmp.get("exchange_over_static"), "{:.3f}")
            rounds = cmp.get("exchange_over_static_rounds")
            if way == "exchange" and rounds:
                ratio += f" ({spread_text(rounds, 3)})"
            lines.append(
                f"| {clients} | {way} | {cell['ops_per_s']} | {b._f(cell['p50_ms'])} / "
                f"{b._f(cell['p99_ms'])} | {b._f(cell['cpu_ms_per_call'], '{:.3f}')} | {ratio} | "
                f"{cell['errors']} | {b._f(cell['other_cpu_share'], '{:.0%}')} |"
            )
    lat = report["latency"]
    lines += [
        "",
        f"Latency of one call, sequential, {lat['exchange']['n']} calls each: `exchange` with a "
        "caller token the gateway has not seen (each call exchanged at the server), the same "
        "call again (`exchange_cached`), `static`, and the server's token exchange asked "
        "directly (`as_direct`).",
        "",
        "| call | p50 ms | p90 ms | max ms |",
        "|---|--:|--:|--:|",
    ]
    for way in ("static", "exchange_cached", "exchange", "as_direct"):
        cell = lat[way]
        lines.append(
            f"| {way} | {b._f(cell['p50_ms'])} | {b._f(cell['p90_ms'])} | {b._f(cell['max_ms'])} |"
        )
    lines += [
        "",
        f"A call that needs an exchange takes {b._f(lat['exchange_minus_static_p50_ms'])} ms more "
        f"than a static one at p50, of which the server's own exchange is "
        f"{b._f(lat['as_direct']['p50_ms'])} ms "
        f"(the gateway's part: {b._f(lat['exchange_minus_static_minus_as_p50_ms'])} ms).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.identity", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--exchanges", type=int, default=40)
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from tests.support.authserver import start_authserver

    started = time.monotonic()
    log = elapsed_log(started)
    plan = b.interleaved_plan(
        WORKLOAD, args.clients, quick=args.quick, duration=args.duration, repeats=args.repeats
    )
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mcp-edge-identity-")))
        auth = start_authserver(stack, tmp / "as", access_token_ttl=3600, exchange_ttl=3600)
        procs: dict[str, ManagedProcess] = {}
        gen = b.LoadGen(tmp)
        try:
            light_port, port = free_port(), free_port()
            procs["light"] = start(
                "upstream-light",
                python_module("bench.light", "--port", str(light_port)),
                log_dir=tmp,
            )
            conf = tmp / "gateway.yaml"
            conf.write_text(json.dumps(gateway_config(auth, port, light_port)))
            env = {
                "MCP_EDGE_STATE_KEYS": state_keys(),
                "UPSTREAM_TOKEN": "static-upstream-credential",
                "EXCHANGE_SECRET": str(auth.basic.secret),
            }
            procs["gateway"] = start(
                "gateway",
                [*venv_command("mcp-edge"), "serve", "--config", str(conf)],
                log_dir=tmp,
                env=env,
            )
            wait_http(procs["light"], light_port, "/mcp", timeout=60)
            wait_http(procs["gateway"], port, "/healthz", timeout=120)
            token = auth.user_token("alice", audience=GATEWAY_AUD)
            with httpx.Client(timeout=30, trust_env=False) as client:
                for way in WAYS:  # the exchange made (and cached) before anything is measured
                    timed_call(client, port, way, token, 1)
            os.environ.update({k: v for k, v in env.items() if k != "MCP_EDGE_STATE_KEYS"})
            inprocess = asyncio.run(
                _inprocess(auth, token, 500 if args.quick else 10_000, 1 if args.quick else 5)
            )
            log(f"  in-process us/call: {inprocess['us_per_call']}")
            results = _matrix(gen, plan, port, procs["gateway"].pid, token, log)
            latency = latency_part(port, auth, 5 if args.quick else args.exchanges, log)
        finally:
            gen.close()
            for proc in reversed(list(procs.values())):
                proc.stop()
    report = b.interleaved_report(
        plan,
        inprocess=inprocess,
        results=results,
        comparison=comparison(results),
        latency=latency,
        elapsed_s=round(time.monotonic() - started, 1),
    )
    write_report(args.out_dir, "identity", report, markdown(report))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
