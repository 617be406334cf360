"""How many slow connections one gateway process holds before honest calls suffer.

    uv run python -m bench.slowloris [--steps 0,500,1000,2000,4000] [--fd-limit 1024]
                                     [--listen max_connections=500,header_timeout=3600]
                                     [--port PORT --no-start]

Starts the benchmark upstream and one gateway (its open-files soft limit set to ``--fd-limit``,
a common default, unless ``--no-start`` points it at a running one), then opens slow connections
in steps: each sends the start of a request head and one more header line every ``--trickle``
seconds, never finishing. At each step ten honest ``tools/list`` calls are made on new
connections, one after another (5 s timeout each), and how many succeeded and their latency are
printed, with how many slow connections the gateway has closed so far.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from pathlib import Path

from bench.procs import free_port, python_module, start, state_keys, venv_command, wait_http

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
BODY = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}
).encode()
REQUEST = (
    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
    f"Mcp-Method: tools/list\r\nContent-Length: {len(BODY)}\r\nConnection: close\r\n\r\n"
).encode() + BODY


async def _slow(port: int, trickle: float, stats: dict[str, int]) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        stats["refused"] += 1
        return
    writer.write(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:
        i = 0
        while not reader.at_eof():
            await asyncio.sleep(trickle)
            writer.write(b"X-Slow-%d: a\r\n" % i)
            i += 1
            await writer.drain()
    except (OSError, ConnectionError):
        pass
    stats["closed"] += 1


async def _honest(port: int) -> tuple[bool, float]:
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        writer.write(REQUEST)
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        return data.startswith(b"HTTP/1.1 200"), time.perf_counter() - started
    except (OSError, TimeoutError):
        return False, time.perf_counter() - started


async def measure(port: int, steps: list[int], trickle: float) -> list[dict[str, float]]:
    stats = {"closed": 0, "refused": 0}
    slow: list[asyncio.Task[None]] = []
    rows = []
    for target in steps:
        while len(slow) < target:
            slow.append(asyncio.create_task(_slow(port, trickle, stats)))
            if len(slow) % 200 == 0:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)
        results = [await _honest(port) for _ in range(10)]
        latencies = sorted(t for _, t in results)
        row = {
            "slow": target,
            "honest_ok": sum(ok for ok, _ in results),
            "p50_ms": round(latencies[5] * 1000, 1),
            "max_ms": round(latencies[-1] * 1000, 1),
            "slow_closed_by_gateway": stats["closed"],
            "slow_refused": stats["refused"],
        }
        print(
            f"slow connections {target:>6}: honest {row['honest_ok']}/10 ok, p50 {row['p50_ms']:7.1f} ms, "
            f"max {row['max_ms']:7.1f} ms; slow ones closed by the gateway so far {stats['closed']}",
            flush=True,
        )
        rows.append(row)
    for task in slow:
        task.cancel()
    await asyncio.gather(*slow, return_exceptions=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slowloris", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--steps", default="0,500,1000,2000,4000")
    parser.add_argument(
        "--trickle", type=float, default=2.0, help="seconds between two header lines"
    )
    parser.add_argument(
        "--fd-limit", type=int, default=1024, help="the gateway's soft open-files limit"
    )
    parser.add_argument(
        "--listen",
        default="",
        help="listen.* settings, e.g. max_connections=500,header_timeout=3600",
    )
    parser.add_argument("--port", type=int, help="measure a gateway already running on this port")
    args = parser.parse_args(argv)
    steps = [int(x) for x in args.steps.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max(steps) + 256
    if soft != resource.RLIM_INFINITY and soft < want:  # this process holds the slow connections
        resource.setrlimit(
            resource.RLIMIT_NOFILE,
            (want if hard == resource.RLIM_INFINITY else min(want, hard), hard),
        )
    if args.port:
        asyncio.run(measure(args.port, steps, args.trickle))
        return 0
    listen = {
        k: float(v) if "." in v or k.endswith("timeout") else int(v)
        for k, _, v in (item.partition("=") for item in args.listen.split(",") if item)
    }
    with tempfile.TemporaryDirectory(prefix="mcp-edge-slowloris-") as name:
        tmp = Path(name)
        up_port, gw_port = free_port(), free_port()
        upstream = start(
            "upstream",
            python_module("bench.upstream", "--port", str(up_port), "--json-response"),
            log_dir=tmp,
        )
        conf = tmp / "gateway.yaml"
        conf.write_text(
            json.dumps(
                {
                    "listen": listen,
                    "routes": [
                        {
                            "name": "default",
                            "path": "/mcp",
                            "upstream": f"http://127.0.0.1:{up_port}/mcp",
                        }
                    ],
                }
            )
        )
        key = state_keys()
        argv_ = [
            "prlimit",
            f"--nofile={args.fd_limit}:{hard if hard != resource.RLIM_INFINITY else 'unlimited'}",
            *venv_command("mcp-edge"),
            "serve",
            "--config",
            str(conf),
            "--port",
            str(gw_port),
            "--anonymous",
        ]
        gateway = start("mcp-edge", argv_, log_dir=tmp, env={"MCP_EDGE_STATE_KEYS": key})
        try:
            wait_http(upstream, up_port, "/mcp")
            wait_http(gateway, gw_port, "/readyz", ok=(200,))
            print(
                f"gateway listen settings: {listen or 'defaults'}; open-files soft limit at start {args.fd_limit}"
            )
            asyncio.run(measure(gw_port, steps, args.trickle))
        finally:
            gateway.stop()
            upstream.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
