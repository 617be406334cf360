"""The series deploy/prometheus/rules.yml alerts on, as the gateway exports them: the parked-call
cap and the lot it bounds, body refusals by reason, and the series that must exist before their
first event (a counter that appears at 1 hides that first event from ``increase()``)."""

from __future__ import annotations

import asyncio
from typing import Any

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.observability.metrics import Metrics
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import GatewayConfig, load_config
from mcp_edge.upstream.legacy.parking import ParkedCall
from mcp_edge.upstream.stdio.processes import StdioSessions
from mcp_edge.upstream.stdio.spec import StdioSpec

ROUTE = "default"


def _config(**limits: int) -> GatewayConfig:
    config = load_config(
        None, env={}, flags={"upstream": "http://127.0.0.1:9/mcp", "anonymous": True}
    )
    for name, value in limits.items():
        setattr(config.limits, name, value)
    return config


def _sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def _ok_upstream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":1,"result":{}}'})


async def test_every_bridge_parks_in_the_replicas_lot_sized_by_max_parked() -> None:
    config = _config()
    config.cluster.max_parked = 3
    app = GatewayApp(config, KeyRing([parse_key_spec(generate_key())]))
    assert app.bridges[ROUTE].parking is app.parking, (
        "one lot per replica, bounded by cluster.max_parked"
    )
    assert app.bridges[ROUTE].parking.max_parked == 3
    assert _sample(app.metrics, "mcp_edge_bridge_parked_capacity") == 3
    assert _sample(app.metrics, "mcp_edge_bridge_parked_calls", route=ROUTE) == 0, (
        "exported before any call"
    )


class _Session:
    async def post(self, message: Any) -> None:
        return None

    async def close(self) -> None:
        return None


class _Call:
    """What abandoning a parked call touches: the call and its legacy session."""

    session = _Session()

    def close(self) -> None:
        return None


async def test_a_parked_call_that_waited_too_long_leaves_the_gauge() -> None:
    app = GatewayApp(_config(), KeyRing([parse_key_spec(generate_key())]))
    bridge = app.bridges[ROUTE]
    bridge.parking.park(ParkedCall(route=ROUTE, principal_id="alice", call=_Call()), 0.01)  # type: ignore[arg-type]
    app.metrics.parked.labels(ROUTE).set(len(bridge.parking))  # as the bridge does when it parks
    assert _sample(app.metrics, "mcp_edge_bridge_parked_calls", route=ROUTE) == 1
    for _ in range(200):
        if not len(bridge.parking):
            break
        await asyncio.sleep(0.01)
    assert len(bridge.parking) == 0
    assert _sample(app.metrics, "mcp_edge_bridge_parked_calls", route=ROUTE) == 0


async def _post(app: GatewayApp, declared: int) -> int:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": b"{}", "more_body": False}
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    status = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"content-type", b"application/json"),
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-protocol-version", b"2026-07-28"),
        (b"content-length", str(declared).encode()),
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
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }
    await asyncio.wait_for(app(scope, receive, send), 10)
    return status


async def test_body_refusals_are_counted_by_reason() -> None:
    app = GatewayApp(
        _config(max_body_bytes=1000, max_inflight_body_bytes=1000),
        KeyRing([parse_key_spec(generate_key())]),
        inner_apps={ROUTE: _ok_upstream},
    )
    assert await _post(app, 5000) == 413
    assert app.body_budget.try_take(1000)  # requests in flight hold the whole budget
    assert await _post(app, 10) == 503
    assert await _post(app, 10) == 503
    app.body_budget.give_back(1000)
    assert _sample(app.metrics, "mcp_edge_body_refused_total", route=ROUTE, reason="size") == 1
    assert (
        _sample(app.metrics, "mcp_edge_body_refused_total", route=ROUTE, reason="body_budget") == 2
    )


def test_stdio_restarts_are_exported_before_the_first_one() -> None:
    metrics = Metrics()
    StdioSessions("local", StdioSpec(command=("true",)), metrics)
    assert _sample(metrics, "mcp_edge_stdio_restarts_total", route="local") == 0
