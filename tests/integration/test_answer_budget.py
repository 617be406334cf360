"""Clients that ask for a large answer and do not read it, against one gateway process in front of
a real SDK upstream (``tests/servers/big_resource.py``).

Each answer the gateway holds counts against ``limits.max_inflight_answer_bytes`` until its
client has taken it; past the budget a client gets 503 ``answer_budget`` for its id; a client
that takes nothing for ``listen.write_timeout`` is disconnected, which gives its share back.
The process's peak resident memory is ``VmHWM`` (the kernel's high-water mark: no sample can
miss the peak); the bound is a generous one: what the test catches is memory growing with the
number of clients (without the budget, every answer sits whole in its connection's buffer:
+160 MiB and more here; ``bench.answer_rss`` measures 40 x 15 MiB), not a few MiB either way.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from bench.answer_rss import request
from tests.conftest import start_gateway, start_upstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MIB = 2**20
CLIENTS = 20
KIB = 8 * 1024  # each answer: 8 MiB of text
BUDGET = 24 * MIB  # two such answers fit, three do not
WRITE_TIMEOUT = 3
CONFIG = {
    "limits": {"max_inflight_answer_bytes": BUDGET},
    "listen": {"write_timeout": WRITE_TIMEOUT},
}


def body_of(rid: int, kib: int) -> bytes:
    return request(0, rid, kib).split(b"\r\n\r\n", 1)[1]


def headers_of(kib: int) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "resources/read",
        "Mcp-Name": f"big://{kib}",
    }


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


def sample(metrics: str, name: str) -> float:
    """The sum of a metric's samples in an exposition (0 when it has none yet)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def connect(port: int) -> socket.socket:
    """A client socket with a small receive buffer: the kernel holds little of an answer for it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.setblocking(False)
    await asyncio.wait_for(asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port)), 10)
    return sock


async def read_all(sock: socket.socket) -> bytes:
    """Everything the gateway sent, until it closed or reset the connection (bounded in time)."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 5)
            if not chunk:
                break
            data += chunk
            head, sep, body = bytes(data).partition(b"\r\n\r\n")
            if sep and b"content-length" in head.lower():
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    break
    except (OSError, TimeoutError):
        pass  # reset, or nothing more
    finally:
        sock.close()
    return bytes(data)


async def wait_for(http: httpx.AsyncClient, done, what: str, seconds: float = 90) -> str:
    deadline = time.monotonic() + seconds
    while True:
        metrics = (await http.get("/metrics")).text
        if done(metrics):
            return metrics
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.2)


def test_clients_that_do_not_read_large_answers_hold_a_bounded_share_of_the_process(
    module_tmp: Path, state_key: str
):
    with ExitStack() as stack:
        upstream = start_upstream(stack, "big_resource.py", module_tmp, "--json-response")
        gateway = start_gateway(
            stack, module_tmp, upstream=upstream.url, keys=state_key, config=CONFIG
        )
        pid = gateway.process.pid

        async def scenario() -> tuple[int, list[bytes], str, httpx.Response]:
            async with httpx.AsyncClient(base_url=gateway.base, timeout=60) as http:
                warm = await http.post("/mcp", content=body_of(0, 1), headers=headers_of(1))
                assert warm.status_code == 200
                started = sample(
                    (await http.get("/metrics")).text, "mcp_edge_upstream_seconds_count"
                )
                rss_before = status_kib(pid, "VmRSS")
                socks = [await connect(gateway.port) for _ in range(CLIENTS)]
                loop = asyncio.get_running_loop()
                for rid, sock in enumerate(socks, 1):
                    await loop.sock_sendall(sock, request(gateway.port, rid, KIB))
                # Every answer arrived from the upstream (and was held, or refused) ...
                await wait_for(
                    http,
                    lambda m: sample(m, "mcp_edge_upstream_seconds_count") >= started + CLIENTS,
                    "the upstream's answers",
                )
                await asyncio.sleep(0.5)
                growth = status_kib(pid, "VmHWM") - rss_before
                # ... and the clients that took nothing were cut off, giving the budget back.
                metrics = await wait_for(
                    http,
                    lambda m: sample(m, "mcp_edge_answer_bytes_held") == 0,
                    "the held answers to be given back",
                    seconds=WRITE_TIMEOUT + 60,
                )
                answers = await asyncio.gather(*(read_all(s) for s in socks))
                # The budget is whole again: a client that reads gets the whole answer.
                whole = await http.post("/mcp", content=body_of(99, KIB), headers=headers_of(KIB))
                return growth, answers, metrics, whole

        growth_kib, answers, metrics, whole = asyncio.run(scenario())
        print(
            f"{CLIENTS} clients x {KIB // 1024} MiB, budget {BUDGET // MIB} MiB: peak +{growth_kib / 1024:.0f} MiB"
        )
        # Without the budget: 20 answers of 8 MiB held at once (+160 MiB and more).
        assert growth_kib / 1024 < 96, f"peak grew by {growth_kib / 1024:.0f} MiB"
        refused, cut = [], []
        for rid, data in enumerate(answers, 1):
            head, _, body = data.partition(b"\r\n\r\n")
            status = head.split(b" ", 2)[1] if head else b""
            if status == b"503":
                assert b"retry-after: 1" in head.lower()
                assert json.loads(body) == {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "error": {
                        "code": -32603,
                        "message": "The gateway is holding as many answers as it may; retry shortly",
                        "data": {"reason": "answer_budget"},
                    },
                }
                refused.append(rid)
            else:  # held, never taken, then the connection was cut: never a whole answer
                assert status == b"200", data[:200]
                assert len(body) < KIB * 1024, "a client that read nothing got its whole answer"
                cut.append(rid)
        # Two fit the budget at once; how many more did depends on when the first were cut off.
        assert refused and cut, (refused, cut)
        assert sample(metrics, "mcp_edge_answer_refused_total") == len(refused)
        assert whole.status_code == 200
        assert whole.json()["result"]["contents"][0]["text"] == ("0123456789abcdef" * 64) * KIB
        assert upstream.process.running and gateway.process.running
