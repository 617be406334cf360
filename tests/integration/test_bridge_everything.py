"""The published npm server-everything behind the bridge, unmodified, over HTTP and over stdio.

What it does that a 2026-07-28 client must not be misled by:

* it advertises ``listChanged`` / ``subscribe`` (and the 2025 ``tasks``): the bridge serves
  ``subscriptions/listen`` from what it pushes (and never advertises tasks): the conformance
  suite's ``server-stateless`` listen checks pass through the gateway;
* 350 ms after a session starts it sends ``roots/list`` on its own (over HTTP on the standalone
  stream), and ``get-roots-list`` asks the same way: the call in flight then, the only one of
  the session, is asked when its client declared roots (as a 2025-era client would be), and
  the gateway answers for a client that did not;
* progress keeps its meaning across a question round (see test_legacy_bridge.py for a call
  that asks and then reports progress).

Clients: the ``mcp`` 2.x client and the TypeScript SDK client, both pinned to 2026-07-28, and
the conformance harness.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import ElicitResult, Implementation, ListRootsResult, Root

from tests.conftest import Running, require, start_gateway
from tests.support.conformance import INSTALL_HINT, find_harness, run_server_suite
from tests.support.everything import everything_launcher, serving_everything_http
from tests.support.sandbox import public_everything
from tests.support.ts_client import run_ts_client, ts_client_launcher

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
LISTEN_CHECKS = (
    "sep-2575-server-sends-subscription-ack",
    "sep-2575-server-tags-subscription-id",
    "sep-2575-server-honors-notification-filter",
)
DOCUMENT = "demo://resource/static/document/architecture.md"


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    launcher = everything_launcher()
    require(launcher is not None, "server-everything needs npm (scripts/install-stdio-servers.sh)")
    assert launcher is not None
    stdio, _ = public_everything(launcher)  # runnable by the user local servers run as
    with ExitStack() as stack:
        url, serving = serving_everything_http(launcher, module_tmp)
        stack.enter_context(serving)
        routes = [
            {"name": "http", "path": "/mcp", "upstream": url},
            {"name": "stdio", "path": "/stdio", "upstream": {"command": [stdio]}},
        ]
        gw = start_gateway(stack, module_tmp, keys=state_key, config={"routes": routes})
        wait_ready(gw)
        yield {"gw": gw, "http": gw.url, "stdio": gw.base + "/stdio", "tmp": module_tmp}


def wait_ready(gw: Running, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(gw.base + "/readyz", timeout=5)
        if r.status_code == 200:
            return r.json()
        time.sleep(0.1)
    raise TimeoutError(gw.process.log_tail())


def post(url: str, request_id: int, method: str, params: dict | None = None) -> httpx.Response:
    params = {
        **(params or {}),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return httpx.post(url, headers=headers, json=body, timeout=20)


# ---- 1. server/discover advertises only what is served ------------------------------------------


@pytest.mark.conformance
@pytest.mark.parametrize("route", ["http", "stdio"])
def test_the_listen_checks_of_the_conformance_suite_pass(env, route):
    cli = find_harness()
    require(cli is not None, f"MCP conformance harness not installed: {INSTALL_HINT}")
    assert cli is not None
    run = run_server_suite(
        cli,
        env[route],
        env["tmp"] / f"stateless-{route}",
        label=f"everything-{route}",
        requirements=None,
        scenario="server-stateless",
        extra_args=("--spec-version", MODERN),
        timeout=120,
    )
    scenario = run.scenarios.get("server-stateless")
    assert scenario is not None, run.summary()
    assert {c: scenario.statuses.get(c) for c in LISTEN_CHECKS} == dict.fromkeys(
        LISTEN_CHECKS, "SUCCESS"
    ), run.explain()


@pytest.mark.parametrize("route", ["http", "stdio"])
def test_discover_names_no_capability_the_bridge_does_not_serve(env, route):
    caps = post(env[route], 1, "server/discover").json()["result"]["capabilities"]
    assert "tasks" not in caps and "logging" not in caps  # the 2025 tasks: not bridged
    assert caps["tools"] == {"listChanged": True}  # served: subscriptions/listen
    assert caps["resources"] == {"subscribe": True, "listChanged": True}
    refused = post(env[route], 2, "tasks/get", {"taskId": "t"})
    assert refused.status_code == 404 and refused.json()["error"]["code"] == -32601


async def test_listen_on_stdio_delivers_what_the_process_pushes(env):
    """Resource updates from the route's process reach the listen stream that subscribed."""
    wait_ready(env["gw"])
    async with (
        Client(env["stdio"], mode=MODERN) as client,
        Client(env["stdio"], mode=MODERN) as other,
    ):
        async with client.listen(resource_subscriptions=[DOCUMENT], tools_list_changed=True) as sub:
            assert sub.honored.resource_subscriptions == [DOCUMENT]
            assert sub.honored.tools_list_changed is True
            # The tool starts the server's simulated updates (one at once, then every 5 s).
            await other.call_tool("toggle-subscriber-updates", {})
            try:
                async with asyncio.timeout(10):
                    event = await anext(sub)
            finally:
                await other.call_tool("toggle-subscriber-updates", {})  # and stops them
        assert event == ResourceUpdated(uri=DOCUMENT)


# ---- 2. a question belongs to the call that asked it ----------------------------------------------


async def test_the_servers_own_roots_list_during_a_call_is_that_calls_question(env):
    """A fresh upstream session (its own client name): the server's roots/list, 350 ms in, on
    the standalone stream, arrives while a 1.5 s call, the only one of the session, runs. The
    client declared roots: it is asked, in that call (as a 2025-era client would be), once; the
    call completes, its progress all there."""
    asked: list[str] = []
    progress: list[float] = []

    async def on_roots(ctx) -> ListRootsResult:
        asked.append("roots/list")
        return ListRootsResult(roots=[Root(uri="file:///work")])

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(
        env["http"],
        mode=MODERN,
        list_roots_callback=on_roots,
        client_info=Implementation(name=f"roots-{uuid.uuid4().hex[:8]}", version="1"),
    ) as client:
        result = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 1.5, "steps": 3},
            progress_callback=on_progress,
        )
    assert "Long running operation completed" in result.content[0].text
    assert asked == ["roots/list"] and progress == [1, 2, 3]


async def test_a_client_without_roots_is_never_asked_and_its_call_goes_on(env):
    """The same call from a client that declared no roots: the server's own roots/list is
    answered by the gateway (-32601) and the call is not disturbed."""
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(
        env["http"],
        mode=MODERN,
        client_info=Implementation(name=f"noroots-{uuid.uuid4().hex[:8]}", version="1"),
    ) as client:
        result = await client.call_tool(
            "trigger-long-running-operation",
            {"duration": 1.0, "steps": 2},
            progress_callback=on_progress,
        )
    assert "Long running operation completed" in result.content[0].text
    assert progress == [1, 2]


async def test_get_roots_list_asks_the_client_through_the_bridge(env):
    """get-roots-list asks with server.listRoots() (no related request id: the standalone
    stream) when the server has no roots for the session yet: the client is asked in that call
    and the tool lists its roots (before: "no roots are currently configured")."""
    asked: list[str] = []

    async def on_roots(ctx) -> ListRootsResult:
        asked.append("roots/list")
        return ListRootsResult(roots=[Root(uri="file:///home/ada/project", name="ada")])

    async with Client(
        env["http"],
        mode=MODERN,
        list_roots_callback=on_roots,
        client_info=Implementation(name=f"getroots-{uuid.uuid4().hex[:8]}", version="1"),
    ) as client:
        result = await client.call_tool("get-roots-list", {})
    assert "file:///home/ada/project" in result.content[0].text, result.content[0].text
    assert asked == ["roots/list"]


async def test_a_question_replayed_by_the_event_store_is_asked_and_answered_once(env):
    """One caller, one pooled upstream session. The first call outlives the server's own
    roots/list (asked in it, as the standalone stream brought it during the call, whose
    position is now that event). The second call asks an elicitation; on the retry the standalone stream resumes
    from that position, and this server's event store replays every stream of the session
    after it, the call's own question included. That question was asked already: it is not
    asked again (before, it made a second round). That the replayed copy is not answered a
    second time either is pinned in tests/unit/test_bridge_parts.py (the server does not tell)."""
    asked: list[str] = []

    async def on_elicit(ctx, params) -> ElicitResult:
        asked.append("elicitation/create")
        return ElicitResult(
            action="accept", content={"name": "Ada", "check": True, "email": "ada@example.com"}
        )

    async def on_roots(ctx) -> ListRootsResult:
        asked.append("roots/list")
        return ListRootsResult(roots=[Root(uri="file:///work")])

    async with Client(
        env["http"],
        mode=MODERN,
        elicitation_callback=on_elicit,
        list_roots_callback=on_roots,
        client_info=Implementation(name=f"replay-{uuid.uuid4().hex[:8]}", version="1"),
    ) as client:
        await client.call_tool("trigger-long-running-operation", {"duration": 0.8, "steps": 1})
        result = await client.call_tool("trigger-elicitation-request", {})
    assert "Ada" in " ".join(block.text for block in result.content if block.type == "text")
    assert asked == ["roots/list", "elicitation/create"]


def test_the_same_with_the_typescript_client(env):
    require(ts_client_launcher() is not None, "the TypeScript client needs npm")
    report = run_ts_client(
        {
            "url": env["http"],
            "clientInfo": {"name": f"roots-ts-{uuid.uuid4().hex[:8]}", "version": "1"},
            "capabilities": {"roots": {}},
            "answers": {"roots": [{"uri": "file:///work"}]},
            "steps": [
                {
                    "op": "callTool",
                    "name": "trigger-long-running-operation",
                    "arguments": {"duration": 1.5, "steps": 3},
                    "progress": True,
                }
            ],
        }
    )
    (step,) = report["steps"]
    assert step["ok"], step
    assert [q["method"] for q in report["asked"]] == ["roots/list"]
    assert [p["progress"] for p in step["progress"] if p.get("total") == 3] == [1, 2, 3]


async def test_on_stdio_a_roots_list_never_fails_a_call_that_did_not_declare_roots(env):
    """The process is restarted while a call waits for it: the call holds the process when the
    new process sends its own roots/list. The call's request did not declare roots: the server
    is told the client has none, and the call is not turned into a -32021."""
    gw = env["gw"]
    (before,) = wait_ready(gw)["routes"]["stdio"]["processes"]
    os.kill(before["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # until the gateway has seen it go
        (now,) = httpx.get(gw.base + "/readyz", timeout=5).json()["routes"]["stdio"]["processes"]
        if now["state"] != "ready" or now["pid"] != before["pid"]:
            break
        time.sleep(0.02)
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with Client(env["stdio"], mode=MODERN) as client:
        try:
            result = await client.call_tool(
                "trigger-long-running-operation",
                {"duration": 2, "steps": 2},
                progress_callback=on_progress,
            )
        except MCPError as exc:  # before: -32021, requiredCapabilities roots
            pytest.fail(f"the call failed on the server's own roots/list: {exc.error}")
    assert "Long running operation completed" in result.content[0].text
    assert progress == [1, 2]
