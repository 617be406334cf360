"""An upstream that streams newline-delimited JSON-RPC messages under ``application/json``
(tests/servers/ndjson_upstream.py), with the real SDK clients: the Python ``mcp`` 2.x client and
the TypeScript ``@modelcontextprotocol/client`` 2.x.

Directly, neither client reads such an answer (both parse the whole body as one JSON document:
a parse error once the body ends, nothing at all from a stream that never ends). Through a
gateway process each line reaches them as an SSE event as it is written: progress and log
messages before the result, an ``input_required`` round sealed by the gateway, a
``subscriptions/listen`` stream that is acknowledged and delivers its notifications, and is
closed upstream when the client goes away.

Each test finds its requests in the upstream's log by a marker: the name in the client's
``clientInfo``, sent with every request.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, ElicitResult, Implementation, InputRequiredResult

from tests.conftest import require, start_gateway, start_upstream
from tests.support.ts_client import INSTALL_HINT, REVISION, run_ts_client, ts_client_launcher

pytestmark = pytest.mark.integration

PARSE_ERROR = -32700
#: How long a test waits for something the upstream or a client must do (never a bound on speed).
PATIENCE = 30.0
STEPS = ["step 1 of 3", "step 2 of 3", "step 3 of 3"]


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    log = module_tmp / "ndjson.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(
            stack, "ndjson_upstream.py", module_tmp, "--log", str(log), "--interval-ms", "100"
        )
        gateway = start_gateway(stack, module_tmp, upstream=upstream.url, keys=state_key)
        yield {"log": log, "upstream": upstream, "gateway": gateway}


def new_marker(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:10]}"


def entries(env, marker: str) -> list[dict[str, Any]]:
    """What the upstream logged for this marker, in the order it happened."""
    lines = env["log"].read_text().splitlines()
    return [e for e in map(json.loads, filter(None, lines)) if e.get("marker") == marker]


def trail(env, marker: str) -> list[str]:
    """The upstream's events for the marker as words: `line:<method|result|error>`, `waiting`, ..."""
    return [
        f"line:{e['what']}" if e["event"] == "line" else e["event"]
        for e in entries(env, marker)
        if e["event"] != "request"
    ]


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for a condition (the SDK runs notification callbacks in tasks of their own, so one may
    still be on its way when the call that it belongs to has returned)."""
    with anyio.move_on_after(PATIENCE):
        while not condition():
            await anyio.sleep(0.05)
    assert condition(), f"after {PATIENCE:.0f} s: {what}"


def client(url: str, marker: str, **options: Any) -> Client:
    return Client(
        url, mode=REVISION, client_info=Implementation(name=marker, version="1.0.0"), **options
    )


# ---------------------------------------------------------------- Python SDK client


async def test_progress_reaches_the_client_before_the_upstream_writes_its_result(env):
    """The upstream writes step 1 (a log message, a progress notification) and then waits to be
    released before writing anything else; the client's progress callback releases it. The call
    completes released only if step 1 reached the client while the upstream had not written its
    result: the gateway relays lines as they come, it does not wait for the body to end."""
    marker = new_marker("stream")
    progress: list[tuple[float, str | None]] = []
    logs: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))
        if len(progress) == 1:
            async with httpx.AsyncClient(timeout=10, trust_env=False) as http:
                await http.post(f"{env['upstream'].base}/release", json={"marker": marker})

    async def on_log(params) -> None:
        logs.append(params.data)

    async with client(env["gateway"].url, marker, log_level="info", logging_callback=on_log) as c:
        with anyio.fail_after(PATIENCE):
            result = await c.call_tool(
                "stream_steps", {"steps": 3, "release_timeout": 60}, progress_callback=on_progress
            )
    assert result.content[0].text == "3 steps; released by the client: yes", (
        result,
        trail(env, marker),
    )
    await eventually(
        lambda: len(progress) == 3 and len(logs) == 3, f"progress {progress}, logs {logs}"
    )
    assert progress == [(1, STEPS[0]), (2, STEPS[1]), (3, STEPS[2])]
    assert logs == STEPS
    events = trail(env, marker)
    first, release, last = (
        events.index("line:notifications/progress"),
        events.index("released_by_client"),
        events.index("line:result"),
    )
    assert first < release < last and "release_timeout" not in events, events


async def test_an_mrtr_round_streamed_as_lines_is_sealed_and_completes_on_the_retry(env):
    """Round 1 is a log message, a progress notification, then ``input_required`` with the
    upstream's plaintext state: the client gets the notifications and a state sealed by the
    gateway; the retry with it reaches the upstream with its own plaintext state and completes."""
    marker = new_marker("mrtr")
    logs: list[Any] = []
    progress: list[float] = []

    async def on_log(params) -> None:
        logs.append(params.data)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def on_elicit(ctx, params) -> ElicitResult:  # declares the capability; answered below
        raise AssertionError("the test answers round 1 itself")

    async with client(
        env["gateway"].url,
        marker,
        log_level="info",
        logging_callback=on_log,
        elicitation_callback=on_elicit,
    ) as c:
        with anyio.fail_after(PATIENCE):
            round1 = await c.session.call_tool(
                "confirm", {}, progress_callback=on_progress, allow_input_required=True
            )
            assert isinstance(round1, InputRequiredResult), round1
            await eventually(lambda: logs and progress, "no notification of round 1")
            assert logs == ["asking for a confirmation"] and progress == [0]
            state = round1.request_state or ""
            assert state.startswith("mcpe1.") and "plain:" not in state and marker not in state, (
                state
            )
            assert set(round1.input_requests or {}) == {"confirm"}
            answer = {"confirm": ElicitResult(action="accept", content={"ok": True})}
            done = await c.session.call_tool(
                "confirm",
                {},
                progress_callback=on_progress,
                input_responses=answer,
                request_state=state,
                allow_input_required=True,
            )
            assert isinstance(done, CallToolResult), done
            await eventually(
                lambda: len(logs) == 2 and len(progress) == 2, "no notification of round 2"
            )
    assert done.content[0].text == f"confirmed ok=True; state plain:{marker}"
    assert logs == ["asking for a confirmation", "confirmed"] and progress == [0, 1]
    # Both answers were lines (notifications, then the result), and the upstream only ever got its
    # own state back.
    events = trail(env, marker)
    assert events.count("line:notifications/message") == 2 and events.count("line:result") == 2, (
        events
    )
    states = [e["request_state"] for e in entries(env, marker) if e["event"] == "state"]
    assert states == [f"plain:{marker}"]


async def test_the_sdk_client_runs_the_streamed_mrtr_rounds_itself(env):
    marker = new_marker("mrtr-auto")
    asked: list[str] = []

    async def on_elicit(ctx, params) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"ok": False})

    async with client(
        env["gateway"].url, marker, log_level="info", elicitation_callback=on_elicit
    ) as c:
        with anyio.fail_after(PATIENCE):
            result = await c.call_tool("confirm", {})
    assert result.content[0].text == f"confirmed ok=False; state plain:{marker}"
    assert asked == ["Go ahead?"]
    assert [e["request_state"] for e in entries(env, marker) if e["event"] == "state"] == [
        f"plain:{marker}"
    ]


async def test_a_listen_stream_of_lines_is_acknowledged_delivered_and_closed_upstream(env):
    """``subscriptions/listen`` answered with lines that never end: the SDK's listen() is
    acknowledged and gets the list_changed notifications while the upstream is still streaming;
    when the client goes away, the gateway closes the upstream's stream."""
    marker = new_marker("listen")
    got: list[Any] = []
    async with client(env["gateway"].url, marker) as c:
        with anyio.fail_after(PATIENCE):
            async with c.listen(tools_list_changed=True) as sub:
                assert sub.honored.tools_list_changed is True
                got.append(await sub.__anext__())
                got.append(await sub.__anext__())
    assert all(isinstance(event, ToolsListChanged) for event in got), got
    await eventually(
        lambda: "closed" in trail(env, marker), "the upstream's listen stream was not closed"
    )
    events = trail(env, marker)
    assert events[0] == "line:notifications/subscriptions/acknowledged", events
    assert "line:result" not in events, (
        events
    )  # it did not end by itself: the client's leaving ended it


async def test_directly_the_sdk_client_cannot_read_a_streamed_call(env):
    """Why the gateway relays: the same answers straight from the upstream are one body the
    client parses whole. Nothing of the stream reaches its callbacks; the call fails."""
    marker = new_marker("direct")
    progress: list[float] = []
    logs: list[Any] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async def on_log(params) -> None:
        logs.append(params.data)

    async with client(env["upstream"].url, marker, log_level="info", logging_callback=on_log) as c:
        with anyio.fail_after(PATIENCE):
            with pytest.raises(MCPError) as call:
                await c.call_tool(
                    "stream_steps",
                    {"steps": 3, "release_timeout": 0.2},
                    progress_callback=on_progress,
                )
            with pytest.raises(MCPError) as round1:
                await c.session.call_tool("confirm", {}, allow_input_required=True)
    for failed in (call.value, round1.value):
        assert (
            failed.error.code == PARSE_ERROR
            and "Failed to parse JSON response" in failed.error.message
        )
    assert progress == [] and logs == []
    assert trail(env, marker).count("line:result") == 2  # the upstream did answer both, in lines


async def test_directly_a_listen_stream_of_lines_is_never_acknowledged(env):
    """Directly, the client waits for the end of a body that never ends: the upstream has sent
    the acknowledgement and notifications, and listen() is still not acknowledged."""
    marker = new_marker("direct-listen")
    acknowledged = anyio.Event()
    async with client(env["upstream"].url, marker) as c, anyio.create_task_group() as tasks:

        async def listen() -> None:
            async with c.listen(tools_list_changed=True):
                acknowledged.set()

        tasks.start_soon(listen)
        sent = lambda: trail(env, marker).count("line:notifications/tools/list_changed")  # noqa: E731
        await eventually(lambda: sent() >= 3, "the upstream sent no notifications")
        assert "line:notifications/subscriptions/acknowledged" in trail(env, marker)
        assert not acknowledged.is_set()
        tasks.cancel_scope.cancel()
    await eventually(
        lambda: "closed" in trail(env, marker), "the upstream's listen stream was not closed"
    )


# ---------------------------------------------------------------- TypeScript SDK client


def ts_plan(url: str, marker: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    require(ts_client_launcher() is not None, f"the TypeScript MCP client SDK: {INSTALL_HINT}")
    return {
        "url": url,
        "steps": steps,
        "clientInfo": {"name": marker, "version": "1.0.0"},
        "capabilities": {"elicitation": {"form": {}}},
        "answers": {"elicitation": [{"action": "accept", "content": {"ok": True}}]},
    }


def test_ts_client_reads_the_streamed_answers_through_the_gateway(env):
    marker = new_marker("ts")
    steps = [
        {
            "op": "callTool",
            "name": "stream_steps",
            "arguments": {"release_timeout": 0.2},
            "progress": True,
        },
        {
            "op": "rawRequest",
            "method": "tools/call",
            "params": {"name": "confirm", "arguments": {}},
            "allowInputRequired": True,
            "progress": True,
        },
        {"op": "callTool", "name": "confirm", "arguments": {}, "progress": True},
    ]
    report = run_ts_client(ts_plan(env["gateway"].url, marker, steps), timeout=60)
    assert report["connect"] == {"ok": True}, report
    stream, round1, flow = report["steps"]
    assert stream["ok"], stream
    assert stream["result"]["content"][0]["text"] == "3 steps; released by the client: no"
    assert [(p["progress"], p.get("message")) for p in stream["progress"]] == list(
        zip([1, 2, 3], STEPS, strict=True)
    ), stream
    assert round1["ok"] and round1["result"]["resultType"] == "input_required", round1
    assert round1["result"]["requestState"].startswith("mcpe1."), round1
    assert [p["progress"] for p in round1["progress"]] == [0], round1
    assert (
        flow["ok"]
        and flow["result"]["content"][0]["text"] == f"confirmed ok=True; state plain:{marker}"
    ), flow
    calls = [h for h in report["http"] if h["rpcMethod"] == "tools/call"]
    assert len(calls) == 4 and all(h["status"] == 200 for h in calls), calls
    assert all(h["contentType"].startswith("text/event-stream") for h in calls), calls


def test_directly_the_ts_client_cannot_read_a_streamed_call(env):
    marker = new_marker("ts-direct")
    steps = [
        {
            "op": "callTool",
            "name": "stream_steps",
            "arguments": {"release_timeout": 0.2},
            "progress": True,
        }
    ]
    report = run_ts_client(ts_plan(env["upstream"].url, marker, steps), timeout=60)
    assert report["connect"] == {"ok": True}, report
    (stream,) = report["steps"]
    assert not stream["ok"] and stream["progress"] == [], stream
    assert stream["error"]["message"].startswith("SyntaxError"), stream
    assert trail(env, marker).count("line:result") == 1
