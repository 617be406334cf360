"""Graceful shutdown: on SIGTERM the gateway stops accepting, lets in-flight streams finish within
the drain time, then exits."""

from __future__ import annotations

import asyncio
import signal
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_gateway, start_upstream

pytestmark = pytest.mark.integration


def _call(steps: int, delay: float) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "slow_progress",
            "arguments": {"steps": steps, "delay": delay},
            "_meta": {
                "progressToken": "p",
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "slow_progress",
}


async def test_sigterm_drains_in_flight_streams(tmp_path: Path, state_key: str):
    with ExitStack() as stack:
        upstream = start_upstream(stack, "streaming.py", tmp_path)
        gateway = start_gateway(
            stack,
            tmp_path,
            upstream=upstream.url,
            keys=state_key,
            env={"MCP_EDGE_DRAIN_SECONDS": "10"},
        )
        lines: list[str] = []
        async with (
            httpx.AsyncClient(timeout=20) as http,
            http.stream("POST", gateway.url, headers=HEADERS, json=_call(4, 0.5)) as r,
        ):
            async for line in r.aiter_lines():
                lines.append(line)
                if len(lines) == 1:
                    gateway.process.popen.send_signal(signal.SIGTERM)
                    # Draining: the listener closes, new connections are refused.
                    refused = False
                    deadline = time.monotonic() + 5
                    while not refused and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
                        try:
                            async with httpx.AsyncClient(timeout=5) as fresh:
                                await fresh.get(gateway.base + "/healthz")
                        except httpx.ConnectError:
                            refused = True
                    assert refused
        assert any('"result"' in line and "done after 4 steps" in line for line in lines)
        deadline = time.monotonic() + 10
        while gateway.process.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # uvicorn raises the signal again once it has drained: the process ends by it.
        assert not gateway.process.running
        assert gateway.process.popen.returncode == -signal.SIGTERM


async def test_several_workers_serve_and_stop(tmp_path: Path, state_key: str):
    """`--workers 2`: independent processes on one port finish each other's MRTR flows (they share
    only the key ring), /metrics adds up every worker's counts, and all stop on SIGTERM."""
    with ExitStack() as stack:
        upstream = start_upstream(stack, "streaming.py", tmp_path)
        gateway = start_gateway(
            stack,
            tmp_path,
            upstream=upstream.url,
            keys=state_key,
            env={"MCP_EDGE_WORKERS": "2"},
            startup_timeout=150,
        )
        ask = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "ask_color",
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                },
            },
        }
        headers = {**HEADERS, "Mcp-Name": "ask_color"}
        for _ in range(6):  # fresh connections, so both workers take some
            async with httpx.AsyncClient(timeout=20) as http:
                first = (await http.post(gateway.url, headers=headers, json=ask)).json()["result"]
            retry = {
                **ask,
                "id": 2,
                "params": {
                    **ask["params"],
                    "requestState": first["requestState"],
                    "inputResponses": {"color": {"action": "accept", "content": {"color": "blue"}}},
                },
            }
            async with httpx.AsyncClient(timeout=20) as http:
                done = (await http.post(gateway.url, headers=headers, json=retry)).json()
            assert done["result"]["content"][0]["text"] == "colour=blue state=asked-color"
        # Whichever worker answers /metrics counts all of them (Prometheus multi-process files).
        for _ in range(6):
            async with httpx.AsyncClient(timeout=20) as http:
                text = (await http.get(gateway.base + "/metrics")).text
            calls = [
                line
                for line in text.splitlines()
                if line.startswith("mcp_edge_requests_total{") and 'method="tools/call"' in line
            ]
            assert len(calls) == 1 and float(calls[0].rsplit(" ", 1)[1]) == 12.0, calls
            assert "mcp_edge_mrtr_flows_completed_total" in text
            inflight = [
                line for line in text.splitlines() if line.startswith("mcp_edge_inflight_requests{")
            ]
            assert inflight and all("pid=" not in line for line in inflight), (
                inflight
            )  # summed, not per worker
        gateway.process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while gateway.process.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not gateway.process.running
