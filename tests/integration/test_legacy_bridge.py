"""2026-07-28 clients through the gateway to unmodified 2025-era servers (the legacy bridge).

Upstreams are real: tests/servers/legacy_server.py on FastMCP from ``mcp==1.30.0`` (its own
isolated environment), with and without an event store, in JSON-response and stateless modes,
and the ``mcp`` 2.x SDK's own legacy leg (tests/servers/demo_sse.py behind ``era: legacy``).
Clients are real: the ``mcp`` 2.x client pinned to 2026-07-28, the TypeScript SDK client pinned
the same way, and raw HTTP for what the SDKs hide (result shapes, headers, SSE).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from mcp.types import CreateMessageResult, ElicitResult, ListRootsResult, Root, TextContent

from tests.conftest import Running, require, start_gateway, start_upstream
from tests.scale.cluster import metric, scrape
from tests.support.legacy import LegacyStats, legacy_initialize, start_legacy
from tests.support.processes import run_bounded, venv_command, write_private
from tests.support.ts_client import run_ts_client, ts_client_launcher

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
ALL_CAPS = {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}}


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str):
    logs = {name: module_tmp / f"{name}.jsonl" for name in ("es", "plain")}
    with ExitStack() as stack:
        es = start_legacy(
            stack,
            module_tmp,
            "--event-store",
            "--subscriptions",
            "--instance",
            "es",
            "--log",
            str(logs["es"]),
        )
        plain = start_legacy(stack, module_tmp, "--instance", "plain", "--log", str(logs["plain"]))
        jsonmode = start_legacy(stack, module_tmp, "--json-response", "--instance", "json")
        stateless = start_legacy(stack, module_tmp, "--stateless", "--instance", "stateless")
        v2 = start_upstream(stack, "demo_sse.py", module_tmp)

        def gateway(upstream: Running, **route: Any) -> Running:
            return start_gateway(
                stack,
                module_tmp,
                keys=state_key,
                config={
                    "routes": [
                        {"name": "legacy", "path": "/mcp", "upstream": upstream.url, **route}
                    ]
                },
            )

        yield {
            "es": es,
            "plain": plain,
            "logs": logs,
            "gw_es": gateway(es),
            "gw_plain": gateway(plain),
            "gw_replay": gateway(
                plain,
                era="legacy",
                bridge={
                    "tools": {
                        "versioned_question": "replay",
                        "side_effect": "replay",
                        "three_questions": ["park", "replay"],
                    }
                },
            ),
            "gw_json": gateway(jsonmode, bridge={"json_response_timeout": 2}),
            "gw_stateless": gateway(stateless),
            "gw_v2": gateway(v2, era="legacy"),
        }


# ---- helpers -----------------------------------------------------------------------------------


def meta(caps: dict | None = None, **extra: Any) -> dict:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": ALL_CAPS if caps is None else caps,
        **extra,
    }


def post(
    gateway: Running,
    request_id: int,
    method: str,
    params: dict | None = None,
    *,
    caps: dict | None = None,
    meta_extra: dict | None = None,
    name: str | None = None,
) -> httpx.Response:
    params = dict(params or {})
    params["_meta"] = meta(caps, **(meta_extra or {}))
    headers = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    target = params.get("uri") if method == "resources/read" else params.get("name")
    if method in ("tools/call", "prompts/get", "resources/read"):
        headers["Mcp-Name"] = name or target
    with httpx.Client(timeout=20) as http:
        return http.post(
            gateway.url,
            headers=headers,
            json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params},
        )


def message_of(r: httpx.Response) -> dict:
    """The JSON-RPC response of a JSON body, or the last data event of an SSE body."""
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])


def events_of(r: httpx.Response) -> list[dict]:
    return [
        json.loads(line[5:].strip()) for line in r.text.splitlines() if line.startswith("data:")
    ]


def tool(
    gateway: Running, request_id: int, name: str, arguments: dict | None = None, **kw: Any
) -> dict:
    return message_of(
        post(gateway, request_id, "tools/call", {"name": name, "arguments": arguments or {}}, **kw)
    )


def retry(
    gateway: Running,
    request_id: int,
    name: str,
    arguments: dict,
    previous: dict,
    answers: dict,
    **kw: Any,
) -> dict:
    params = {
        "name": name,
        "arguments": arguments,
        "inputResponses": answers,
        "requestState": previous["result"]["requestState"],
    }
    return message_of(post(gateway, request_id, "tools/call", params, **kw))


def accept(**content: Any) -> dict:
    return {"action": "accept", "content": content}


def text_of(result: dict) -> str:
    return "".join(block.get("text", "") for block in result.get("content", []))


def flows(gateway: Running, strategy: str, event: str) -> float:
    return metric(
        scrape(gateway.base), "mcp_edge_bridge_flow_events_total", strategy=strategy, event=event
    )


def upstream_log(env, name: str) -> list[dict]:
    return [json.loads(line) for line in env["logs"][name].read_text().splitlines() if line.strip()]


class Answers:
    """Callbacks for the mcp 2.x client that record what they were asked."""

    def __init__(self, elicit: list[dict] | None = None) -> None:
        self.elicit = list(elicit or [])
        self.asked: list[tuple[str, Any]] = []

    async def on_elicit(self, ctx, params) -> ElicitResult:
        self.asked.append(("elicitation/create", params))
        answer = self.elicit.pop(0) if self.elicit else {"action": "decline"}
        return ElicitResult(**answer)

    async def on_sample(self, ctx, params) -> CreateMessageResult:
        self.asked.append(("sampling/createMessage", params))
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="Paris"), model="m"
        )

    async def on_roots(self, ctx) -> ListRootsResult:
        self.asked.append(("roots/list", None))
        return ListRootsResult(roots=[Root(uri="file:///work/a"), Root(uri="file:///work/b")])

    def client(self, url: str) -> Client:
        return Client(
            url,
            mode=MODERN,
            elicitation_callback=self.on_elicit,
            sampling_callback=self.on_sample,
            list_roots_callback=self.on_roots,
        )


# ---- the era and the plain methods -------------------------------------------------------------


async def test_pinned_client_fails_directly_and_works_through_the_gateway(env):
    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the SDK wraps it in exception groups
        async with Client(env["plain"].url, mode=MODERN) as client:
            await client.list_tools()
    errors = [raised.value]
    while isinstance(errors[-1], BaseExceptionGroup):
        errors.append(errors[-1].exceptions[0])
    assert isinstance(errors[-1], MCPError) and "Missing session ID" in str(errors[-1]), errors
    async with Client(env["gw_plain"].url, mode=MODERN) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"add", "book_table", "three_questions", "show_roots"} <= tools
        assert (await client.call_tool("add", {"a": 2, "b": 3})).structured_content == {"result": 5}


def test_the_era_is_detected_and_reported(env):
    ready = httpx.get(env["gw_es"].base + "/readyz", timeout=5).json()
    assert ready["routes"]["legacy"] == {"era": "auto", "detected": "legacy"}
    assert (
        httpx.get(env["gw_v2"].base + "/readyz", timeout=5).json()["routes"]["legacy"]["era"]
        == "legacy"
    )
    config = {
        "routes": [{"name": "legacy", "path": "/mcp", "upstream": env["es"].url}],
        "auth": {"mode": "anonymous"},
    }
    path = Path(env["logs"]["es"]).with_name("check.yaml")
    write_private(path, json.dumps(config))
    out = run_bounded(
        [*venv_command("mcp-edge"), "check-config", "--probe", "--config", str(path)],
        timeout=60,
        env={"MCP_EDGE_STATE_KEYS": "x" * 43},
    )
    assert out.returncode == 0 and "route legacy: era auto, detected legacy" in out.output, (
        out.output
    )


def test_results_are_2026_results(env):
    gw = env["gw_plain"]
    discover = message_of(post(gw, 1, "server/discover"))["result"]
    assert discover["supportedVersions"] == [MODERN] and discover["resultType"] == "complete"
    assert discover["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "legacy-fixture"
    assert "tools" in discover["capabilities"] and (discover["ttlMs"], discover["cacheScope"]) == (
        0,
        "private",
    )
    for method in ("tools/list", "prompts/list", "resources/list", "resources/templates/list"):
        result = message_of(post(gw, 2, method))["result"]
        assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == (
            "complete",
            0,
            "private",
        ), method
    read = message_of(post(gw, 3, "resources/read", {"uri": "static://hello"}))["result"]
    assert read["contents"][0]["text"] == "hello" and read["resultType"] == "complete"
    prompt = message_of(
        post(gw, 4, "prompts/get", {"name": "greeting", "arguments": {"name": "Ada"}})
    )["result"]
    assert (
        prompt["messages"][0]["content"]["text"] == "Hello, Ada!"
        and prompt["resultType"] == "complete"
    )
    completion = message_of(
        post(
            gw,
            5,
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "greeting"},
                "argument": {"name": "name", "value": "a"},
            },
        )
    )
    assert (
        completion["result"]["completion"]["values"]
        and completion["result"]["resultType"] == "complete"
    )
    missing = message_of(post(gw, 6, "resources/read", {"uri": "nothing://here"}))
    assert missing["id"] == 6 and missing["error"]["message"] == "Unknown resource: nothing://here"
    unknown = post(gw, 7, "subscriptions/listen", {"filter": {}})
    assert unknown.status_code == 404 and unknown.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32601,
            "message": "Method not found",
            "data": {"method": "subscriptions/listen"},
        },
    }


def test_upstream_sessions_are_opened_for_the_caller_and_reused(env):
    before = LegacyStats(env["plain"]).get_sync()
    for i in range(5):
        assert tool(env["gw_plain"], 10 + i, "add", {"a": i, "b": 1})["result"][
            "structuredContent"
        ] == {"result": i + 1}
    after = LegacyStats(env["plain"]).get_sync()
    assert after["tools"]["add"] - before["tools"].get("add", 0) == 5
    assert (
        after["sessions_initialized"] - before["sessions_initialized"] <= 1
    )  # pooled, not one per call
    # Another declared capability set never reuses those sessions.
    tool(env["gw_plain"], 20, "add", {"a": 1, "b": 1}, caps={})
    assert (
        LegacyStats(env["plain"]).get_sync()["sessions_initialized"] > after["sessions_initialized"]
    )
    inits = [e for e in upstream_log(env, "plain") if e.get("method") == "initialize"]
    assert inits and inits[-1]["params"]["capabilities"] == {}  # never more than declared
    calls = [e for e in upstream_log(env, "plain") if e.get("method") == "tools/call"]
    assert calls and all(isinstance(e["id"], str) and e["id"].startswith("mcpe-") for e in calls)


# ---- MRTR flows ----------------------------------------------------------------------------


@pytest.mark.parametrize("gw,strategy", [("gw_es", "resume"), ("gw_plain", "park")])
async def test_one_elicitation_with_the_sdk_client(env, gw, strategy):
    before = flows(env[gw], strategy, "continued")
    answers = Answers([accept(size=4)])
    async with answers.client(env[gw].url) as client:
        result = await client.call_tool("book_table", {"date": "2026-12-24"})
    assert result.content[0].text == "Booked 4 on 2026-12-24"
    assert [m for m, _ in answers.asked] == ["elicitation/create"]
    assert answers.asked[0][1].message == "How many people for 2026-12-24?"
    assert flows(env[gw], strategy, "continued") == before + 1


@pytest.mark.parametrize("gw", ["gw_es", "gw_plain"])
async def test_sampling_and_roots_with_the_sdk_client(env, gw):
    answers = Answers()
    async with answers.client(env[gw].url) as client:
        assert (await client.call_tool("ask_model", {"question": "Capital of France?"})).content[
            0
        ].text == "Model said: Paris"
        # roots/list tied to the call (on its own stream): the call's question.
        assert (await client.call_tool("roots_in_call", {})).content[
            0
        ].text == "Roots: file:///work/a, file:///work/b"
        # The SDK's plain way (list_roots(), create_message() without a related request id):
        # on the session's standalone stream, while this call is the only one in flight on the
        # session, for a client that declared roots and sampling: the call's question too, as
        # a 2025-era client would be asked (before: refused, and the tool failed).
        plain_roots = await client.call_tool("show_roots", {})
        assert plain_roots.content[0].text == "Roots: file:///work/a, file:///work/b"
        plain_model = await client.call_tool("sample_plainly", {"question": "Capital?"})
        assert plain_model.content[0].text == "Model said: Paris"
    assert [m for m, _ in answers.asked] == [
        "sampling/createMessage",
        "roots/list",
        "roots/list",
        "sampling/createMessage",
    ]


@pytest.mark.parametrize("gw", ["gw_es", "gw_plain"])
def test_a_standalone_request_the_call_did_not_declare_is_refused_and_the_call_goes_on(env, gw):
    """A client that declared nothing: the plain list_roots() is answered -32601 (the client does
    not support it) and never becomes a -32021 for the call; the tool sees the refusal."""
    doc = tool(env[gw], 1, "show_roots", caps={})
    assert doc["result"]["resultType"] == "complete" and doc["result"]["isError"], doc
    assert "does not support roots/list" in text_of(doc["result"])


@pytest.mark.parametrize(("gw", "upstream"), [("gw_es", "es"), ("gw_plain", "plain")])
async def test_a_request_the_server_sends_between_calls_is_answered_at_once(env, gw, upstream):
    """The call answers, then the server sends roots/list and ping on the session's standalone
    stream while no call is in flight: both are answered at once, as the manual's table says
    (ping: empty; roots/list, declared: -32603, no call can carry it), never left waiting (the
    server would wait for ever, or for its own timeout)."""
    key = uuid.uuid4().hex
    doc = tool(env[gw], 1, "ask_later", {"key": key, "methods": ["ping", "roots/list"]})
    assert text_of(doc["result"]) == "later", doc
    stats = LegacyStats(env[upstream])
    later: dict[str, str] = {}
    for _ in range(100):  # at most 20 s
        later = (await stats.get())["later"]
        if f"{key} roots/list" in later:
            break
        await asyncio.sleep(0.2)
    assert later.get(f"{key} ping") == "pong", later
    assert later.get(f"{key} roots/list", "").startswith("error -32603:"), later
    assert "cannot reach the client" in later[f"{key} roots/list"]


@pytest.mark.parametrize("gw", ["gw_es", "gw_plain"])
async def test_three_questions_in_sequence(env, gw):
    answers = Answers([accept(colour="teal"), accept(number=7), accept(ship=True)])
    async with answers.client(env[gw].url) as client:
        result = await client.call_tool("three_questions", {"topic": "release"})
    assert result.content[0].text == "release: teal, 7, True"
    assert [p.message for _, p in answers.asked] == [
        "Favourite colour for release?",
        "Lucky number for release?",
        "Ship release?",
    ]


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_pass_through(env, action):
    gw, args = env["gw_plain"], {"date": "2026-01-01"}
    first = tool(gw, 1, "book_table", args)
    (key,) = first["result"]["inputRequests"]
    done = retry(gw, 2, "book_table", args, first, {key: {"action": action}})
    assert (
        text_of(done["result"]) == f"Not booked ({action})"
        and done["result"]["resultType"] == "complete"
    )


def test_input_request_is_the_servers_question(env):
    first = tool(env["gw_es"], 1, "book_table", {"date": "2026-05-05"})
    result = first["result"]
    assert result["resultType"] == "input_required" and result["requestState"].startswith("mcpe1.")
    assert result["inputRequests"] == {
        "elicitation-1": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "How many people for 2026-05-05?",
                "requestedSchema": {
                    "properties": {"size": {"title": "Size", "type": "integer"}},
                    "required": ["size"],
                    "title": "Party",
                    "type": "object",
                },
            },
        }
    }
    # Nothing of the upstream session shows: the continuation is sealed.
    assert "mcpe-" not in result["requestState"] and env["es"].url not in result["requestState"]


def test_a_tampered_state_never_reaches_the_upstream(env):
    gw, args = env["gw_es"], {"date": "2026-02-02"}
    first = tool(gw, 1, "book_table", args)
    state = first["result"]["requestState"]
    i = len(state) // 2
    first["result"]["requestState"] = state[:i] + ("A" if state[i] != "A" else "B") + state[i + 1 :]
    before = LegacyStats(env["es"]).get_sync()
    refused = retry(gw, 2, "book_table", args, first, {"elicitation-1": accept(size=2)})
    assert refused["error"]["code"] == -32602 and refused["error"]["data"] == {
        "reason": "integrity"
    }
    after = LegacyStats(env["es"]).get_sync()
    assert after["responses"] == before["responses"] and after["resumes"] == before["resumes"]


def test_a_missing_answer_asks_again(env):
    gw, args = env["gw_plain"], {"date": "2026-03-03"}
    first = tool(gw, 1, "book_table", args)
    again = retry(gw, 2, "book_table", args, first, {"wrong-key": accept(size=1)})
    assert again["result"]["inputRequests"] == first["result"]["inputRequests"]
    bad = retry(gw, 3, "book_table", args, again, {"elicitation-1": 12345})
    assert bad["result"]["resultType"] == "input_required"
    done = retry(gw, 4, "book_table", args, bad, {"elicitation-1": accept(size=3)})
    assert text_of(done["result"]) == "Booked 3 on 2026-03-03"


def test_undeclared_capability_is_refused_and_the_call_cancelled(env):
    r = post(
        env["gw_plain"],
        1,
        "tools/call",
        {"name": "ask_model", "arguments": {"question": "x"}},
        caps={"elicitation": {"form": {}}},
    )
    assert r.status_code == 400
    assert r.json()["error"] == {
        "code": -32021,
        "message": "The upstream needs a client capability this request did not declare",
        "data": {"requiredCapabilities": {"sampling": {}}},
    }


def test_changed_question_under_replay_becomes_a_new_round(env):
    gw, args = env["gw_replay"], {"key": "k-replay"}
    first = tool(gw, 1, "versioned_question", args)
    assert (
        first["result"]["inputRequests"]["elicitation-1"]["params"]["message"]
        == "Question v1 for k-replay?"
    )
    second = retry(
        gw, 2, "versioned_question", args, first, {"elicitation-1": accept(answer="for-v1")}
    )
    # Re-run, the server asks something else: never answered with what was said to v1.
    assert second["result"]["resultType"] == "input_required"
    (key,) = second["result"]["inputRequests"]
    assert (
        second["result"]["inputRequests"][key]["params"]["message"] == "Question v2 for k-replay?"
    )
    done = retry(gw, 3, "versioned_question", args, second, {key: accept(answer="for-v2")})
    assert text_of(done["result"]) == "k-replay: answered v2 with for-v2"


def test_replay_re_runs_the_call(env):
    gw, args = env["gw_replay"], {"key": "k-effects"}
    first = tool(gw, 1, "side_effect", args)
    done = retry(gw, 2, "side_effect", args, first, {"elicitation-1": accept(confirm=True)})
    assert text_of(done["result"]) == "k-effects: confirmed=True runs=2"  # what replay costs
    assert LegacyStats(env["plain"]).get_sync()["side_effects"]["k-effects"] == 2


def test_ping_is_answered_by_the_gateway(env):
    gw = env["gw_plain"]
    first = tool(gw, 1, "ping_then_ask")
    assert list(first["result"]["inputRequests"].values())[0]["method"] == "elicitation/create"
    done = retry(gw, 2, "ping_then_ask", {}, first, {"elicitation-1": accept(answer="here")})
    assert text_of(done["result"]) == "here"


def test_progress_and_logs_only_when_asked_for(env):
    gw = env["gw_es"]
    quiet = post(gw, 1, "tools/call", {"name": "progress_steps", "arguments": {"steps": 3}})
    assert quiet.headers["content-type"].startswith("application/json")
    assert text_of(quiet.json()["result"]) == "done 3"
    loud = post(
        gw,
        2,
        "tools/call",
        {"name": "progress_steps", "arguments": {"steps": 3}},
        meta_extra={"progressToken": "tok-1", "io.modelcontextprotocol/logLevel": "info"},
    )
    assert loud.headers["content-type"].startswith("text/event-stream")
    events = events_of(loud)
    progress = [e for e in events if e.get("method") == "notifications/progress"]
    logs = [e for e in events if e.get("method") == "notifications/message"]
    assert [p["params"]["progress"] for p in progress] == [1, 2, 3]
    assert all(p["params"]["progressToken"] == "tok-1" for p in progress)
    assert len(logs) == 3 and events[-1]["id"] == 2 and text_of(events[-1]["result"]) == "done 3"


def test_url_mode_elicitation(env):
    gw = env["gw_es"]
    first = tool(gw, 1, "url_consent")
    (question,) = first["result"]["inputRequests"].values()
    assert question["params"]["mode"] == "url" and "elicitationId" not in question["params"]
    assert question["params"]["url"].startswith("https://consent.example/approve")
    done = retry(gw, 2, "url_consent", {}, first, {"elicitation-1": {"action": "accept"}})
    assert text_of(done["result"]) == "URL consent: accept"
    # A legacy -32042 (URL elicitation required) becomes URL-mode input requests.
    required = tool(gw, 3, "url_required")
    assert required["result"]["inputRequests"] == {
        "url-1": {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": "Authorization required",
                "url": "https://consent.example/authorize",
            },
        }
    }
    form_only = post(
        gw,
        4,
        "tools/call",
        {"name": "url_required", "arguments": {}},
        caps={"elicitation": {"form": {}}},
    )
    assert (
        form_only.json()["error"]["code"] == -32042
    )  # passed on as it came: the client cannot do URL mode


def test_prompts_and_resources_can_ask_too(env):
    gw = env["gw_plain"]
    first = message_of(
        post(gw, 1, "prompts/get", {"name": "briefing", "arguments": {"topic": "MRTR"}})
    )
    (key,) = first["result"]["inputRequests"]
    r = post(
        gw,
        2,
        "prompts/get",
        {
            "name": "briefing",
            "arguments": {"topic": "MRTR"},
            "inputResponses": {key: accept(audience="ops")},
            "requestState": first["result"]["requestState"],
        },
    )
    assert (
        message_of(r)["result"]["messages"][0]["content"]["text"]
        == "Write a briefing on MRTR for ops."
    )
    first = message_of(post(gw, 3, "resources/read", {"uri": "secret://vault"}))
    (key,) = first["result"]["inputRequests"]
    r = post(
        gw,
        4,
        "resources/read",
        {
            "uri": "secret://vault",
            "inputResponses": {key: accept(pin="1234")},
            "requestState": first["result"]["requestState"],
        },
    )
    assert message_of(r)["result"]["contents"][0]["text"] == "secret vault unlocked with pin 1234"


def test_servers_that_cannot_ask_get_a_clear_error(env):
    assert tool(env["gw_json"], 1, "add", {"a": 1, "b": 2})["result"]["structuredContent"] == {
        "result": 3
    }
    stuck = tool(env["gw_json"], 2, "book_table", {"date": "2026-01-01"})
    assert (
        stuck["error"]["data"] == {"reason": "upstream_cannot_ask"}
        and "json_response" in stuck["error"]["message"]
    )
    assert tool(env["gw_stateless"], 3, "add", {"a": 1, "b": 2})["result"]["structuredContent"] == {
        "result": 3
    }
    lost = tool(env["gw_stateless"], 4, "book_table", {"date": "2026-01-01"})
    assert (
        lost["error"]["data"] == {"reason": "upstream_cannot_ask"}
        and "stateless_http" in lost["error"]["message"]
    )


async def test_the_2x_sdks_own_legacy_leg(env):
    answers = Answers([accept(size=6)])
    async with answers.client(env["gw_v2"].url) as client:
        result = await client.call_tool("book_table", {"date": "2026-07-28"})
    assert result.content[0].text == "Booked a table for 6 on 2026-07-28"
    assert flows(env["gw_v2"], "park", "continued") >= 1


# ---- the TypeScript client -------------------------------------------------------------------


def ts_run(gateway: Running, steps: list[dict], **plan: Any) -> dict:
    assert ts_client_launcher() is not None
    report = run_ts_client({"url": gateway.url, "steps": steps, **plan}, timeout=60)
    assert report["protocolVersion"] == MODERN and report["era"] == "modern", report
    return report


@pytest.mark.parametrize("gw", ["gw_es", "gw_plain"])
def test_typescript_client_flows(env, gw):
    require(ts_client_launcher() is not None, "the TypeScript client needs npm")
    report = ts_run(
        env[gw],
        [
            {"op": "listTools"},
            {"op": "callTool", "name": "book_table", "arguments": {"date": "2026-09-09"}},
            {"op": "callTool", "name": "ask_model", "arguments": {"question": "?"}},
            {"op": "callTool", "name": "three_questions", "arguments": {"topic": "ts"}},
        ],
        capabilities={"elicitation": {"form": {}}, "sampling": {}},
        answers={
            "elicitation": [
                accept(size=5),
                accept(colour="red"),
                accept(number=1),
                accept(ship=False),
            ],
            "sampling": [
                {"role": "assistant", "content": {"type": "text", "text": "Lyon"}, "model": "m"}
            ],
        },
    )
    steps = report["steps"]
    assert all(s["ok"] for s in steps), steps
    assert {t["name"] for t in steps[0]["result"]["tools"]} >= {"book_table", "ask_model"}
    assert text_of(steps[1]["result"]) == "Booked 5 on 2026-09-09"
    assert text_of(steps[2]["result"]) == "Model said: Lyon"
    assert text_of(steps[3]["result"]) == "ts: red, 1, False"
    assert [a["method"] for a in report["asked"]] == [
        "elicitation/create",
        "sampling/createMessage",
    ] + ["elicitation/create"] * 3


def test_typescript_form_only_client_asked_for_sampling(env):
    require(ts_client_launcher() is not None, "the TypeScript client needs npm")
    report = ts_run(
        env["gw_plain"],
        [{"op": "callTool", "name": "ask_model", "arguments": {"question": "?"}}],
        capabilities={"elicitation": {"form": {}}},
    )
    step = report["steps"][0]
    assert not step["ok"] and step["error"]["code"] == -32021
    assert step["error"]["data"] == {"requiredCapabilities": {"sampling": {}}}


# ---- legacy clients -------------------------------------------------------------------------


async def test_legacy_client_through_the_gateway_gets_a_sealed_session(env):
    """A 2025-era client (the mcp 2.x client in legacy mode) keeps working; the session id it
    holds is the gateway's sealed token, never the upstream's."""
    answers = Answers([accept(size=2)])
    async with Client(
        env["gw_plain"].url, mode="legacy", elicitation_callback=answers.on_elicit
    ) as client:
        result = await client.call_tool("book_table", {"date": "2025-12-24"})
        assert result.content[0].text == "Booked 2 on 2025-12-24"
    sessions = {e.get("session_id") for e in upstream_log(env, "plain") if e.get("session_id")}
    assert sessions and not any(s.startswith("mcpes1.") for s in sessions)
    with httpx.Client(timeout=10) as http:
        r = http.post(
            env["gw_plain"].url,
            headers={"Accept": ACCEPT},
            json=legacy_initialize("raw"),
        )
        token = r.headers["mcp-session-id"]
        assert token.startswith("mcpes1.") and token not in sessions
        tampered = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
        r = http.post(
            env["gw_plain"].url,
            headers={
                "Accept": ACCEPT,
                "Mcp-Session-Id": tampered,
                "MCP-Protocol-Version": "2025-11-25",
            },
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        )
        assert r.status_code == 404 and r.json()["error"]["message"] == "Session not found"


# ---- progress across rounds, listen streams ---------------------------------------------------


@pytest.mark.parametrize("gw", ["gw_es", "gw_plain"])
async def test_progress_survives_a_question_round(env, gw):
    """Each retry carries a new progressToken (both SDKs make one per request) while the
    upstream call keeps the one it was made with: every round maps it to the retry's."""
    answers = Answers([accept(confirm=True)])
    progress: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)

    async with answers.client(env[gw].url) as client:
        result = await client.call_tool(
            "ask_then_progress", {"steps": 3}, progress_callback=on_progress
        )
    assert result.content[0].text == "went ahead=True in 3 steps"
    assert [m for m, _ in answers.asked] == ["elicitation/create"]
    assert progress == [1, 2, 3]


def test_progress_survives_a_question_round_with_the_typescript_client(env):
    require(ts_client_launcher() is not None, "the TypeScript client needs npm")
    report = run_ts_client(
        {
            "url": env["gw_es"].url,
            "capabilities": {"elicitation": {"form": {}}},
            "answers": {"elicitation": [{"action": "accept", "content": {"confirm": True}}]},
            "steps": [
                {
                    "op": "callTool",
                    "name": "ask_then_progress",
                    "arguments": {"steps": 3},
                    "progress": True,
                }
            ],
        }
    )
    (step,) = report["steps"]
    assert step["ok"], step
    # The SDK adds a progress of its own per round ("Fulfilling input required ..."); the
    # server's are its steps, with their total.
    server = [p for p in step["progress"] if p.get("total") == 3]
    assert [(p["progress"], p["message"]) for p in server] == [
        (1, "step 1"),
        (2, "step 2"),
        (3, "step 3"),
    ]


async def test_listen_relays_what_the_legacy_server_pushes(env):
    """A listen stream is fed by a legacy session of its own: resources/subscribe there, its
    standalone stream relayed; the acknowledgement names only what the server can send."""
    uri = "static://hello"

    async def touch() -> int:
        async with Client(env["gw_es"].url, mode=MODERN) as other:
            return int((await other.call_tool("touch", {"uri": uri})).structured_content["result"])

    async with Client(env["gw_es"].url, mode=MODERN) as client:
        discover = message_of(post(env["gw_es"], 1, "server/discover"))["result"]
        assert discover["capabilities"]["resources"]["subscribe"] is True
        async with client.listen(resource_subscriptions=[uri], tools_list_changed=True) as sub:
            # FastMCP 1.x sends no tools/list_changed (listChanged false): not acknowledged.
            assert sub.honored.resource_subscriptions == [uri]
            assert not sub.honored.tools_list_changed
            assert await touch() == 1  # the listen stream's own upstream session
            async with asyncio.timeout(10):
                event = await anext(sub)
            assert event == ResourceUpdated(uri=uri)
    # The stream's session is deleted when the client leaves: nobody is subscribed any more.
    async with asyncio.timeout(10):
        while await touch():
            await asyncio.sleep(0.1)
