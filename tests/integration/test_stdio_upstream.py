"""Local (stdio) MCP servers behind the gateway, exposed as stateless 2026-07-28 with MRTR.

Real servers over stdio: tests/servers/legacy_server.py in ``--stdio`` mode (FastMCP from
``mcp==1.30.0``, in an environment every user can run: the gateway, when root, runs its local
servers as nobody; see tests/support/sandbox.py) with two processes, and the published Node
``@modelcontextprotocol/server-everything`` from npm under Node 22 (scripts/install-stdio-servers.sh).
Real clients: the ``mcp`` 2.x client pinned to 2026-07-28, the TypeScript SDK client, the 2.x
client in legacy (2025) mode, and raw HTTP. Two principals come from the trusted-header mode.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CreateMessageResult, ElicitResult, TextContent

from tests.conftest import Running, require, start_gateway
from tests.support.everything import everything_launcher
from tests.support.legacy import book_answering_its_question, legacy_initialize
from tests.support.sandbox import public_everything, stdio_server_command
from tests.support.ts_client import run_ts_client, ts_client_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
CAPS = {"elicitation": {"form": {}}, "sampling": {}}
PRINCIPAL_HEADER = "X-Forwarded-User"


def python_server() -> list[str]:
    """The mcp 1.x server, runnable by any user: a gateway started as root runs it as nobody."""
    return stdio_server_command("legacy_server.py", "--stdio")


def config(routes: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "auth": {
            "mode": "trusted_header",
            "trusted_header": {"header": PRINCIPAL_HEADER, "trusted_cidrs": ["127.0.0.1/32"]},
        },
        "routes": routes,
        **extra,
    }


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    launcher = everything_launcher()
    require(
        launcher is not None,
        "the Node everything server needs npm (scripts/install-stdio-servers.sh)",
    )
    node, _ = public_everything(launcher)
    with ExitStack() as stack:
        routes = [
            {
                "name": "py",
                "path": "/mcp",
                "upstream": {"command": python_server(), "instances": 2},
                "bridge": {"tools": {"side_effect": "replay"}},
            },
            {"name": "node", "path": "/node", "upstream": {"command": [node]}},
        ]
        gateway = start_gateway(
            stack, module_tmp, keys=state_key, config=config(routes), anonymous=False
        )
        other = start_gateway(
            stack, module_tmp, keys=state_key, config=config(routes), anonymous=False
        )
        for gw in (gateway, other):
            wait_ready(gw)
        yield {"gw": gateway, "other": other}


def wait_ready(gw: Running, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    doc: dict = {}
    while time.monotonic() < deadline:
        r = httpx.get(gw.base + "/readyz", timeout=5)
        doc = r.json()
        if r.status_code == 200:
            return doc
        time.sleep(0.2)
    raise TimeoutError(f"stdio routes not ready: {doc}\n{gw.process.log_tail()}")


def post(
    url: str,
    request_id: int,
    method: str,
    params: dict | None = None,
    *,
    who: str = "alice",
    caps: dict | None = None,
    meta: dict | None = None,
) -> dict:
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": CAPS if caps is None else caps,
        **(meta or {}),
    }
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        PRINCIPAL_HEADER: who,
    }
    if method == "tools/call":
        headers["Mcp-Name"] = params["name"]
    r = httpx.post(
        url,
        headers=headers,
        timeout=30,
        json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
    )
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return {
            "events": [
                json.loads(line[5:]) for line in r.text.splitlines() if line.startswith("data:")
            ],
            "status": r.status_code,
        }
    return {**r.json(), "status": r.status_code}


def text_of(doc: dict) -> str:
    return "".join(b.get("text", "") for b in doc["result"].get("content", []))


def processes(gw: Running, route: str) -> list[dict]:
    return httpx.get(gw.base + "/readyz", timeout=5).json()["routes"][route]["processes"]


class Answers:
    def __init__(self, *elicit: dict) -> None:
        self.elicit = list(elicit)
        self.asked: list[str] = []

    async def on_elicit(self, ctx, params) -> ElicitResult:
        self.asked.append(params.message)
        return ElicitResult(**(self.elicit.pop(0) if self.elicit else {"action": "decline"}))

    async def on_sample(self, ctx, params) -> CreateMessageResult:
        self.asked.append("sampling")
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="from the model"), model="m"
        )


def client(url: str, answers: Answers, who: str = "alice") -> Client:
    http = httpx2.AsyncClient(headers={PRINCIPAL_HEADER: who}, timeout=30)
    return Client(
        streamable_http_client(url, http_client=http),
        mode=MODERN,
        elicitation_callback=answers.on_elicit,
        sampling_callback=answers.on_sample,
    )


# ---- a Python (mcp 1.x) stdio server ------------------------------------------------------


async def test_lists_calls_and_an_mrtr_flow(env):
    answers = Answers(
        {"action": "accept", "content": {"size": 4}},
        {"action": "accept", "content": {"colour": "red"}},
        {"action": "accept", "content": {"number": 7}},
        {"action": "accept", "content": {"ship": True}},
    )
    async with client(env["gw"].url, answers) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {"add", "book_table", "three_questions", "crash_after_question"} <= tools
        assert (await c.call_tool("add", {"a": 20, "b": 22})).structured_content == {"result": 42}
        assert (await c.call_tool("book_table", {"date": "2026-12-24"})).content[
            0
        ].text == "Booked 4 on 2026-12-24"
        assert (await c.call_tool("three_questions", {"topic": "t"})).content[
            0
        ].text == "t: red, 7, True"
    assert answers.asked[0] == "How many people for 2026-12-24?" and len(answers.asked) == 4


async def test_progress_survives_a_question_round(env):
    """The call is parked on its question; the retry's new progressToken gets the progress the
    process reports after the answer (the process only ever sees the bridge's own token)."""
    answers = Answers({"action": "accept", "content": {"confirm": True}})
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with client(env["gw"].url, answers) as c:
        result = await c.call_tool("ask_then_progress", {"steps": 3}, progress_callback=on_progress)
    assert result.content[0].text == "went ahead=True in 3 steps"
    assert answers.asked == ["Go ahead?"] and progress == [1, 2, 3]


def test_two_principals_at_once_see_only_their_own(env):
    """Concurrent calls on the shared processes: each caller gets its own question, its own
    progress (both use the same progressToken), its own result; a state is bound to its caller."""
    url = env["gw"].url

    async def one(who: str, date: str) -> tuple[dict, dict]:
        first = await asyncio.to_thread(
            post, url, 1, "tools/call", {"name": "book_table", "arguments": {"date": date}}, who=who
        )
        progress = await asyncio.to_thread(
            post,
            url,
            2,
            "tools/call",
            {"name": "progress_steps", "arguments": {"steps": 3}},
            who=who,
            meta={"progressToken": "same-token"},
        )
        return first, progress

    async def both():
        return await asyncio.gather(one("alice", "2026-01-01"), one("bob", "2026-02-02"))

    (a_first, a_progress), (b_first, b_progress) = asyncio.run(both())
    assert (
        a_first["result"]["inputRequests"]["elicitation-1"]["params"]["message"]
        == "How many people for 2026-01-01?"
    )
    assert (
        b_first["result"]["inputRequests"]["elicitation-1"]["params"]["message"]
        == "How many people for 2026-02-02?"
    )
    for progress in (a_progress, b_progress):
        notes = [e for e in progress["events"] if e.get("method") == "notifications/progress"]
        assert [n["params"]["progress"] for n in notes] == [1, 2, 3]  # exactly its own three
        assert all(n["params"]["progressToken"] == "same-token" for n in notes)
    # Bob cannot answer Alice's question with her state.
    stolen = post(
        url,
        3,
        "tools/call",
        {
            "name": "book_table",
            "arguments": {"date": "2026-01-01"},
            "inputResponses": {"elicitation-1": {"action": "accept", "content": {"size": 9}}},
            "requestState": a_first["result"]["requestState"],
        },
        who="bob",
    )
    assert stolen["error"]["data"] == {"reason": "principal"}
    for who, first, date, size in (
        ("alice", a_first, "2026-01-01", 2),
        ("bob", b_first, "2026-02-02", 3),
    ):
        done = post(
            url,
            4,
            "tools/call",
            {
                "name": "book_table",
                "arguments": {"date": date},
                "inputResponses": {
                    "elicitation-1": {"action": "accept", "content": {"size": size}}
                },
                "requestState": first["result"]["requestState"],
            },
            who=who,
        )
        assert text_of(done) == f"Booked {size} on {date}"


def test_a_process_crash_mid_call(env):
    gw = env["gw"]
    before = sum(p["restarts"] for p in processes(gw, "py"))
    first = post(gw.url, 1, "tools/call", {"name": "crash_after_question", "arguments": {}})
    started = time.monotonic()
    crashed = post(
        gw.url,
        2,
        "tools/call",
        {
            "name": "crash_after_question",
            "arguments": {},
            "inputResponses": {"elicitation-1": {"action": "accept", "content": {"confirm": True}}},
            "requestState": first["result"]["requestState"],
        },
    )
    assert time.monotonic() - started < 10  # a clear error, never a hang
    assert crashed["status"] == 502 and crashed["error"]["data"] == {"reason": "upstream_exited"}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        procs = processes(gw, "py")
        if sum(p["restarts"] for p in procs) > before and all(p["state"] == "ready" for p in procs):
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"not restarted: {processes(gw, 'py')}")
    for i in range(4):  # both processes serve again
        assert post(gw.url, 10 + i, "tools/call", {"name": "add", "arguments": {"a": i, "b": 1}})[
            "result"
        ]["structuredContent"] == {"result": i + 1}


def test_flows_continue_on_another_replica(env):
    """The process lives in one replica: a parked call is forwarded to it; a replayable tool
    re-runs in the other replica's own process."""
    gw, other = env["gw"], env["other"]
    first = post(
        gw.url, 1, "tools/call", {"name": "book_table", "arguments": {"date": "2026-03-03"}}
    )
    done = post(
        other.url,
        2,
        "tools/call",
        {
            "name": "book_table",
            "arguments": {"date": "2026-03-03"},
            "inputResponses": {"elicitation-1": {"action": "accept", "content": {"size": 5}}},
            "requestState": first["result"]["requestState"],
        },
    )
    assert text_of(done) == "Booked 5 on 2026-03-03"
    first = post(gw.url, 3, "tools/call", {"name": "side_effect", "arguments": {"key": "k"}})
    done = post(
        other.url,
        4,
        "tools/call",
        {
            "name": "side_effect",
            "arguments": {"key": "k"},
            "inputResponses": {"elicitation-1": {"action": "accept", "content": {"confirm": True}}},
            "requestState": first["result"]["requestState"],
        },
    )
    assert text_of(done) == "k: confirmed=True runs=1"  # re-run in the other replica's process


async def test_legacy_client_on_the_stdio_server(env):
    answers = Answers({"action": "accept", "content": {"size": 2}})
    http = httpx2.AsyncClient(headers={PRINCIPAL_HEADER: "carol"}, timeout=30)
    async with Client(
        streamable_http_client(env["gw"].url, http_client=http),
        mode="legacy",
        elicitation_callback=answers.on_elicit,
    ) as c:
        assert (await c.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        assert (await c.call_tool("book_table", {"date": "2025-12-24"})).content[
            0
        ].text == "Booked 2 on 2025-12-24"
    with httpx.Client(timeout=10) as h:
        r = h.post(
            env["gw"].url,
            headers={"Accept": ACCEPT, PRINCIPAL_HEADER: "carol"},
            json=legacy_initialize("raw"),
        )
        token = r.headers["mcp-session-id"]
        assert (
            token.startswith("mcpes1.")
            and r.json()["result"]["serverInfo"]["name"] == "legacy-fixture"
        )
        r = h.post(
            env["gw"].url,
            headers={
                "Accept": ACCEPT,
                PRINCIPAL_HEADER: "dave",
                "Mcp-Session-Id": token,
                "MCP-Protocol-Version": "2025-11-25",
            },
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert r.status_code == 404  # another caller's session


# ---- the published Node server ------------------------------------------------------------


async def test_node_everything_server_with_the_sdk_client(env):
    url = env["gw"].base + "/node"
    answers = Answers(
        {"action": "accept", "content": {"name": "Ada", "check": True, "email": "ada@example.com"}}
    )
    async with client(url, answers) as c:
        tools = {t.name for t in (await c.list_tools()).tools}
        assert {
            "echo",
            "get-sum",
            "trigger-elicitation-request",
            "trigger-sampling-request",
        } <= tools
        assert (await c.call_tool("echo", {"message": "hi"})).content[0].text == "Echo: hi"
        elicited = await c.call_tool("trigger-elicitation-request", {})
        assert "Ada" in json.dumps([b.model_dump() for b in elicited.content])
        sampled = await c.call_tool("trigger-sampling-request", {"prompt": "say something"})
        assert "from the model" in sampled.content[0].text
        env_text = (await c.call_tool("get-env", {})).content[0].text
    assert (
        "MCP_EDGE_STATE_KEYS" not in env_text and "PATH" in env_text
    )  # the gateway's keys stay home
    assert answers.asked[0].startswith("Please provide inputs") and "sampling" in answers.asked


def test_typescript_client_on_both_servers(env):
    require(ts_client_launcher() is not None, "the TypeScript client needs npm")
    report = run_ts_client(
        {
            "url": env["gw"].url,
            "headers": {PRINCIPAL_HEADER: "erin"},
            "capabilities": {"elicitation": {"form": {}}},
            "answers": {"elicitation": [{"action": "accept", "content": {"size": 6}}]},
            "steps": [
                {"op": "listTools"},
                {"op": "callTool", "name": "add", "arguments": {"a": 2, "b": 2}},
                {"op": "callTool", "name": "book_table", "arguments": {"date": "2026-06-06"}},
            ],
        },
        timeout=60,
    )
    steps = report["steps"]
    assert all(s["ok"] for s in steps), steps
    assert (
        "".join(b.get("text", "") for b in steps[2]["result"]["content"])
        == "Booked 6 on 2026-06-06"
    )
    report = run_ts_client(
        {
            "url": env["gw"].base + "/node",
            "headers": {PRINCIPAL_HEADER: "erin"},
            "capabilities": {"elicitation": {"form": {}}},
            "steps": [
                {"op": "callTool", "name": "get-sum", "arguments": {"a": 2, "b": 3}},
                {
                    "op": "callTool",
                    "name": "trigger-sampling-request",
                    "arguments": {"prompt": "x"},
                },
            ],
        },
        timeout=60,
    )
    assert report["steps"][0]["ok"] and "5" in json.dumps(report["steps"][0]["result"])
    assert report["steps"][1]["error"]["code"] == -32021  # a form-only client asked for sampling


def test_shutdown_leaves_no_child_process(module_tmp: Path, state_key: str):
    with ExitStack() as stack:
        routes = [
            {"name": "py", "path": "/mcp", "upstream": {"command": python_server(), "instances": 2}}
        ]
        gw = start_gateway(
            stack, module_tmp, keys=state_key, config=config(routes), anonymous=False
        )
        pids = [p["pid"] for p in wait_ready(gw)["routes"]["py"]["processes"]]
        assert all(pids)
        os.kill(gw.process.pid, signal.SIGTERM)
        gw.process.popen.wait(timeout=30)

    def alive(pid: int) -> bool:
        """Is anything left of the process group the child was started in (it and its own)?"""
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids), pids


def test_a_legacy_session_is_reachable_from_another_replica(env):
    """A 2025-era client's virtual session lives where its process runs; requests for it that
    reach the other replica are relayed there, the SSE answer (question included) streamed back."""
    a, b = env["gw"], env["other"]
    base = {"Accept": ACCEPT, PRINCIPAL_HEADER: "frank"}
    with httpx.Client(timeout=20) as http:
        r = http.post(
            a.url,
            headers=base,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {}},
                    "clientInfo": {"name": "old", "version": "1"},
                },
            },
        )
        session = {
            **base,
            "Mcp-Session-Id": r.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        r = http.post(
            b.url, headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        )
        assert r.status_code == 200 and "book_table" in r.text
        final = book_answering_its_question(
            http,
            b.url,
            session,
            call_id=3,
            date="2025-10-10",
            size=7,
            post_answer=lambda answer: http.post(b.url, headers=session, json=answer),
        )
        assert (
            final["id"] == 3 and final["result"]["content"][0]["text"] == "Booked 7 on 2025-10-10"
        )
        r = http.post(
            b.url,
            headers={**session, PRINCIPAL_HEADER: "grace"},
            json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"},
        )
        assert r.status_code == 404  # another caller's token, refused before any relaying
        assert http.delete(b.url, headers=session).status_code == 200
        r = http.post(
            a.url, headers=session, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
        )
        assert r.status_code == 404  # the session is gone where it lived
