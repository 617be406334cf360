"""The gateway's resident memory across many requests, hostile ones included.

    uv run python -m bench.rss [--requests 100000] [--clients 8]

Starts the benchmark upstream (``bench.upstream``, JSON mode) and one gateway, then sends
``--requests`` requests over ``--clients`` keep-alive connections, cycling through a mix of
honest and refused traffic (see :data:`MIX`), and samples the gateway's RSS (``/proc``) every
tenth of the run. Each answer's status is checked. ``tests/integration/test_exhaustion.py``
runs the same mix, a few thousand requests long, as a smoke test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.loadgen import rss_bytes
from bench.procs import free_port, python_module, start, state_keys, venv_command, wait_http

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def _body(request_id: int, method: str, **params: Any) -> bytes:
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": META}}
    ).encode()


def _head(method: str, length: int, name: str | None = None, extra: str = "") -> bytes:
    lines = [
        "POST /mcp HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        "MCP-Protocol-Version: 2026-07-28",
        f"Mcp-Method: {method}",
        f"Content-Length: {length}",
    ]
    if name:
        lines.append(f"Mcp-Name: {name}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


def _request(body: bytes, method: str, name: str | None = None) -> bytes:
    return _head(method, len(body), name) + body


@dataclass(frozen=True)
class Case:
    name: str
    data: bytes
    status: int | None  # None: no answer expected (the client goes away)
    #: The connection cannot be reused afterwards (the client closes it, or the server does).
    closes: bool = False


_SMALL = _body(1, "tools/call", name="small", arguments={})
_DUP = (
    b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"small","name":"big","arguments":{},"_meta":'
    + json.dumps(META).encode()
    + b"}}"
)
_DEEP = (
    b'{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"x":'
    + b"[" * 100
    + b"]" * 100
    + b"}}"
)
_FORGED = _body(
    6,
    "tools/call",
    name="ask",
    arguments={},
    inputResponses={"colour": {"action": "accept"}},
    requestState="mcpe1.AAAAAAAA.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
)

#: One round of the mix: honest calls that reach the upstream, and refusals that must cost
#: nothing lasting.
MIX = [
    Case("tools/call", _request(_SMALL, "tools/call", "small"), 200),
    Case("tools/list", _request(_body(2, "tools/list"), "tools/list"), 200),
    Case(
        "MRTR round 1 (sealed)",
        _request(_body(5, "tools/call", name="ask", arguments={}), "tools/call", "ask"),
        200,
    ),
    Case("duplicate key", _request(_DUP, "tools/call", "small"), 400),
    Case("too deep", _request(_DEEP, "tools/list"), 400),
    Case(
        "NaN",
        _request(
            b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"n":NaN}}', "tools/list"
        ),
        400,
    ),
    Case("forged requestState", _request(_FORGED, "tools/call", "ask"), 400),
    Case(
        "body too large (Expect)",
        _head("tools/list", 10 * 1024 * 1024, extra="Expect: 100-continue\r\n"),
        413,
        closes=True,
    ),
    Case("cut short", _head("tools/call", len(_SMALL) + 100, "small") + _SMALL, None, closes=True),
    Case(
        "framing conflict",
        _head("tools/list", 5, extra="Transfer-Encoding: chunked\r\n") + b"0\r\n\r\n",
        400,
        closes=True,
    ),
]


@dataclass
class Tally:
    sent: int = 0
    wrong: dict[str, int] = field(default_factory=dict)
    by_case: dict[str, int] = field(default_factory=dict)


async def _read_status(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """Status of one response (its body skipped), and whether the server closes after it."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed")
    status = int(status_line.split()[1])
    length, close, chunked = 0, False, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "connection" and value == "close":
            close = True
        elif name == "transfer-encoding" and value == "chunked":
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        await reader.readexactly(length)
    return status, close


async def _client(
    port: int, cases: list[Case], tally: Tally, budget: list[int], offset: int
) -> None:
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    i = offset
    while budget[0] > 0:
        budget[0] -= 1
        case = cases[i % len(cases)]
        i += 1
        if conn is None:
            conn = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = conn
        writer.write(case.data)
        await writer.drain()
        tally.sent += 1
        tally.by_case[case.name] = tally.by_case.get(case.name, 0) + 1
        try:
            if case.status is None:
                await asyncio.sleep(0.001)
                close = True
            else:
                status, close = await asyncio.wait_for(_read_status(reader), 30)
                if status != case.status:
                    tally.wrong[case.name] = tally.wrong.get(case.name, 0) + 1
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            tally.wrong[case.name] = tally.wrong.get(case.name, 0) + 1
            close = True
        if close or case.closes:
            writer.close()
            conn = None
    if conn is not None:
        conn[1].close()


async def _run(
    port: int, pid: int, requests: int, clients: int, samples: int, log: Any
) -> dict[str, Any]:
    tally = Tally()
    points: list[dict[str, Any]] = [{"requests": 0, "rss_bytes": rss_bytes(pid)}]
    step = max(1, requests // samples)
    started = time.monotonic()
    done = 0
    while done < requests:
        n = min(step, requests - done)
        budget = [n]
        await asyncio.gather(*(_client(port, MIX, tally, budget, offset=k) for k in range(clients)))
        done += n
        points.append(
            {
                "requests": done,
                "rss_bytes": rss_bytes(pid),
                "t_s": round(time.monotonic() - started, 1),
            }
        )
        log(f"  {done:>7} requests  RSS {points[-1]['rss_bytes'] / 2**20:6.1f} MiB")
    warm = points[1]["rss_bytes"] if len(points) > 2 else points[0]["rss_bytes"]
    return {
        "requests": tally.sent,
        "clients": clients,
        "seconds": round(time.monotonic() - started, 1),
        "wrong_answers": tally.wrong,
        "by_case": tally.by_case,
        "rss_start_bytes": points[0]["rss_bytes"],
        "rss_after_first_tenth_bytes": warm,
        "rss_end_bytes": points[-1]["rss_bytes"],
        "rss_max_bytes": max(p["rss_bytes"] or 0 for p in points),
        "growth_after_first_tenth_bytes": (points[-1]["rss_bytes"] or 0) - (warm or 0),
        "samples": points,
    }


def run_mix(
    port: int,
    pid: int,
    *,
    requests: int,
    clients: int = 8,
    samples: int = 10,
    log: Any = lambda _msg: None,
) -> dict[str, Any]:
    """Send the mix to a running gateway (in front of ``bench.upstream``) and report its RSS."""
    return asyncio.run(_run(port, pid, requests, clients, samples, log))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rss", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--out", type=Path, help="also write the report (JSON) here")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="mcp-edge-rss-") as name:
        tmp = Path(name)
        up_port, gw_port = free_port(), free_port()
        upstream = start(
            "upstream",
            python_module("bench.upstream", "--port", str(up_port), "--json-response"),
            log_dir=tmp,
        )
        key = state_keys()
        gateway = start(
            "mcp-edge",
            [
                *venv_command("mcp-edge"),
                "serve",
                "--upstream",
                f"http://127.0.0.1:{up_port}/mcp",
                "--port",
                str(gw_port),
                "--anonymous",
            ],
            log_dir=tmp,
            env={"MCP_EDGE_STATE_KEYS": key},
        )
        try:
            wait_http(upstream, up_port, "/mcp")
            wait_http(gateway, gw_port, "/readyz", ok=(200,))
            log(
                f"{args.requests} requests, {args.clients} clients, mix of {len(MIX)}: {', '.join(c.name for c in MIX)}"
            )
            report = run_mix(
                gw_port, gateway.pid, requests=args.requests, clients=args.clients, log=log
            )
        finally:
            gateway.stop()
            upstream.stop()
    mib = 2**20
    print(
        f"{report['requests']} requests in {report['seconds']} s ({report['requests'] / report['seconds']:.0f}/s), "
        f"wrong answers: {report['wrong_answers'] or 'none'}; gateway RSS {report['rss_start_bytes'] / mib:.1f} MiB at "
        f"start, {report['rss_after_first_tenth_bytes'] / mib:.1f} MiB after the first tenth, "
        f"{report['rss_end_bytes'] / mib:.1f} MiB at the end (max {report['rss_max_bytes'] / mib:.1f} MiB)"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0 if not report["wrong_answers"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
