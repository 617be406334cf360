"""The official TypeScript client SDK (`@modelcontextprotocol/client` 2.x, pinned to 2026-07-28)
through a real `mcp-edge serve` in front of real `mcp` 2.x upstreams.

A second, independent client implementation: it negotiates with `server/discover`, sends the
per-request `_meta` envelope and mirrored headers its own way, and runs the MRTR rounds itself
(`client.callTool()` fulfils `input_required` through its registered handlers and echoes the
sealed `requestState`). The driver (`tests/clients/ts_mcp_client.mjs`) reports what the client
got, what its handlers were asked and what it sent; the upstreams' logs show what got through.
"""

from __future__ import annotations

import functools
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running, require, start_gateway, start_upstream
from tests.support.raw_http import MARKER_HEADER, new_marker
from tests.support.ts_client import INSTALL_HINT, REVISION, run_ts_client, ts_client_launcher

pytestmark = pytest.mark.integration

FORM_ONLY = {"elicitation": {"form": {}}}
ALL_INPUTS = {"elicitation": {"form": {}}, "sampling": {}, "roots": {}}
SAID_HI = {
    "role": "assistant",
    "content": {"type": "text", "text": "hi"},
    "model": "m",
    "stopReason": "endTurn",
}


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    require(ts_client_launcher() is not None, f"the TypeScript MCP client SDK: {INSTALL_HINT}")
    log = module_tmp / "plaintext.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        gateway = functools.partial(start_gateway, stack, module_tmp, keys=state_key)
        plaintext = start_upstream(
            stack, "plaintext_state.py", module_tmp, "--log", str(log), "--json-response"
        )
        everything = start_upstream(stack, "everything.py", module_tmp)  # SSE answers
        survey = start_upstream(stack, "mrtr_upstream.py", module_tmp, "--ephemeral")
        yield {
            "log": log,
            "survey": survey,
            "plaintext_gw": gateway(upstream=plaintext.url),
            "everything_gw": gateway(upstream=everything.url),
            "survey_gw": gateway(upstream=survey.url),
            "survey_capped_gw": gateway(
                config={
                    "routes": [{"name": "default", "path": "/mcp", "upstream": survey.url}],
                    "state": {"max_rounds": 2},
                }
            ),
        }


def upstream_log(env, marker: str) -> list[dict]:
    """What reached the plaintext upstream of the requests marked ``marker``: one entry per
    request, as it arrived."""
    lines = env["log"].read_text().splitlines()
    return [
        e
        for e in map(json.loads, filter(None, lines))
        if e.get("event") == "request" and e.get("marker") == marker
    ]


def marked(marker: str) -> dict[str, dict[str, str]]:
    """The plan entry that makes the client send ``marker`` with every request."""
    return {"headers": {MARKER_HEADER: marker}}


def survey_stats(env) -> dict:
    return httpx.get(f"{env['survey'].base}/stats", timeout=5).json()


def run(gateway: Running, steps: list[dict], **plan: Any) -> dict:
    """Run `steps` through the TS client against `gateway`; check it negotiated 2026-07-28."""
    report = run_ts_client({"url": gateway.url, "steps": steps, **plan}, timeout=40)
    assert report["connect"] == {"ok": True}, report
    assert (report["protocolVersion"], report["era"]) == (REVISION, "modern"), report
    # Nothing of the 2025 handshake: a server/discover probe, then modern requests only.
    sent = report["http"]
    assert sent[0]["rpcMethod"] == "server/discover", sent
    assert all(h["httpMethod"] == "POST" and h["rpcMethod"] != "initialize" for h in sent), sent
    assert all(h["headers"].get("mcp-protocol-version") == REVISION for h in sent), sent
    assert len(report["steps"]) == len(steps), report
    return report


def step_ok(report: dict, i: int) -> dict:
    step = report["steps"][i]
    assert step["ok"], step
    return step["result"]


def text_of(result: dict) -> str:
    return "".join(block.get("text", "") for block in result["content"])


# ---- discovery and listing -------------------------------------------------------------------


def test_lists_and_discovery_through_the_gateway(env):
    marker = new_marker("lists")
    report = run(
        env["plaintext_gw"],
        [{"op": "listTools"}, {"op": "listPrompts"}, {"op": "listResourceTemplates"}],
        **marked(marker),
    )
    tools = {tool["name"] for tool in step_ok(report, 0)["tools"]}
    assert {"ask_name", "ask_sample", "ask_roots", "three_rounds", "whoami_state"} <= tools
    prompts, templates = step_ok(report, 1)["prompts"], step_ok(report, 2)["resourceTemplates"]
    assert [p["name"] for p in prompts] == ["test_input_required_result_prompt"]
    assert [t["uriTemplate"] for t in templates] == ["plain://vault/{name}"]
    assert report["serverInfo"]["name"] == "mcp-edge-plaintext-state"  # from the discover result
    # What the upstream saw: the same four requests, all 2026-07-28, no initialize.
    seen = upstream_log(env, marker)
    assert [e["method"] for e in seen] == [
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/templates/list",
    ]
    assert {e["protocol_version"] for e in seen} == {REVISION}


def test_lists_and_sse_progress_from_an_mcpserver_upstream(env):
    report = run(
        env["everything_gw"],
        [
            {"op": "listTools"},
            {"op": "listPrompts"},
            {"op": "callTool", "name": "test_tool_with_progress", "progress": True},
        ],
    )
    tools = {tool["name"] for tool in step_ok(report, 0)["tools"]}
    assert {"test_simple_text", "test_input_required_result_elicitation"} <= tools
    prompts = {prompt["name"] for prompt in step_ok(report, 1)["prompts"]}
    assert {"test_simple_prompt", "test_input_required_result_prompt"} <= prompts
    # With a progressToken the upstream answers with an SSE stream, which passes through.
    assert [p["progress"] for p in report["steps"][2]["progress"]] == [0, 50, 100]
    assert text_of(step_ok(report, 2)) == str(report["http"][-1]["id"])  # the token echoed
    assert report["http"][-1]["contentType"].startswith("text/event-stream")


# ---- honest MRTR flows -------------------------------------------------------------------------


def test_elicitation_flow_completes_with_a_sealed_state(env):
    marker = new_marker("elicit")
    report = run(
        env["plaintext_gw"],
        [
            {
                "op": "rawRequest",
                "method": "tools/call",
                "allowInputRequired": True,
                "params": {"name": "ask_name", "arguments": {}},
            },
            {"op": "callTool", "name": "ask_name"},
        ],
        capabilities=FORM_ONLY,
        answers={"elicitation": [accept(name="Ada")]},
        **marked(marker),
    )
    # Manual mode shows what the client holds: the gateway's envelope, not the upstream's state.
    raw = step_ok(report, 0)
    assert raw["resultType"] == "input_required"
    assert raw["requestState"].startswith("mcpe1.") and "ask_name:1" not in raw["requestState"]
    assert list(raw["inputRequests"]) == ["name"]
    # Auto mode: the SDK asked its elicitation handler once and retried with the answer.
    result = step_ok(report, 1)
    assert text_of(result) == "Hello, Ada!" and result["structuredContent"] == {"name": "Ada"}
    assert [(a["method"], a["key"], a["params"]["message"]) for a in report["asked"]] == [
        ("elicitation/create", "name", "What is your name?")
    ]
    # The upstream got its own plaintext state back on the retry, and the answer unchanged.
    calls = [e for e in upstream_log(env, marker) if e.get("name") == "ask_name"]
    assert [(e["request_state"], e["input_response_keys"]) for e in calls] == [
        (None, None),
        (None, None),
        ("ask_name:1", ["name"]),
    ]


def test_sampling_and_roots_flows_complete(env):
    report = run(
        env["plaintext_gw"],
        [
            {"op": "callTool", "name": "ask_sample"},
            {"op": "callTool", "name": "ask_roots"},
            {"op": "callTool", "name": "ask_three"},
        ],
        capabilities=ALL_INPUTS,
        answers={
            "sampling": [SAID_HI, {**SAID_HI, "content": {"type": "text", "text": "hello"}}],
            "elicitation": [accept(name="Ada")],
            "roots": [{"uri": "file:///tmp/x", "name": "x"}],
        },
    )
    assert text_of(step_ok(report, 0)) == "Model said: hi"
    assert text_of(step_ok(report, 1)) == "1 root(s): file:///tmp/x"
    assert step_ok(report, 2)["structuredContent"] == {"answer": "hello", "name": "Ada", "roots": 1}
    asked = [(a["method"], a["key"]) for a in report["asked"]]
    assert asked[:2] == [("sampling/createMessage", "answer"), ("roots/list", "roots")]
    assert sorted(asked[2:]) == [
        ("elicitation/create", "name"),
        ("roots/list", "roots"),
        ("sampling/createMessage", "answer"),
    ]
    sampled = report["asked"][0]["params"]
    assert sampled["messages"][0]["content"]["text"] == "Say something short."


def test_mcpserver_flows_complete_on_all_three_methods(env):
    """MCPServer seals its own state; the gateway seals that again (tools, prompts, resources)."""
    report = run(
        env["everything_gw"],
        [
            {"op": "callTool", "name": "test_input_required_result_sampling"},
            {"op": "callTool", "name": "test_input_required_result_multiple_inputs"},
            {"op": "callTool", "name": "test_input_required_result_multi_round"},
            {"op": "getPrompt", "name": "test_input_required_result_prompt"},
            {"op": "readResource", "uri": "test://input-required/vault"},
        ],
        capabilities=ALL_INPUTS,
        answers={
            "sampling": [{**SAID_HI, "content": {"type": "text", "text": "Paris"}}, SAID_HI],
            "elicitation": [
                accept(name="Ada"),
                accept(name="Bob"),
                accept(color="green"),
                accept(context="ctx-1"),
                accept(pin="1234"),
            ],
            "roots": [{"uri": "file:///tmp/x", "name": "x"}],
        },
    )
    assert text_of(step_ok(report, 0)) == "Model said: Paris"
    assert text_of(step_ok(report, 1)) == "All inputs received."
    assert text_of(step_ok(report, 2)) == "Bob likes green."
    prompt = step_ok(report, 3)
    assert prompt["messages"][0]["content"]["text"] == "Use the following context: ctx-1"
    assert step_ok(report, 4)["contents"][0]["text"] == "vault unlocked with pin 1234"
    assert [a["key"] for a in report["asked"][-2:]] == ["user_context", "pin"]


SURVEY = {"op": "callTool", "name": "survey", "arguments": {"topic": "ops"}}
SURVEY_ANSWERS = [accept(answer="red"), accept(answer="42"), accept(answer="yes")]


def test_three_round_survey_completes(env):
    before = survey_stats(env)
    report = run(
        env["survey_gw"],
        [SURVEY],
        capabilities=FORM_ONLY,
        maxRounds=3,
        answers={"elicitation": SURVEY_ANSWERS},
    )
    instance = f"127.0.0.1:{env['survey'].port}"
    assert text_of(step_ok(report, 0)) == f"ops: red, 42, yes | served by {instance} x4"
    assert [(a["key"], a["params"]["message"]) for a in report["asked"]] == [
        ("q1", "Favourite colour?"),
        ("q2", "Lucky number?"),
        ("q3", "Ship it?"),
    ]
    calls = [h for h in report["http"] if h["rpcMethod"] == "tools/call"]
    assert [h["status"] for h in calls] == [200] * 4
    assert all(h["headers"].get("mcp-name") == "survey" for h in calls)
    after = survey_stats(env)
    assert after["calls"]["survey"] - before["calls"].get("survey", 0) == 4
    assert after["retries"] - before["retries"] == 3


def test_the_gateways_round_limit_stops_the_survey(env):
    """state.max_rounds = 2: no third input_required round is issued to the client.

    The limit is enforced when sealing: the request carrying round 2's state is valid and is
    forwarded; its answer, which would open round 3, is replaced by an error saying the upstream
    asked for too many rounds."""
    before = survey_stats(env)
    report = run(
        env["survey_capped_gw"],
        [SURVEY],
        capabilities=FORM_ONLY,
        answers={"elicitation": SURVEY_ANSWERS},
    )
    step = report["steps"][0]
    assert not step["ok"] and step["error"]["code"] == -32603, step
    assert step["error"]["data"] == {"reason": "rounds"}
    assert [a["key"] for a in report["asked"]] == ["q1", "q2"]  # q3 never reached the client
    assert survey_stats(env)["calls"]["survey"] - before["calls"].get("survey", 0) == 3


# ---- refusals --------------------------------------------------------------------------------


def test_undeclared_sampling_is_refused_with_32021(env):
    marker = new_marker("sampling")
    report = run(
        env["plaintext_gw"],
        [
            {"op": "callTool", "name": "ask_sample"},
            {"op": "callTool", "name": "ask_name"},  # what it did declare still works
        ],
        capabilities=FORM_ONLY,
        answers={"elicitation": [accept(name="Ada")]},
        **marked(marker),
    )
    step = report["steps"][0]
    assert not step["ok"], step
    assert step["error"]["code"] == -32021, step  # not the SDK's own "no handler" error
    assert step["error"]["data"]["requiredCapabilities"] == {"sampling": {}}
    assert text_of(step_ok(report, 1)) == "Hello, Ada!"
    assert [a["method"] for a in report["asked"]] == ["elicitation/create"]
    first_call = next(h for h in report["http"] if h["rpcMethod"] == "tools/call")
    assert first_call["status"] == 400
    # The upstream answered round 1 and never saw a retry of ask_sample.
    samples = [e for e in upstream_log(env, marker) if e.get("name") == "ask_sample"]
    assert len(samples) == 1 and not samples[0]["has_request_state"]


def test_undeclared_sampling_is_refused_from_an_mcpserver_upstream(env):
    step = {"op": "callTool", "name": "test_input_required_result_sampling"}
    report = run(env["everything_gw"], [step], capabilities=FORM_ONLY)
    step = report["steps"][0]
    assert not step["ok"] and step["error"]["code"] == -32021, step
    assert step["error"]["data"]["requiredCapabilities"] == {"sampling": {}}
    assert report["asked"] == []


def test_tampered_state_is_refused_before_the_upstream(env):
    marker = new_marker("tampered")
    report = run(
        env["plaintext_gw"],
        [
            {
                "op": "retryTampered",
                "params": {"name": "whoami_state", "arguments": {"state": "s1"}},
            },
            {
                "op": "retryTampered",
                "method": "prompts/get",
                "params": {"name": "test_input_required_result_prompt", "arguments": {}},
            },
            {
                "op": "retryTampered",
                "method": "resources/read",
                "params": {"uri": "plain://vault/a"},
            },
        ],
        capabilities=FORM_ONLY,
        answers={"elicitation": [accept(ok=True), accept(context="c"), accept(pin="1")]},
        **marked(marker),
    )
    for step in report["steps"]:
        assert step["round1"]["requestState"].startswith("mcpe1."), step
        assert step["sentState"] != step["round1"]["requestState"]
        assert not step["ok"], step
        assert step["error"]["code"] == -32602, step
        assert step["error"]["data"] == {"reason": "integrity"}, step
    # Three first rounds reached the upstream; none of the retries did.
    seen = [e for e in upstream_log(env, marker) if e["method"] != "server/discover"]
    assert [e["method"] for e in seen] == ["tools/call", "prompts/get", "resources/read"]
    assert not any(e["has_request_state"] or e["has_input_responses"] for e in seen)
    retries = [h for h in report["http"] if h["rpcMethod"] != "server/discover"][1::2]
    assert [h["status"] for h in retries] == [400, 400, 400]
