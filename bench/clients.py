"""The HTTP client library for the gateway's calls off the hot path, picked by measurement.

Off the hot path the gateway fetches JWK Sets, drives 2025-era sessions of the legacy bridge
(POSTs answered by SSE streams read event by event), forwards retries to other replicas, relays
2025-era requests (streamed), and probes upstreams. This runs each kind of call with aiohttp and
with httpx against one local server (uvicorn, uvloop + httptools), sequentially on a keep-alive
connection, and reports the client process's CPU per call and the median latency.

    uv run python -m bench.clients [--calls 2000] [--repeats 3]

Writes ``bench/results/clients.json`` and ``clients.md``.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import uvicorn

RESULTS_DIR = Path(__file__).resolve().parent / "results"
JWKS = orjson.dumps(
    {
        "keys": [
            {"kty": "EC", "crv": "P-256", "kid": f"k{i}", "x": "x" * 43, "y": "y" * 43}
            for i in range(3)
        ]
    }
)
EVENTS = 20


async def server_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    path = scope["path"]
    if path == "/jwks":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(JWKS)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": JWKS})
    elif path == "/sse":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        for i in range(EVENTS):
            event = (
                b'id: %d\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":%d}}\n\n'
                % (i, i)
            )
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send(
            {
                "type": "http.response.body",
                "body": b'data: {"jsonrpc":"2.0","id":1,"result":{}}\n\n',
            }
        )
    else:  # /post: a small JSON answer to a small JSON request (a forward, a probe, a POSTed answer)
        answer = b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}'
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(answer)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer})


def serve() -> tuple[uvicorn.Server, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            server_app,
            loop="uvloop",
            http="httptools",
            access_log=False,
            log_level="warning",
            lifespan="off",
        )
    )
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return server, port


BODY = orjson.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x", "arguments": {}}}
)
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def aiohttp_calls(
    base: str,
) -> tuple[Callable[[], Awaitable[Any]], dict[str, Callable[[Any], Awaitable[None]]]]:
    import aiohttp

    async def make() -> Any:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=16), auto_decompress=False, trust_env=False
        )

    async def jwks(s: Any) -> None:
        async with s.get(base + "/jwks") as r:
            json.loads(await r.content.read(256 * 1024))

    async def post(s: Any) -> None:
        async with s.post(base + "/post", data=BODY, headers=HEADERS) as r:
            orjson.loads(await r.read())

    async def sse(s: Any) -> None:
        async with s.post(base + "/sse", data=BODY, headers=HEADERS) as r:
            n = 0
            async for _chunk in r.content.iter_any():
                n += 1

    return make, {"jwks_get": jwks, "post_json": post, "post_sse": sse}


def httpx_calls(
    base: str,
) -> tuple[Callable[[], Awaitable[Any]], dict[str, Callable[[Any], Awaitable[None]]]]:
    import httpx

    async def make() -> Any:
        return httpx.AsyncClient(limits=httpx.Limits(max_connections=16), trust_env=False)

    async def jwks(c: Any) -> None:
        r = await c.get(base + "/jwks")
        json.loads(r.content)

    async def post(c: Any) -> None:
        r = await c.post(base + "/post", content=BODY, headers=HEADERS)
        orjson.loads(r.content)

    async def sse(c: Any) -> None:
        async with c.stream("POST", base + "/sse", content=BODY, headers=HEADERS) as r:
            n = 0
            async for _chunk in r.aiter_raw():
                n += 1

    return make, {"jwks_get": jwks, "post_json": post, "post_sse": sse}


async def measure(base: str, calls: int, repeats: int) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    libraries = {"aiohttp": aiohttp_calls(base), "httpx": httpx_calls(base)}
    clients = {name: await make() for name, (make, _) in libraries.items()}
    try:
        for kind in ("jwks_get", "post_json", "post_sse"):
            best: dict[str, dict[str, float]] = {}
            for _ in range(repeats):  # interleaved: each library in turn, best of the repeats
                for name, (_, calls_of) in libraries.items():
                    call, client = calls_of[kind], clients[name]
                    for _ in range(50):
                        await call(client)
                    latencies = []
                    cpu0 = time.process_time()
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        await call(client)
                        latencies.append(time.perf_counter() - t0)
                    cpu = (time.process_time() - cpu0) / calls
                    cell = {
                        "cpu_us": round(cpu * 1e6, 1),
                        "p50_us": round(statistics.median(latencies) * 1e6, 1),
                    }
                    if name not in best or cell["cpu_us"] < best[name]["cpu_us"]:
                        best[name] = cell
            out[kind] = best
    finally:
        await clients["aiohttp"].close()
        await clients["httpx"].aclose()
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Off-path HTTP clients ({report['started_at']})",
        "",
        "CPU of the calling process per call, and median latency, in microseconds (best of "
        f"{report['repeats']} interleaved repeats of {report['calls']} calls; the server, uvicorn, runs in the "
        "same process: its share is the same for both).",
        "",
        "| call | aiohttp CPU µs | httpx CPU µs | httpx ÷ aiohttp | aiohttp p50 µs | httpx p50 µs |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for kind, row in report["results"].items():
        a, x = row["aiohttp"], row["httpx"]
        lines.append(
            f"| {kind} | {a['cpu_us']} | {x['cpu_us']} | {x['cpu_us'] / a['cpu_us']:.2f} | "
            f"{a['p50_us']} | {x['p50_us']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import datetime as dt

    import uvloop

    parser = argparse.ArgumentParser(
        prog="python -m bench.clients", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    server, port = serve()
    try:
        results = uvloop.run(measure(f"http://127.0.0.1:{port}", args.calls, args.repeats))
    finally:
        server.should_exit = True
    report = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "calls": args.calls,
        "repeats": args.repeats,
        "results": results,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "clients.json").write_text(json.dumps(report, indent=1) + "\n")
    md = markdown(report)
    (args.out_dir / "clients.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
