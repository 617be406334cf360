"""Peak memory of one gateway process while callers without the key ring send large bodies, slowly,
to the replicas' own endpoints.

    uv run python -m bench.peer_rss [--checkout DIR] [--connections 100] [--size-mib 11.9]
                                    [--seconds 12] [--paths forward,relay]

Starts one gateway (``mcp-edge serve`` from ``--checkout``, default this one, in this environment:
run it once against a ``git worktree`` of another commit to compare), then, for each path, opens
``--connections`` connections that each send a request head announcing ``--size-mib`` MiB (under
the 12 MiB the forwarding endpoint used to take) with a made-up ``X-MCP-Edge-Peer`` header, and
then the body, spread over ``--seconds`` seconds. The gateway's RSS (``/proc``) is sampled every
0.1 s; printed per path: RSS at rest, the peak, how many answers came and how many of them before
the body was complete, and how many bytes the callers could send.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.loadgen import rss_bytes
from bench.procs import checkout_commit, checkout_gateway, free_port, start, state_keys, wait_http

PATHS = {"forward": "/.mcp-edge/forward", "relay": "/.mcp-edge/legacy"}
CHUNK = 64 * 1024


async def _caller(port: int, path: str, size: int, seconds: float, stats: Counter[str]) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 10)
    except (OSError, TimeoutError):
        stats["connect_failed"] += 1
        return
    token = (
        "mcpef2.AAAAAAAA." + "A" * 120
    )  # a made-up message (the relay header of older versions too)
    writer.write(
        (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            f"X-MCP-Edge-Peer: {token}\r\nX-MCP-Edge-Relay: {token}\r\n"
            f"Content-Length: {size}\r\n\r\n"
        ).encode()
    )
    answer = asyncio.ensure_future(reader.readline())
    sent = 0
    pause = seconds / max(1, size // CHUNK)
    try:
        while sent < size and not answer.done():
            n = min(CHUNK, size - sent)
            writer.write(b"x" * n)
            await writer.drain()
            sent += n
            await asyncio.sleep(pause)
    except (OSError, ConnectionError):
        pass  # the gateway closed the connection
    stats["sent"] += sent
    try:
        line = await asyncio.wait_for(answer, 60)
    except (OSError, ConnectionError, TimeoutError):
        line = b""
    if line:
        stats["answered"] += 1
        stats["answered_early"] += sent < size
        stats[f"status_{line.split()[1].decode()}"] += 1
    else:
        stats["no_answer"] += 1
    writer.close()


async def _measure(
    pid: int, port: int, path: str, connections: int, size: int, seconds: float
) -> dict[str, object]:
    stats: Counter[str] = Counter({"answered": 0, "answered_early": 0, "sent": 0})
    rest = rss_bytes(pid) or 0
    peak = rest
    callers = asyncio.gather(
        *(_caller(port, path, size, seconds, stats) for _ in range(connections))
    )
    started = time.monotonic()
    while not callers.done():
        peak = max(peak, rss_bytes(pid) or 0)
        await asyncio.sleep(0.1)
    await callers
    return {
        "path": path,
        "connections": connections,
        "size_mib": round(size / 2**20, 2),
        "rss_at_rest_mib": round(rest / 2**20, 1),
        "peak_rss_mib": round(peak / 2**20, 1),
        "seconds": round(time.monotonic() - started, 1),
        **stats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.peer_rss", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the mcp-edge checkout to run (default: this one)",
    )
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--size-mib", type=float, default=11.9)
    parser.add_argument(
        "--seconds", type=float, default=12.0, help="how long each body takes to send"
    )
    parser.add_argument("--paths", default="forward,relay")
    args = parser.parse_args(argv)
    size = int(args.size_mib * 2**20)
    checkout = args.checkout.resolve()
    with tempfile.TemporaryDirectory(prefix="mcp-edge-peer-rss-") as name:
        tmp = Path(name)
        port = free_port()
        key = state_keys()
        argv_ = checkout_gateway(checkout, tmp, f"http://127.0.0.1:{free_port()}/mcp", port)
        commit = checkout_commit(checkout) or "?"
        rows = []
        for path in args.paths.split(","):
            gateway = start(
                f"mcp-edge-{path}", argv_, log_dir=tmp, env={"MCP_EDGE_STATE_KEYS": key}
            )
            try:
                wait_http(gateway, port, "/healthz", ok=(200,), timeout=90)
                time.sleep(1.0)  # settle after start
                row = asyncio.run(
                    _measure(gateway.pid, port, PATHS[path], args.connections, size, args.seconds)
                )
            finally:
                gateway.stop()
            row["checkout"] = f"{checkout} ({commit})"
            rows.append(row)
            print(
                f"{commit} {PATHS[path]}: {args.connections} x {row['size_mib']} MiB over {args.seconds:g} s: "
                f"RSS at rest {row['rss_at_rest_mib']} MiB, peak {row['peak_rss_mib']} MiB; "
                f"{row['answered']} answered ({row['answered_early']} before the body was complete), "
                f"{row['sent'] / 2**20:.0f} MiB sent before the gateway stopped reading",
                flush=True,
            )
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
