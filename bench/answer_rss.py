"""Peak memory of one gateway process while clients ask for a large answer and do not read it.

    uv run python -m bench.answer_rss [--checkout DIR] [--clients 40] [--size-mib 15]
                                      [--hold 20] [--json-response] [--bridge]
                                      [--budget-mib N] [--route members | listen]

Starts a real SDK upstream (``tests/servers/big_resource.py``: ``resources/read`` of
``big://{kib}``) and one gateway (``mcp-edge serve`` from ``--checkout``, default this one, in
this environment: run it once against an export of another commit to compare). Then
``--clients`` connections (each with a small receive buffer, so the kernel holds little of the
answer for them) each send one ``resources/read`` of ``--size-mib`` MiB and read nothing for
``--hold`` seconds, while the gateway's RSS (``/proc``) is sampled every 50 ms. Each client then
reads the head of what it got. Printed: RSS at rest, the peak, RSS at the end of the hold, what
the answer budget counted then (``mcp_edge_answer_bytes_held``, and by kind), the ratio of what
RSS grew by to what was counted (how many times over the process holds what it counts), and
what the clients got (HTTP status, and ``error.data.reason`` of a JSON-RPC error).

``--bridge``: the upstream is a 2025-era server instead, an unmodified FastMCP from ``mcp`` 1.x
(``tests/servers/legacy_server.py``, the same ``big://{kib}``, in its own isolated environment)
behind the legacy bridge (``era: legacy``). ``--budget-mib``: the gateway's
``limits.max_inflight_answer_bytes`` (default: the gateway's own, 64 MiB).

``--route members``: the same through a route with ``members:`` (the upstream its one member,
prefix ``big``: a routed call). ``--route listen``: ``--clients`` ``subscriptions/listen`` streams
on a route with ``members:`` whose one member (a raw server of this module's own: no real server
floods) acknowledges, then sends notifications of ``--size-mib`` MiB as fast as it is read; the
clients read nothing after the acknowledgement.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench.loadgen import rss_bytes
from bench.procs import checkout_commit, checkout_gateway, free_port, start, state_keys, wait_http
from tests.support.legacy import legacy_python_command

VERSION = "2026-07-28"
SERVER = Path(__file__).resolve().parents[1] / "tests" / "servers" / "big_resource.py"


META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def request(port: int, rid: int, kib: int, route: str = "single") -> bytes:
    if route == "listen":
        method, name = "subscriptions/listen", None
        params: dict[str, object] = {"notifications": {"toolsListChanged": True}, "_meta": META}
    else:
        method = "resources/read"
        name = f"big+big://{kib}" if route == "members" else f"big://{kib}"
        params = {"uri": name, "_meta": META}
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode()
    named = f"Mcp-Name: {name}\r\n" if name else ""
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {VERSION}\r\n"
        f"Mcp-Method: {method}\r\n{named}Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kib: int) -> None:
    """A member that answers ``subscriptions/listen`` with an acknowledgement, then
    notifications of ``kib`` KiB for as long as it is read (anything else: ``{}``)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            (
                int(v)
                for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
                if k.strip().lower() == b"content-length"
            ),
            0,
        )
        doc = json.loads(await reader.readexactly(length)) if length else {}
        if doc.get("method") != "subscriptions/listen":
            body = json.dumps({"jsonrpc": "2.0", "id": doc.get("id"), "result": {}}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
            )
            await writer.drain()
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        ack = {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": {"toolsListChanged": True}},
        }
        pad = "n" * (kib * 1024)
        events = [ack]
        while True:
            for ev in events:
                data = b"data: " + json.dumps(ev).encode() + b"\n\n"
                writer.write(b"%x\r\n%b\r\n" % (len(data), data))
                await writer.drain()
            events = [
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": pad},
                }
            ]
    except (OSError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        writer.close()


def _serve_flood(port: int, kib: int) -> None:
    """The flooding member, on its own thread and loop (for the life of the process)."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(
        asyncio.start_server(lambda r, w: _flood(r, w, kib), "127.0.0.1", port)
    )
    threading.Thread(target=loop.run_forever, daemon=True).start()
    assert server.sockets


async def _client(
    port: int, rid: int, kib: int, hold: asyncio.Event, stats: Counter[str], route: str
) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    try:
        await asyncio.wait_for(
            asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), 10
        )
        reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    except (OSError, TimeoutError):
        sock.close()
        stats["connect_failed"] += 1
        return
    writer.write(request(port, rid, kib, route))
    await writer.drain()
    await hold.wait()  # reads nothing until then
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)
        status = head.split(b" ", 2)[1].decode()
        first = await asyncio.wait_for(reader.read(4096), 60)
        reason = ""
        if b'"error"' in first:
            try:
                reason = json.loads(first)["error"].get("data", {}).get("reason", "")
            except (ValueError, KeyError, AttributeError):
                reason = "?"
        elif b"data: " in first and b'"error"' in first:
            reason = "sse_error"
        stats[f"{status} {reason}".strip()] += 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        stats["no_answer"] += 1
    writer.close()


async def _measure(
    pid: int, port: int, clients: int, kib: int, hold_s: float, route: str
) -> dict[str, object]:
    stats: Counter[str] = Counter()
    rest = rss_bytes(pid) or 0
    peak = rest
    hold = asyncio.Event()
    tasks = [
        asyncio.ensure_future(_client(port, i, kib, hold, stats, route)) for i in range(clients)
    ]
    started = time.monotonic()
    while time.monotonic() - started < hold_s:
        peak = max(peak, rss_bytes(pid) or 0)
        await asyncio.sleep(0.05)
    held = rss_bytes(pid) or 0
    counted, kinds = await asyncio.get_running_loop().run_in_executor(None, _counted, port)
    hold.set()
    await asyncio.gather(*tasks)
    return {
        "clients": clients,
        "size_mib": round(kib / 1024, 2),
        "rss_at_rest_mib": round(rest / 2**20, 1),
        "peak_rss_mib": round(peak / 2**20, 1),
        "rss_end_of_hold_mib": round(held / 2**20, 1),
        "counted_end_of_hold_mib": round(counted / 2**20, 1),
        "counted_by_kind_mib": {k: round(v / 2**20, 1) for k, v in sorted(kinds.items()) if v},
        "growth_over_counted": round((held - rest) / counted, 2) if counted else None,
        "answers": dict(sorted(stats.items())),
    }


def _counted(port: int) -> tuple[float, dict[str, float]]:
    """What the gateway's answer budget counts now, in all and by kind (its ``/metrics``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    total, kinds = 0.0, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mcp_edge_answer_bytes_held":
                total = sample.value
            elif sample.name == "mcp_edge_held_bytes" and sample.labels.get("pool") == "answer":
                kinds[sample.labels["kind"]] = sample.value
    return total, kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.answer_rss", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=Path(__file__).resolve().parents[1],
        help="the mcp-edge checkout to run (default: this one)",
    )
    parser.add_argument("--clients", type=int, default=40)
    parser.add_argument("--size-mib", type=float, default=15.0)
    parser.add_argument("--hold", type=float, default=20.0, help="seconds the clients read nothing")
    parser.add_argument("--json-response", action="store_true", help="the upstream answers JSON")
    parser.add_argument(
        "--bridge",
        action="store_true",
        help="a 2025-era upstream (FastMCP, mcp 1.x) behind the legacy bridge",
    )
    parser.add_argument(
        "--budget-mib", type=float, default=None, help="limits.max_inflight_answer_bytes, MiB"
    )
    parser.add_argument(
        "--route",
        choices=("single", "members", "listen"),
        default="single",
        help="a single-upstream route, a route with members (a routed call), or listen streams",
    )
    args = parser.parse_args(argv)
    kib = int(args.size_mib * 1024)
    checkout = args.checkout.resolve()
    with tempfile.TemporaryDirectory(prefix="mcp-edge-answer-rss-") as name:
        tmp = Path(name)
        up_port, port = free_port(), free_port()
        if args.bridge:
            upstream_argv = legacy_python_command("legacy_server.py", "--port", str(up_port))
        else:
            upstream_argv = [sys.executable, str(SERVER), "--port", str(up_port)]
        if args.json_response:
            upstream_argv.append("--json-response")
        key = state_keys()
        limits = {}
        if args.budget_mib is not None:
            limits["max_inflight_answer_bytes"] = int(args.budget_mib * 2**20)
        up_url = f"http://127.0.0.1:{up_port}/mcp"
        era = "legacy" if args.bridge else "modern"
        members = (
            None if args.route == "single" else [{"name": "big", "upstream": up_url, "era": era}]
        )
        gateway_argv = checkout_gateway(
            checkout, tmp, up_url, port, era=era, limits=limits, members=members
        )
        commit = checkout_commit(checkout) or checkout.name
        if args.route == "listen":
            _serve_flood(up_port, kib)
            upstream_argv = [sys.executable, "-c", "import time; time.sleep(3600)"]
        upstream = start("big-resource", upstream_argv, log_dir=tmp)
        gateway = start("mcp-edge", gateway_argv, log_dir=tmp, env={"MCP_EDGE_STATE_KEYS": key})
        try:
            if args.route != "listen":
                wait_http(upstream, up_port, "/mcp", timeout=120)
            wait_http(gateway, port, "/healthz", ok=(200,), timeout=90)
            time.sleep(1.0)  # settle after start
            row = asyncio.run(_measure(gateway.pid, port, args.clients, kib, args.hold, args.route))
        finally:
            gateway.stop()
            upstream.stop()
        row["checkout"] = f"{checkout} ({commit})"
        row["upstream"] = ("legacy " if args.bridge else "") + (
            "json" if args.json_response else "sse"
        )
        row["budget_mib"] = args.budget_mib
        row["route"] = args.route
        what = "listen streams" if args.route == "listen" else "resources/read"
        print(
            f"{commit}: {args.clients} clients x {row['size_mib']} MiB {what} "
            f"({row['upstream']} upstream, {args.route} route), not read for {args.hold:g} s: "
            f"RSS at rest "
            f"{row['rss_at_rest_mib']} MiB, peak {row['peak_rss_mib']} MiB, "
            f"{row['rss_end_of_hold_mib']} MiB at the end, "
            f"{row['counted_end_of_hold_mib']} MiB counted then "
            f"(RSS grew {row['growth_over_counted']} times that); answers {row['answers']}",
            flush=True,
        )
        print(json.dumps(row, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
