"""The gateway's own CPU per call, in one process, without sockets: the ASGI app is called with a
small ``tools/call`` and its upstream client answers from memory, so what is measured is the
gateway's Python work per request and nothing else (no server, no kernel, no other process).
The floor is the same relay with none of the gateway's checks (``bench.passthrough``'s native
proxy over the same in-memory client).

    uv run python -m bench.hotpath [--calls 20000] [--repeats 5] [--variant plain|all]

``plain`` is a route with nothing configured; ``all`` has policy rules, rate limits and the edge
cache on. Prints microseconds of CPU per call (best of the repeats) for the gateway and the floor,
and the difference: the gateway's own work. A quick, quiet figure for iterating on the request
path; ``bench.layers`` measures the real thing (server, sockets, upstream) in an A/B.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

import orjson

from bench.light import answer
from bench.workloads import PROTOCOL_VERSION

UPSTREAM = "http://127.0.0.1:9/mcp"
KEY = "Z0kwwUzIQHEEpzV56eJz-c0QI4Lz4E-GyoOO4JpoxxQ"

PLAIN = {"routes": [{"name": "light", "path": "/mcp", "upstream": UPSTREAM, "era": "modern"}]}
ALL_ON = {
    "routes": [
        {
            "name": "light",
            "path": "/mcp",
            "upstream": UPSTREAM,
            "era": "modern",
            "legacy_clients": "deny",
            "policy": {
                "rules": [
                    {"when": f'name == "tool{i}" && principal.id == "nobody"', "action": "deny"}
                    for i in range(10)
                ]
            },
            "rate_limits": {"per_principal": "1000000/second", "global": "1000000/second"},
            "cache": {"enabled": True},
        }
    ],
}


class _Response:
    """What the gateway's upstream client hands back: the light upstream's answer, in memory."""

    __slots__ = ("_body", "raw_headers", "status")

    def __init__(self, body: bytes | None) -> None:
        self.status = 200
        self._body = body
        assert body is not None
        self.raw_headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]

    def header(self, name: bytes) -> bytes | None:
        for k, v in self.raw_headers:
            if k == name:
                return v
        return None

    @property
    def finished(self) -> bool:
        return self._body is None

    async def read(self) -> bytes | None:
        body, self._body = self._body, None
        return body

    async def chunks(self) -> Any:
        yield self._body

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class MemoryClient:
    """Stands in for the pooled upstream client (``request`` returns once the head is in)."""

    async def request(
        self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> _Response:
        return _Response(answer(orjson.loads(body)))

    async def close(self) -> None:
        pass


def request(rid: int) -> tuple[dict[str, Any], bytes]:
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "tools/call",
            "params": {
                "name": "small",
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {
                        "name": "mcp-edge-bench",
                        "version": "1",
                    },
                },
            },
        }
    )
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", PROTOCOL_VERSION.encode()),
        (b"mcp-method", b"tools/call"),
        (b"mcp-name", b"small"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8080),
    }
    return scope, body


async def timed_calls(
    app: Callable[..., Any], calls: int, scope: dict[str, Any], body: bytes
) -> tuple[float, list[int]]:
    """CPU seconds for ``calls`` sequential requests (``scope`` and ``body``), and the statuses
    they were answered with."""
    never = asyncio.Event()
    statuses: list[int] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.process_time()
    for _ in range(calls):
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await never.wait()
            return {"type": "http.disconnect"}

        await app({**scope, "headers": list(scope["headers"])}, receive, send)
        await asyncio.sleep(
            0
        )  # the loop runs what the request left scheduled (a cancelled watcher, timers)
    return time.process_time() - started, statuses


async def drive(app: Callable[..., Any], calls: int) -> float:
    """CPU seconds for ``calls`` sequential requests."""
    spent, statuses = await timed_calls(app, calls, *request(1))
    if statuses.count(200) != calls:
        raise SystemExit(f"unexpected answers: {sorted(set(statuses))}")
    return spent


def gateway_app(doc: dict[str, Any]) -> Any:
    try:
        from mcp_edge.server.app import GatewayApp
        from mcp_edge.server.config import GatewayConfig, load_key_ring
    except ImportError:  # an older layout (a baseline checkout)
        from gateway.app import GatewayApp  # type: ignore[no-redef]
        from gateway.config import GatewayConfig, load_key_ring  # type: ignore[no-redef]

    config = GatewayConfig.model_validate(
        {**doc, "auth": {"mode": "anonymous"}, "state": {"keys": [KEY]}}
    )
    try:
        app = GatewayApp(config, load_key_ring(config.state), upstream_client=MemoryClient())  # type: ignore[arg-type]
    except TypeError:  # an older layout: its client is an attribute
        app = GatewayApp(config, load_key_ring(config.state))
        app._upstream_client = MemoryClient()
    app.reachable = True
    return app


def floor_app() -> Any:
    from bench.passthrough import NativeProxy

    proxy = NativeProxy(UPSTREAM)
    proxy._native = MemoryClient()
    return proxy


async def measure(calls: int, repeats: int, variant: str) -> dict[str, float]:
    gateway = gateway_app(ALL_ON if variant == "all" else PLAIN)
    floor = floor_app()
    await drive(gateway, 500)  # warm up: labelled metrics, caches, first-use wiring
    await drive(floor, 500)
    best_gateway = best_floor = float("inf")
    for _ in range(repeats):
        best_gateway = min(best_gateway, await drive(gateway, calls) / calls)
        best_floor = min(best_floor, await drive(floor, calls) / calls)
    return {
        "gateway_us": best_gateway * 1e6,
        "floor_us": best_floor * 1e6,
        "own_us": (best_gateway - best_floor) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.hotpath", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variant", choices=("plain", "all"), default="plain")
    args = parser.parse_args(argv)
    import uvloop

    result = uvloop.run(measure(args.calls, args.repeats, args.variant))
    print(
        f"{args.variant}: gateway {result['gateway_us']:.1f} us/call, floor {result['floor_us']:.1f} us/call, "
        f"own work {result['own_us']:.1f} us/call"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
