"""The 2025-era conformance fixture (tests/servers/legacy_everything.py, FastMCP 1.30), directly.

It is the upstream against which the 14 `input-required-result-*` (SEP-2322) scenarios
will be run through the gateway's legacy bridge. Before that, these tests pin down:

(a) it is a well-behaved 2025-11-25 server: the harness's 2025-11-25 scenarios for it pass,
    in particular the four that make the server send live server->client requests
    (tools-call-elicitation, tools-call-sampling, elicitation-sep1034-defaults,
    elicitation-sep1330-enums), and SSE polling/resume with its in-memory event store;
(b) its MRTR fixtures ask, the old way, exactly what the scenarios' InputRequiredResults
    ask (method and params), on the stream of the call that asks, and return the text the
    scenarios' answers lead to; `_multiple_inputs` has all three questions outstanding at
    once; `_capabilities` follows what the session declared in initialize;
(c) the 14 MRTR scenarios at 2026-07-28 fail against it directly: a legacy server answers
    every 2026-07-28 request `400 -32600 "Bad Request: Missing session ID"`. Four scenarios
    still come out "passed", vacuously, because their checks accept a JSON-RPC error (or only
    warn): see DIRECT_MRTR_VERDICTS and tests/conformance/LEGACY_MRTR_SCENARIOS.md.

Needs the conformance harness (scripts/install-conformance.sh or $MCP_CONFORMANCE_CLI) and
`uv` (to run mcp 1.30 in an isolated environment): without them the tests skip, or fail
when REQUIRE_ALL=1. Set $MCP_CONFORMANCE_RESULTS to keep the harness output and logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import require
from tests.support.conformance import (
    INSTALL_HINT,
    MRTR_SCENARIOS,
    REVISION,
    SuiteRun,
    find_harness,
    run_server_suite,
)
from tests.support.legacy_conformance import (
    HARNESS_ROOTS,
    LegacyClient,
    LegacyServer,
    harness_like,
    serving_legacy,
    uv_path,
)

pytestmark = [pytest.mark.conformance, pytest.mark.integration, pytest.mark.timeout(600)]

LEGACY_REVISION = "2025-11-25"
ALL_CAPS = {"elicitation": {"form": {}}, "sampling": {}, "roots": {"listChanged": True}}

# 2025-11-25 scenarios in which the server sends live server->client requests.
SERVER_TO_CLIENT_SCENARIOS = (
    "tools-call-elicitation",
    "tools-call-sampling",
    "elicitation-sep1034-defaults",
    "elicitation-sep1330-enums",
)
# The plain 2025-11-25 behaviour a gateway relies on: handshake, sessions, listing,
# a plain call, Host checks, and resumable SSE (the in-memory event store).
BASELINE_SCENARIOS = (
    "server-initialize",
    "server-session-lifecycle",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "prompts-list",
    "prompts-get-simple",
    "dns-rebinding-protection",
    "server-sse-polling",
)
LEGACY_SCENARIOS = SERVER_TO_CLIENT_SCENARIOS + BASELINE_SCENARIOS

MISSING_SESSION = "Missing session ID"
# Every MRTR scenario run directly: the 2026-07-28 request never reaches a handler. The four
# that "pass" do so vacuously: unsupported-methods only checks that tools/list and
# prompts/list are not input_required (an error is not), validate-input only that no
# complete result comes back, and missing-input-response / ignore-extra-params report a
# JSON-RPC error as WARNING, which does not fail a scenario.
DIRECT_MRTR_VERDICTS = {
    "input-required-result-basic-elicitation": "FAIL",
    "input-required-result-basic-sampling": "FAIL",
    "input-required-result-basic-list-roots": "FAIL",
    "input-required-result-request-state": "FAIL",
    "input-required-result-multiple-input-requests": "FAIL",
    "input-required-result-multi-round": "FAIL",
    "input-required-result-missing-input-response": "PASS",  # WARNING
    "input-required-result-non-tool-request": "FAIL",
    "input-required-result-result-type": "FAIL",
    "input-required-result-unsupported-methods": "PASS",
    "input-required-result-tampered-state": "FAIL",
    "input-required-result-capability-check": "FAIL",
    "input-required-result-ignore-extra-params": "PASS",  # WARNING
    "input-required-result-validate-input": "PASS",
}
# Failing or warning checks whose message does not quote the server's error message.
UNQUOTED_ERROR_MESSAGES = {
    "sep-2322-multi-round-r1": "Expected InputRequiredResult with inputRequests and requestState",
    "sep-2322-reject-tampered-state": "Prerequisite failed",
    "sep-2322-missing-response-rerequests": "Server returned JSON-RPC error instead of",
}


# ---- fixtures ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def harness() -> Path:
    cli = find_harness()
    require(cli is not None, f"MCP conformance harness not installed: {INSTALL_HINT}")
    assert cli is not None
    return cli


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("MCP_CONFORMANCE_RESULTS")
    if keep:
        path = Path(keep) / f"legacy-{time.strftime('%Y%m%dT%H%M%S')}"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("legacy-conformance")


@pytest.fixture(scope="module")
def legacy(work_dir: Path) -> Iterator[LegacyServer]:
    require(uv_path() is not None, "uv is needed to run the mcp 1.30 fixture in isolation")
    with serving_legacy(work_dir) as server:
        yield server


def _run_each(
    harness: Path, server: LegacyServer, out: Path, names: tuple[str, ...], revision: str
) -> dict[str, SuiteRun]:
    """One harness invocation per scenario (`--scenario` takes a single name)."""
    runs: dict[str, SuiteRun] = {}
    for name in names:
        runs[name] = run_server_suite(
            harness,
            server.url,
            out / name,
            label=f"legacy-direct@{revision}",
            requirements=None,
            scenario=name,
            extra_args=("--spec-version", revision),
            timeout=120,
        )
    return runs


@pytest.fixture(scope="module")
def legacy_runs(harness: Path, legacy: LegacyServer, work_dir: Path) -> dict[str, SuiteRun]:
    return _run_each(harness, legacy, work_dir / "2025", LEGACY_SCENARIOS, LEGACY_REVISION)


@pytest.fixture(scope="module")
def mrtr_runs(harness: Path, legacy: LegacyServer, work_dir: Path) -> dict[str, SuiteRun]:
    return _run_each(harness, legacy, work_dir / "2026", MRTR_SCENARIOS, REVISION)


# ---- (a) a well-behaved 2025-11-25 server ----------------------------------------------


@pytest.mark.parametrize("name", LEGACY_SCENARIOS)
def test_legacy_scenario_passes_directly(legacy_runs: dict[str, SuiteRun], name: str) -> None:
    run = legacy_runs[name]
    scenario = run.scenarios.get(name)
    assert scenario is not None, run.summary()
    not_clean = {cid: s for cid, s in scenario.statuses.items() if s in ("FAILURE", "WARNING")}
    assert run.process.returncode == 0 and not not_clean, (
        f"{run.summary()}\n{run.explain([name])}\n{not_clean}"
    )


def test_server_to_client_scenarios_were_answered_live(
    legacy_runs: dict[str, SuiteRun], legacy: LegacyServer
) -> None:
    """The harness's answers reached the fixture as separate POSTs on the same session."""
    answers = [e for e in legacy.requests() if e["kind"] == "response"]
    results = [e["message"]["result"] for e in answers]
    assert any(r.get("model") == "test-model" for r in results), results  # sampling
    assert sum(r.get("action") == "accept" for r in results) >= 3, results  # 3 elicitations
    assert all(e["session_id"] for e in answers), answers


# ---- (b) the MRTR fixtures, the old way ------------------------------------------------

# tool -> (the live requests it makes, as (method, message or text, requested properties)),
# and the text its result contains given the harness's answers.
OLD_WAY: dict[str, tuple[list[tuple[str, str | None, list[str] | None]], list[str]]] = {
    "test_input_required_result_elicitation": (
        [("elicitation/create", "What is your name?", ["name"])],
        ["Hello, Alice!"],
    ),
    "test_input_required_result_sampling": (
        [("sampling/createMessage", "What is the capital of France?", None)],
        ["Model said: The capital of France is Paris."],
    ),
    "test_input_required_result_list_roots": (
        [("roots/list", None, None)],
        ["1 root(s)", "file:///test/root"],
    ),
    "test_input_required_result_request_state": (
        [("elicitation/create", "Please confirm", ["ok"])],
        ["state-ok", "ok=True"],
    ),
    "test_input_required_result_multi_round": (
        [
            ("elicitation/create", "Step 1: What is your name?", ["name"]),
            ("elicitation/create", "Step 2: What is your favorite color?", ["color"]),
        ],
        ["Alice likes blue."],
    ),
    "test_input_required_result_tampered_state": (
        [("elicitation/create", "Please confirm", ["ok"])],
        ["state-ok"],
    ),
    "test_input_required_result_multiple_inputs": (
        [
            ("elicitation/create", "What is your name?", ["name"]),
            ("sampling/createMessage", "Generate a greeting", None),
            ("roots/list", None, None),
        ],
        ["All inputs received", "name=Alice", "greeting=Hello there!", "file:///test/root"],
    ),
}


def _describe(request: dict[str, Any]) -> tuple[str, str | None, list[str] | None]:
    params = request.get("params") or {}
    if request["method"] == "elicitation/create":
        properties = sorted(params["requestedSchema"]["properties"])
        return (request["method"], params["message"], properties)
    if request["method"] == "sampling/createMessage":
        return (request["method"], params["messages"][0]["content"]["text"], None)
    return (request["method"], None, None)


@pytest.mark.parametrize("tool", sorted(OLD_WAY))
async def test_mrtr_tool_asks_live_on_the_call_stream(legacy: LegacyServer, tool: str) -> None:
    asks, texts = OLD_WAY[tool]
    multiple = tool.endswith("multiple_inputs")
    sampled = "Hello there!" if multiple else "The capital of France is Paris."
    async with httpx.AsyncClient(timeout=30) as http:
        client = LegacyClient(http, legacy.url)
        await client.initialize(ALL_CAPS)
        exchange = await client.request(
            "tools/call", {"name": tool, "arguments": {}}, answer=harness_like(sampled)
        )
        await client.close()
    # Every question came on this call's own POST stream (none on a GET stream), and each
    # answer POST was accepted with 202.
    seen = sorted(map(_describe, exchange.server_requests))
    assert seen == sorted(asks), exchange.server_requests
    assert exchange.answer_statuses == [202] * len(asks)
    assert exchange.result.get("isError") is False, exchange.result
    assert "resultType" not in exchange.result and "inputRequests" not in exchange.result
    for text in texts:
        assert text in exchange.text, exchange.text


async def test_mrtr_prompt_asks_live_on_the_call_stream(legacy: LegacyServer) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        client = LegacyClient(http, legacy.url)
        await client.initialize(ALL_CAPS)
        exchange = await client.request(
            "prompts/get", {"name": "test_input_required_result_prompt"}, answer=harness_like()
        )
        listed = await client.request("prompts/list")
        await client.close()
    assert [_describe(r) for r in exchange.server_requests] == [
        ("elicitation/create", "What context should the prompt use?", ["context"])
    ]
    assert exchange.result["messages"][0]["role"] == "user"
    assert exchange.text == "Use the following context: test context"
    names = {p["name"] for p in listed.result["prompts"]}
    assert "test_input_required_result_prompt" in names


def _outstanding_counter(expected: int = 0) -> tuple[Any, list[int]]:
    """An answer callback that records how many answers overlap. With ``expected``, each answer
    is held until that many are outstanding together (or 30 s pass: then they never were);
    without, each is held 0.3 s, time for a sibling that should not come to show up."""
    peak = [0]
    live = [0]
    together = asyncio.Event()
    base = harness_like("Hello there!")

    async def answer(request: dict[str, Any]) -> dict[str, Any]:
        live[0] += 1
        peak[0] = max(peak[0], live[0])
        if expected and live[0] >= expected:
            together.set()
        if expected:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(together.wait(), 30)
        else:
            await asyncio.sleep(0.3)
        live[0] -= 1
        return await base(request)

    return answer, peak


async def test_multiple_inputs_are_outstanding_together(legacy: LegacyServer) -> None:
    answer, peak = _outstanding_counter(expected=3)
    async with httpx.AsyncClient(timeout=30) as http:
        client = LegacyClient(http, legacy.url)
        await client.initialize(ALL_CAPS)
        exchange = await client.request(
            "tools/call",
            {"name": "test_input_required_result_multiple_inputs", "arguments": {}},
            answer=answer,
        )
        await client.close()
    assert peak[0] == 3, f"only {peak[0]} of the 3 questions were outstanding at once"
    assert exchange.asked == ["elicitation/create", "sampling/createMessage", "roots/list"]
    # Request ids come from the session's counter, starting at 0 in mcp 1.x.
    assert [r["id"] for r in exchange.server_requests] == [0, 1, 2]


@pytest.mark.parametrize(
    ("declared", "asked"),
    [
        ({"sampling": {}}, ["sampling/createMessage"]),
        ({"elicitation": {}}, ["elicitation/create"]),
        ({"sampling": {}, "elicitation": {}}, ["elicitation/create", "sampling/createMessage"]),
    ],
)
async def test_capabilities_tool_follows_initialize(
    legacy: LegacyServer, declared: dict[str, Any], asked: list[str]
) -> None:
    """The scenario's _meta clientCapabilities has a 2025 equivalent: initialize's capabilities."""
    async with httpx.AsyncClient(timeout=30) as http:
        client = LegacyClient(http, legacy.url)
        await client.initialize(declared)
        exchange = await client.request(
            "tools/call",
            {"name": "test_input_required_result_capabilities", "arguments": {}},
            answer=harness_like("Hello"),
        )
        await client.close()
    assert sorted(exchange.asked) == asked
    assert exchange.text.startswith("Asked via: ")


async def test_options_standalone_roots_and_sequential_inputs(work_dir: Path) -> None:
    """--roots-stream standalone: roots/list goes to the GET stream (mcp 1.30's list_roots());
    --multiple-inputs sequential: one question at a time."""
    require(uv_path() is not None, "uv is needed to run the mcp 1.30 fixture in isolation")
    answer, peak = _outstanding_counter()
    args = ("--roots-stream", "standalone", "--multiple-inputs", "sequential")
    with serving_legacy(work_dir, *args, name="legacy_everything-options") as server:
        async with httpx.AsyncClient(timeout=30) as http:
            client = LegacyClient(http, server.url)
            await client.initialize(ALL_CAPS)
            async with client.standalone_stream(harness_like()) as on_get:
                roots = await client.request(
                    "tools/call",
                    {"name": "test_input_required_result_list_roots", "arguments": {}},
                    answer=answer,
                )
                multiple = await client.request(
                    "tools/call",
                    {"name": "test_input_required_result_multiple_inputs", "arguments": {}},
                    answer=answer,
                )
            await client.close()
    assert roots.server_requests == [], "roots/list must not come on the POST stream here"
    assert [m["method"] for m in on_get] == ["roots/list", "roots/list"]
    assert HARNESS_ROOTS["roots"][0]["uri"] in roots.text
    assert multiple.asked == ["elicitation/create", "sampling/createMessage"]
    assert peak[0] == 1
    assert "All inputs received" in multiple.text


# ---- (c) the MRTR scenarios at 2026-07-28, directly ------------------------------------


async def test_a_2026_request_gets_missing_session_id(legacy: LegacyServer) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "test_input_required_result_elicitation",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": REVISION,
                "io.modelcontextprotocol/clientCapabilities": ALL_CAPS,
            },
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": REVISION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "test_input_required_result_elicitation",
    }
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(legacy.url, json=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error == {"code": -32600, "message": "Bad Request: Missing session ID"}


def test_mrtr_scenarios_fail_directly(mrtr_runs: dict[str, SuiteRun]) -> None:
    verdicts = {name: mrtr_runs[name].verdict(name) for name in MRTR_SCENARIOS}
    explain = "\n".join(mrtr_runs[name].explain([name]) for name in MRTR_SCENARIOS)
    assert verdicts == DIRECT_MRTR_VERDICTS, explain


def test_no_mrtr_scenario_got_anything_but_missing_session_id(
    mrtr_runs: dict[str, SuiteRun], legacy: LegacyServer
) -> None:
    """Nothing reached a handler: every outcome traces back to the -32600 rejection."""
    for name in MRTR_SCENARIOS:
        scenario = mrtr_runs[name].scenarios[name]
        for check in scenario.checks:
            if check.id == "wire-schema-valid":
                continue
            evidence = (check.error_message or "") + json.dumps(check.details)
            if check.status == "SUCCESS":
                # unsupported-methods records no details; validate-input records the error.
                assert check.id == "sep-2322-not-on-unsupported-requests" or (
                    MISSING_SESSION in evidence
                ), (name, check)
                continue
            expected = UNQUOTED_ERROR_MESSAGES.get(check.id, MISSING_SESSION)
            assert expected in evidence, (name, check)
            # No result of any kind (input_required or complete) ever came back.
            assert '"result": {' not in json.dumps(check.details), (name, check)
    modern = [e for e in legacy.requests() if e.get("protocol_version") == REVISION]
    assert modern and all(e["session_id"] is None for e in modern)
