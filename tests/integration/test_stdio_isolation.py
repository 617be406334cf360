"""Callers of one local (stdio) server never share its session state (``isolation: principal``,
the default where callers authenticate).

A stdio process is one 2025-era session, and real servers keep state per session: the published
Node everything server remembers the roots it was told (``get-roots-list``), and
tests/servers/session_state.py (FastMCP, ``mcp==1.30.0``) its roots, the log level set with
``logging/setLevel`` and its resource subscriptions. Two callers come from the trusted-header
mode; two replicas share the key ring (a call's second round reaches the other one). A third
route, bounded to one process idle after 2 s, shows eviction, the busy answer and idle reaping.
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

from tests.conftest import Running, require, start_gateway
from tests.integration.test_stdio_upstream import (
    ACCEPT,
    MODERN,
    PRINCIPAL_HEADER,
    config,
    everything_launcher,
    wait_ready,
)
from tests.support.legacy import legacy_initialize
from tests.support.sandbox import public_everything, stdio_server_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOTS_CAPS = {"roots": {}}


def roots_of(who: str) -> list[dict[str, str]]:
    return [{"uri": f"file:///home/{who}/project", "name": who}]


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    launcher = everything_launcher()
    require(
        launcher is not None,
        "the Node everything server needs npm (scripts/install-stdio-servers.sh)",
    )
    node, _ = public_everything(launcher)
    state = stdio_server_command("session_state.py")
    routes = [
        {"name": "node", "path": "/node", "upstream": {"command": [node]}},
        {
            "name": "state",
            "path": "/state",
            "upstream": {"command": state},
            "bridge": {"strategy": ["park"], "tools": {"my_roots": ["replay"]}},
        },
    ]
    with ExitStack() as stack:
        replicas = [
            start_gateway(stack, module_tmp, keys=state_key, config=config(routes), anonymous=False)
            for _ in range(2)
        ]
        for gw in replicas:
            wait_ready(gw)
        yield {"gw": replicas[0], "other": replicas[1], "state": state}


def call(
    base: str,
    path: str,
    request_id: int,
    tool: str,
    *,
    who: str,
    state: str | None = None,
    answers: dict[str, Any] | None = None,
) -> httpx.Response:
    """A 2026-07-28 ``tools/call`` declaring roots (and, as a retry, its answers and state)."""
    params: dict[str, Any] = {
        "name": tool,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": ROOTS_CAPS,
        },
    }
    if state is not None:
        params["requestState"] = state
        params["inputResponses"] = answers or {}
    return httpx.post(
        base + path,
        headers={
            "Accept": ACCEPT,
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
            PRINCIPAL_HEADER: who,
        },
        json={"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
        timeout=60,
    )


def roots_call(
    bases: list[str], path: str, tool: str, who: str, *, answer_as: str | None = None
) -> tuple[int, str]:
    """Call ``tool`` as ``who``; answer every ``roots/list`` it asks with ``answer_as``'s roots
    (default ``who``'s), each round at the next replica of ``bases``. How many rounds asked, and
    the text of the result."""
    doc = call(bases[0], path, 1, tool, who=who).json()
    asked = 0
    while doc.get("result", {}).get("resultType") == "input_required":
        asked += 1
        assert asked <= 3, doc
        questions = doc["result"]["inputRequests"]
        assert {q["method"] for q in questions.values()} == {"roots/list"}, questions
        doc = call(
            bases[asked % len(bases)],
            path,
            1 + asked,
            tool,
            who=who,
            state=doc["result"]["requestState"],
            answers={k: {"roots": roots_of(answer_as or who)} for k in questions},
        ).json()
    assert "result" in doc, doc
    return asked, "".join(b.get("text", "") for b in doc["result"]["content"])


def ready(gw: Running) -> dict[str, Any]:
    return httpx.get(gw.base + "/readyz", timeout=5).json()


# ---- the published Node server --------------------------------------------------------------


def test_each_caller_is_asked_for_his_own_roots_and_never_sees_anothers(env):
    """get-roots-list asks the client once per session and remembers the answer: bob, on the
    same route after alice, is asked for his own roots, and his second round (answered at the
    other replica, forwarded to the one holding his call) continues in his own process."""
    gw, other = env["gw"], env["other"]
    asked, text = roots_call([gw.base], "/node", "get-roots-list", "alice")
    assert asked >= 1 and "file:///home/alice/project" in text
    asked, text = roots_call([gw.base, other.base], "/node", "get-roots-list", "bob")
    assert asked >= 1, text  # bob was asked, not answered from alice's session
    assert "file:///home/bob/project" in text and "alice" not in text
    asked, text = roots_call([gw.base], "/node", "get-roots-list", "alice")
    assert asked == 0 and "file:///home/alice/project" in text and "bob" not in text
    log = gw.process.log_tail(1_000_000) + other.process.log_tail(1_000_000)
    assert "alice" not in log and "bob" not in log  # principals are never logged


# ---- an SDK server keeping its session's state ------------------------------------------------


def legacy_session(http: httpx.Client, url: str, who: str) -> dict[str, str]:
    r = http.post(
        url,
        headers={"Accept": ACCEPT, PRINCIPAL_HEADER: who},
        json=legacy_initialize(f"{who}-client", {"roots": {}}),
    )
    assert r.status_code == 200, r.text
    headers = {
        "Accept": ACCEPT,
        PRINCIPAL_HEADER: who,
        "Mcp-Session-Id": r.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert http.post(url, headers=headers, json=note).status_code == 202
    return headers


def legacy_request(
    http: httpx.Client, url: str, headers: dict[str, str], request_id: int, method: str, **params
) -> dict[str, Any]:
    """A 2025-era request on a virtual session; its response, read from the SSE stream."""
    r = http.post(
        url,
        headers=headers,
        json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
    )
    assert r.status_code == 200, r.text
    messages = [json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")]
    return next(m for m in messages if m.get("id") == request_id)


def tool_text(http: httpx.Client, url: str, headers: dict[str, str], rid: int, name: str) -> str:
    doc = legacy_request(http, url, headers, rid, "tools/call", name=name, arguments={})
    return doc["result"]["content"][0]["text"] if doc["result"]["content"] else ""


def test_the_log_level_and_subscriptions_one_caller_sets_are_not_anothers(env):
    """2025-era clients: alice sets her session's log level and subscribes to a resource; bob's
    session, on the same route, has neither; alice's own second session (same caller) does."""
    url = env["gw"].base + "/state"
    with httpx.Client(timeout=30) as http:
        alice = legacy_session(http, url, "alice")
        assert "result" in legacy_request(http, url, alice, 2, "logging/setLevel", level="error")
        subscribed = legacy_request(
            http, url, alice, 3, "resources/subscribe", uri="state://counter"
        )
        assert "result" in subscribed
        assert tool_text(http, url, alice, 4, "my_log_level") == "error"
        bob = legacy_session(http, url, "bob")
        assert tool_text(http, url, bob, 5, "my_log_level") == "unset"
        assert tool_text(http, url, bob, 6, "my_subscriptions") == ""
        assert tool_text(http, url, bob, 7, "whoami") != tool_text(http, url, alice, 8, "whoami")
        again = legacy_session(http, url, "alice")
        assert tool_text(http, url, again, 9, "my_subscriptions") == "state://counter"


class Listener:
    """A 2026-07-28 ``subscriptions/listen`` stream of ``who`` for tool list changes, read in a
    thread: every message it delivers, in order."""

    def __init__(self, url: str, who: str, request_id: str) -> None:
        self.messages: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self.status = 0
        self._client = httpx.Client(timeout=httpx.Timeout(10, read=None))
        self._request = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "subscriptions/listen",
            "params": {
                "notifications": {"toolsListChanged": True},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
        self._headers = {
            "Accept": ACCEPT,
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "subscriptions/listen",
            PRINCIPAL_HEADER: who,
        }
        self._url = url
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self._client.stream(
                "POST", self._url, json=self._request, headers=self._headers
            ) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        self.messages.append(json.loads(line[5:]))
                    elif line.startswith("{"):  # an answer that is no stream (an error)
                        self.messages.append(json.loads(line))
        except BaseException as exc:  # closed by the test, or a failure it reports
            self.error = exc

    def updates(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m.get("method") == "notifications/tools/list_changed"]

    def wait(self, predicate: Any, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not predicate() and time.monotonic() < deadline:
            assert self._thread.is_alive() or predicate(), (self.status, self.error, self.messages)
            time.sleep(0.05)
        assert predicate(), (self.status, self.error, self.messages)

    def close(self) -> None:
        self._client.close()
        self._thread.join(timeout=10)


def test_a_listen_stream_hears_only_its_own_callers_process(env):
    """alice and bob listen for tool list changes on the same stdio route; what alice's process
    pushes reaches alice's stream only, and bob's own process reaches his (a stream that heard
    every process of the route would deliver alice's update to bob as well)."""
    url = env["gw"].base + "/state"
    alice = Listener(url, "alice", "listen-alice")
    bob = Listener(url, "bob", "listen-bob")
    try:
        for stream in (alice, bob):  # both streams acknowledged: each is listening now
            stream.wait(
                lambda s=stream: any(
                    "subscriptions/acknowledged" in m.get("method", "") for m in s.messages
                )
            )
        assert call(env["gw"].base, "/state", 1, "touch", who="alice").status_code == 200
        alice.wait(lambda: len(alice.updates()) == 1)
        assert call(env["gw"].base, "/state", 2, "touch", who="bob").status_code == 200
        bob.wait(lambda: len(bob.updates()) >= 1)
        time.sleep(1.0)  # anything else already sent has arrived by now
        assert len(bob.updates()) == 1, bob.updates()
        assert len(alice.updates()) == 1, alice.updates()
        for stream, rid in ((alice, "listen-alice"), (bob, "listen-bob")):
            meta = stream.updates()[0]["params"]["_meta"]
            assert meta["io.modelcontextprotocol/subscriptionId"] == rid
    finally:
        alice.close()
        bob.close()


def test_a_replayed_round_runs_in_its_callers_own_process_on_the_other_replica(env):
    """my_roots is replayed (re-run where the retry lands): bob's roots are remembered by his
    process on the other replica; alice's retry reaching that replica re-runs her call in a
    process of her own there, which asks her roots again and answers them (never bob's)."""
    gw, other = env["gw"], env["other"]
    asked, text = roots_call([other.base], "/state", "my_roots", "bob")
    assert asked == 1 and text == "file:///home/bob/project"
    asked, text = roots_call([gw.base, other.base], "/state", "my_roots", "alice")
    assert asked == 1 and text == "file:///home/alice/project"
    asked, text = roots_call([other.base], "/state", "my_roots", "bob")
    assert asked == 0 and text == "file:///home/bob/project"  # his process kept his session


# ---- the bounds ------------------------------------------------------------------------------


def test_one_process_bound_evicts_the_idle_refuses_when_busy_and_reaps(module_tmp, state_key, env):
    """max_processes 1: a new caller takes the process of the least recently used idle one (whose
    session is then gone: asked again later), is refused with 503 and Retry-After while the only
    process serves a caller with a call in flight, and an idle caller's process is stopped after
    idle_seconds. Every process stops with the gateway."""
    routes = [
        {
            "name": "tight",
            "path": "/tight",
            "upstream": {
                "command": env["state"],
                "max_processes": 1,
                "idle_seconds": 2,
                "min_residency_seconds": 0,  # evicts an idle caller at once
            },
        }
    ]
    with ExitStack() as stack:
        gw = start_gateway(
            stack, module_tmp, keys=state_key, config=config(routes), anonymous=False
        )
        wait_ready(gw)
        pids: set[int] = set()

        def processes() -> list[dict[str, Any]]:
            route = ready(gw)["routes"]["tight"]
            assert route["isolation"] == "principal" and route["max_processes"] == 1
            assert len(route["processes"]) <= 1
            pids.update(p["pid"] for p in route["processes"] if p["pid"])
            return route["processes"]

        processes()
        assert roots_call([gw.base], "/tight", "my_roots", "alice") == (
            1,
            "file:///home/alice/project",
        )
        assert roots_call([gw.base], "/tight", "my_roots", "alice") == (
            0,
            "file:///home/alice/project",
        )
        processes()
        # Bob: alice is idle, her process makes room for his own (he is asked, not told hers).
        first = call(gw.base, "/tight", 1, "my_roots", who="bob").json()
        assert first["result"]["inputRequests"], first
        processes()
        # His call waits for its answer: the one process is busy, carol is refused.
        refused = call(gw.base, "/tight", 2, "whoami", who="carol")
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["data"] == {"reason": "upstream_busy"}
        assert refused.json()["id"] == 2
        done = call(
            gw.base,
            "/tight",
            3,
            "my_roots",
            who="bob",
            state=first["result"]["requestState"],
            answers={k: {"roots": roots_of("bob")} for k in first["result"]["inputRequests"]},
        ).json()
        assert done["result"]["content"][0]["text"] == "file:///home/bob/project"
        # Idle for 2 s: bob's process is stopped (no caller holds a process any more).
        deadline = time.monotonic() + 30
        while ready(gw)["routes"]["tight"]["principals"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert ready(gw)["routes"]["tight"]["principals"] == 0
        # Alice's session went with her evicted process: she is asked again.
        assert roots_call([gw.base], "/tight", "my_roots", "alice") == (
            1,
            "file:///home/alice/project",
        )
        processes()
        assert len(pids) >= 3  # the spare alice took, bob's, and alice's new one
        os.kill(gw.process.pid, signal.SIGTERM)
        gw.process.popen.wait(timeout=30)

    def alive(pid: int) -> bool:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), pids
