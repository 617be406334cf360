"""The legacy bridge's buffers draw from the process's answer budget: clients that ask a 2025-era
server (tests/servers/legacy_server.py, FastMCP from ``mcp==1.30.0``, unmodified) for a large
resource and read nothing hold a bounded share of one gateway process.

Before, the bridge read each answer whole (its SSE event, the parsed message, the message
re-encoded) before the budget saw it: every client's answer was in memory at once, and only then
refused. Now what the bridge holds of an answer is counted as it arrives; one that would go over
is not read further (the client gets 503 ``answer_budget`` for its id), and what the bridge held
is given back as it hands the answer on, when the edge counts what it holds of it. The bound
asserted is a generous one (``VmHWM``, the kernel's high-water mark): what it catches is memory
growing with the number of clients, not a few MiB either way (``bench.answer_rss --bridge``
measures 16 x 15 MiB).
"""

from __future__ import annotations

import asyncio
import json
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from bench.answer_rss import request
from tests.conftest import start_gateway
from tests.integration.test_answer_budget import (
    body_of,
    connect,
    headers_of,
    read_all,
    sample,
    status_kib,
    wait_for,
)
from tests.support.legacy import start_legacy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MIB = 2**20
CLIENTS = 32
KIB = 8 * 1024  # each answer: 8 MiB of text
BUDGET = 16 * MIB
WRITE_TIMEOUT = 3


def test_clients_that_read_nothing_hold_a_bounded_share_through_the_bridge(
    module_tmp: Path, state_key: str
):
    with ExitStack() as stack:
        legacy = start_legacy(stack, module_tmp)
        gateway = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "limits": {"max_inflight_answer_bytes": BUDGET},
                "listen": {"write_timeout": WRITE_TIMEOUT},
                "routes": [
                    {"name": "old", "path": "/mcp", "upstream": legacy.url, "era": "legacy"}
                ],
            },
        )
        pid = gateway.process.pid

        async def scenario() -> tuple[int, list[bytes], str, httpx.Response]:
            async with httpx.AsyncClient(base_url=gateway.base, timeout=60) as http:
                warm = await http.post("/mcp", content=body_of(0, 1), headers=headers_of(1))
                assert warm.status_code == 200, warm.text
                rss_before = status_kib(pid, "VmRSS")
                socks = [await connect(gateway.port) for _ in range(CLIENTS)]
                loop = asyncio.get_running_loop()
                for rid, sock in enumerate(socks, 1):
                    await loop.sock_sendall(sock, request(gateway.port, rid, KIB))
                # Every client was answered or refused, and those holding an answer were cut
                # off for taking nothing: the budget is whole again.
                metrics = await wait_for(
                    http,
                    lambda m: (
                        sample(m, "mcp_edge_requests_total") >= CLIENTS + 1
                        and sample(m, "mcp_edge_inflight_requests") == 0
                        and sample(m, "mcp_edge_answer_bytes_held") == 0
                    ),
                    "every answer refused or given back",
                    seconds=WRITE_TIMEOUT + 90,
                )
                growth = status_kib(pid, "VmHWM") - rss_before
                answers = await asyncio.gather(*(read_all(s) for s in socks))
                whole = await http.post("/mcp", content=body_of(99, KIB), headers=headers_of(KIB))
                return growth, answers, metrics, whole

        growth_kib, answers, metrics, whole = asyncio.run(scenario())
        print(
            f"{CLIENTS} clients x {KIB // 1024} MiB through the bridge: +{growth_kib / 1024:.0f} MiB"
        )
        refused = []
        for rid, data in enumerate(answers, 1):
            head, _, body = data.partition(b"\r\n\r\n")
            if head.split(b" ", 2)[1:2] == [b"503"]:
                assert json.loads(body)["error"]["data"] == {"reason": "answer_budget"}
                assert json.loads(body)["id"] == rid
                refused.append(rid)
        assert refused, "nothing was refused: the budget was never reached"
        # Before: every client's answer read whole at once (+309 MiB here, growing with the
        # clients); now: the budget's worth, and the answers being handed on (+103 to +121 MiB).
        assert growth_kib / 1024 < 200, f"peak grew by {growth_kib / 1024:.0f} MiB"
        assert whole.status_code == 200
        assert whole.json()["result"]["contents"][0]["text"] == ("0123456789abcdef" * 64) * KIB
        assert legacy.process.running and gateway.process.running
