"""A local server's processes over their life: a crash loses no call that had not reached the
dead process, a burst of new callers cannot cost an active caller his process, and a caller who
only listens keeps his.

Real servers over stdio: tests/servers/legacy_server.py (FastMCP, ``mcp==1.30.0``; its
``crash_after_question`` exits mid-call) and tests/servers/session_state.py (FastMCP 1.x keeping
its session's roots, and ``touch``: a tool list change for its session). Callers come from the
trusted-header mode, so anyone who can send the header mints principals.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running, start_gateway
from tests.integration.test_stdio_isolation import Listener, call, roots_call
from tests.integration.test_stdio_upstream import (
    ACCEPT,
    CAPS,
    MODERN,
    PRINCIPAL_HEADER,
    config,
    post,
    wait_ready,
)
from tests.scale.cluster import metric, scrape
from tests.support.sandbox import stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BURST = 30
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": CAPS,
}


def headers(tool: str, who: str = "alice") -> dict[str, str]:
    return {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        PRINCIPAL_HEADER: who,
    }


@pytest.fixture(scope="module")
def gw(module_tmp: Path, state_key: str):
    legacy = stdio_server_command("legacy_server.py", "--stdio")
    state = stdio_server_command("session_state.py")
    routes = [
        {
            "name": "crash",
            "path": "/crash",
            "upstream": {"command": legacy, "isolation": "shared"},
        },
        {"name": "fair", "path": "/fair", "upstream": {"command": state, "max_processes": 3}},
        {"name": "listen", "path": "/listen", "upstream": {"command": state, "idle_seconds": 1}},
    ]
    with ExitStack() as stack:
        gateway = start_gateway(
            stack, module_tmp, keys=state_key, config=config(routes), anonymous=False
        )
        wait_ready(gateway)
        yield gateway


def pool(gw: Running, route: str, event: str) -> float:
    return metric(scrape(gw.base), "mcp_edge_stdio_pool_total", route=route, event=event)


def route_state(gw: Running, route: str) -> dict[str, Any]:
    return httpx.get(gw.base + "/readyz", timeout=5).json()["routes"][route]


def whoami(gw: Running, path: str, request_id: int, who: str) -> httpx.Response:
    return call(gw.base, path, request_id, "whoami", who=who)


# ---- F11: a crash loses nothing ------------------------------------------------------------


def test_a_call_sent_right_after_a_crash_waits_for_the_restarted_process(gw):
    """The process exits during a call: that call gets upstream_exited; the call sent at once
    after that answer never reached the dead process, so it waits for the restart and works."""
    first = post(gw.base + "/crash", 1, "tools/call", {"name": "crash_after_question"})
    assert first["result"]["resultType"] == "input_required", first
    crashed = post(
        gw.base + "/crash",
        2,
        "tools/call",
        {
            "name": "crash_after_question",
            "arguments": {},
            "inputResponses": {"elicitation-1": {"action": "accept", "content": {"confirm": True}}},
            "requestState": first["result"]["requestState"],
        },
    )
    assert crashed["status"] == 502 and crashed["error"]["data"] == {"reason": "upstream_exited"}
    after = post(
        gw.base + "/crash", 3, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}
    )
    assert after["status"] == 200 and after["result"]["structuredContent"] == {"result": 3}, after


def test_a_call_waiting_for_the_process_when_it_dies_gets_the_restarted_one(gw):
    """A long call holds the one process (its progress shows it runs there); a second call waits
    for it. The process is killed: the long call gets upstream_exited, the waiting one, which
    had not been sent, runs on the restarted process."""
    (proc,) = route_state(gw, "crash")["processes"]
    progressed = threading.Event()
    outcome: dict[str, Any] = {}

    def long_call() -> None:
        body = {
            "jsonrpc": "2.0",
            "id": "long",
            "method": "tools/call",
            "params": {
                "name": "progress_steps",
                "arguments": {"steps": 400},
                "_meta": {**META, "progressToken": "long"},
            },
        }
        with httpx.stream(
            "POST", gw.base + "/crash", json=body, headers=headers("progress_steps"), timeout=60
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data:") and '"notifications/progress"' in line:
                    progressed.set()
                elif line.startswith("data:"):
                    outcome["long"] = json.loads(line[5:])

    def waiting_call() -> None:
        outcome["waiting"] = post(
            gw.base + "/crash",
            "waiting",
            "tools/call",
            {"name": "add", "arguments": {"a": 2, "b": 2}},
        )

    threads = [threading.Thread(target=long_call, daemon=True)]
    threads[0].start()
    assert progressed.wait(30), outcome
    threads.append(threading.Thread(target=waiting_call, daemon=True))
    threads[1].start()
    time.sleep(0.5)  # (it waits for the process's lease meanwhile; later, it waits for the restart)
    os.kill(proc["pid"], signal.SIGKILL)
    for thread in threads:
        thread.join(60)
    assert outcome["long"]["error"]["data"] == {"reason": "upstream_exited"}, outcome
    waited = outcome["waiting"]
    assert waited["status"] == 200 and waited["result"]["structuredContent"] == {"result": 4}, (
        waited
    )


# ---- F12: a burst of new callers cannot cost an active caller his process ---------------------


def test_a_burst_of_new_principals_does_not_evict_an_active_callers_process(gw):
    """alice's process knows her roots (asked once). Then 30 principals nobody has seen, one
    call each, on a route of 3 processes: alice used hers a moment ago, so it is not stopped for
    them (they are told busy, 503 with Retry-After, once the spare and the free slot are taken),
    alice's roots are still known, and the burst started at most as many processes as the route
    holds."""
    label = whoami(gw, "/fair", 1, "alice").json()["result"]["content"][0]["text"]
    assert roots_call([gw.base], "/fair", "my_roots", "alice") == (1, "file:///home/alice/project")
    started = pool(gw, "fair", "started")
    statuses = []
    for i in range(BURST):
        r = whoami(gw, "/fair", 10 + i, f"minted-{i}")
        statuses.append(r.status_code)
        if r.status_code == 503:
            assert r.headers["retry-after"] == "1"
            assert r.json()["error"]["data"] == {"reason": "upstream_busy"}
    assert set(statuses) <= {200, 503} and statuses.count(200) >= 1, statuses
    assert pool(gw, "fair", "started") - started <= 3
    assert whoami(gw, "/fair", 99, "alice").json()["result"]["content"][0]["text"] == label
    assert roots_call([gw.base], "/fair", "my_roots", "alice") == (0, "file:///home/alice/project")


# ---- F13: a caller who only listens keeps his process ------------------------------------------


def test_a_listening_caller_keeps_his_process_past_idle_seconds(gw):
    """idle_seconds 1: bob's process, after one call, is reaped; alice only listens, and hers is
    kept (her stream is in flight): what it pushes afterwards still reaches her stream, from the
    same process."""
    url = gw.base + "/listen"
    alice = Listener(url, "alice", "listen-alice")
    try:
        alice.wait(lambda: any("acknowledged" in m.get("method", "") for m in alice.messages))
        label = whoami(gw, "/listen", 1, "alice").json()["result"]["content"][0]["text"]
        reaped = pool(gw, "listen", "reaped")
        assert whoami(gw, "/listen", 2, "bob").status_code == 200
        deadline = time.monotonic() + 60
        while pool(gw, "listen", "reaped") == reaped and time.monotonic() < deadline:
            time.sleep(0.2)
        assert pool(gw, "listen", "reaped") > reaped  # bob's: idle past idle_seconds
        assert route_state(gw, "listen")["principals"] == 1  # alice still holds hers
        touched = call(gw.base, "/listen", 3, "touch", who="alice").json()
        assert touched["result"]["content"][0]["text"] == label
        alice.wait(lambda: len(alice.updates()) == 1)
    finally:
        alice.close()
