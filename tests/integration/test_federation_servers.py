"""A route with members, proved with real servers of every kind, behind two replicas and nginx.

One set of processes for the module:

- ``py``: tests/servers/everything.py (the ``mcp`` 2.x SDK's everything server, 2026-07-28);
- ``ts``: the TypeScript SDK server (tests/servers/ts_server.mjs), which logs its requests;
- ``legacy``: tests/servers/legacy_server.py (``mcp`` 1.x, 2025-era, through the bridge), which
  logs its requests and can be slowed for lists while it runs (its list deadline: 1.2 s);
- ``everything``: the published npm ``server-everything``, a local (stdio) server the gateway
  starts;

all four members of ONE route (edge cache on), served by two gateway replicas (one key ring, one
configuration) behind nginx round robin. A test finds its requests by a marker: in the
``X-Test-Marker`` header nginx logs with the replica that served it, and in the tool arguments
the servers log. Tests run in file order; the last one kills a member and starts it again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from tests.conftest import Running, require, start_gateway
from tests.scale.cluster import NGINX, Nginx, metric, scrape
from tests.support.answers import rpc_answer
from tests.support.members import (
    Member,
    federation_route,
    gateway_config,
    legacy_member,
    python_member,
    stdio_member,
    ts_member,
)
from tests.support.processes import ManagedProcess, wait_for_port
from tests.support.ts_server import mcp_headers, mcp_request, read_request_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

MODERN = "2026-07-28"
ROUTE = "fed"
CAPS = {"elicitation": {"form": {}}, "sampling": {}}
LEGACY_DEADLINE_MS = 1200
LEGACY_DELAY_S = 2.0
FEDERATION_META = "io.mcp-edge/federation"
#: One federated name, ``confirm``: the TypeScript server's ``ts_confirm`` on the route the
#: replicas serve; on a replica rolled out with another configuration, the 1.x server's
#: ``book_table`` (both ask one question).
RENAMED = {"ts": {"ts_confirm": "confirm"}, "legacy": {"book_table": "confirm"}}


@dataclass
class Fed:
    members: dict[str, Member]
    replicas: list[Running]
    nginx: Nginx
    delay_file: Path
    stack: ExitStack
    tmp: Path
    config: dict[str, Any]

    @property
    def url(self) -> str:
        return self.nginx.base + "/mcp"

    def replica(self, marker: str) -> int:
        """Which replica served the request marked ``marker`` (nginx's log names it)."""
        (entry,) = self.nginx.wait_marked(marker, 1)
        port = int(re.search(r"upstream=127\.0\.0\.1:(\d+)", entry)[1])  # type: ignore[index]
        return [r.port for r in self.replicas].index(port)


@pytest.fixture(scope="module")
def fed(module_tmp: Path, state_key: str) -> Iterator[Fed]:
    require(NGINX is not None, "nginx is not installed (apt-get install nginx)")
    delay_file = module_tmp / "legacy-list-delay"
    with ExitStack() as stack:
        members = [
            python_member(stack, module_tmp, "py", wait=False),
            ts_member(stack, module_tmp, "ts", wait=False, tools={"rename": RENAMED["ts"]}),
            legacy_member(
                stack,
                module_tmp,
                "legacy",
                "--list-delay-file",
                str(delay_file),
                wait=False,
                list_timeout_ms=LEGACY_DEADLINE_MS,
            ),
            stdio_member("everything"),
        ]
        config = gateway_config(
            [federation_route(members, name=ROUTE, cache={"enabled": True})],
            logging={"format": "json", "level": "info"},
        )
        replicas = [start_gateway(stack, module_tmp, keys=state_key, config=config) for _ in "ab"]
        nginx = Nginx(module_tmp, [r.port for r in replicas])
        stack.callback(nginx.stop)
        for member in members:
            member.ready()
        for replica in replicas:
            wait_members(replica, [m.name for m in members], "up")
        nginx.wait()
        yield Fed(
            {m.name: m for m in members}, replicas, nginx, delay_file, stack, module_tmp, config
        )


def members_health(gateway: Running) -> dict[str, Any]:
    doc = httpx.get(gateway.base + "/readyz", timeout=5).json()
    members: dict[str, Any] = doc.get("routes", {}).get(ROUTE, {}).get("members", {})
    return members


def wait_members(gateway: Running, names: list[str], state: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = members_health(gateway)
        if all(seen.get(name, {}).get("state") == state for name in names):
            return
        time.sleep(0.2)
    raise TimeoutError(f"members {names} not {state}: {seen}\n{gateway.process.log_tail()}")


def marker() -> str:
    return f"m-{uuid.uuid4().hex[:12]}"


def post(
    url: str, rid: Any, method: str, params: dict[str, Any] | None = None, *, mark: str = ""
) -> tuple[dict[str, Any], httpx.Response]:
    """One 2026-07-28 request; the JSON-RPC answer (JSON or SSE) and the HTTP response."""
    params = params or {}
    target = params.get("uri") if method == "resources/read" else params.get("name")
    headers = mcp_headers(method, target if isinstance(target, str) else None)
    if mark:
        headers["X-Test-Marker"] = mark
    body = mcp_request(rid, method, params, capabilities=CAPS)
    resp = httpx.post(url, headers=headers, json=body, timeout=30)
    doc = rpc_answer(resp)
    assert doc.get("id") == rid, doc
    return doc, resp


def call(url: str, rid: Any, name: str, arguments: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return post(url, rid, "tools/call", {"name": name, "arguments": arguments}, **kw)[0]


def text_of(doc: dict[str, Any]) -> str:
    assert "result" in doc, doc
    return "".join(c.get("text", "") for c in doc["result"]["content"])


# ---- one route, four kinds of server ---------------------------------------------------------

#: Each member's own items, as the merged lists must show them.
OWN = {
    "tools/list": (
        "tools",
        "name",
        ["py__test_simple_text", "ts__ts_echo", "legacy__add", "everything__get-sum"],
    ),
    "prompts/list": (
        "prompts",
        "name",
        [
            "py__test_simple_prompt",
            "ts__ts_greeting",
            "legacy__greeting",
            "everything__simple-prompt",
        ],
    ),
    "resources/list": (
        "resources",
        "uri",
        [
            "py+test://static-text",
            "ts+ts://static/info",
            "legacy+static://hello",
            "everything+demo://resource/static/document/architecture.md",
        ],
    ),
    "resources/templates/list": (
        "resourceTemplates",
        "uriTemplate",
        [
            "py+test://template/{id}/data",
            "ts+ts://items/{id}",
            "legacy+secret://{name}",
            "everything+demo://resource/dynamic/text/{resourceId}",
        ],
    ),
}


@pytest.mark.parametrize("method", list(OWN))
def test_every_list_merges_the_four_servers_in_order(fed: Fed, method: str):
    key, field, own = OWN[method]
    doc, resp = post(fed.url, 1, method)
    result = doc["result"]
    assert FEDERATION_META not in result.get("_meta", {}), result.get("_meta")
    assert "mcp-edge-missing" not in resp.headers
    names = [item[field] for item in result[key]]
    assert set(own) <= set(names), sorted(names)
    # Members in configuration order, each under its own prefix only.
    assert [names.index(name) for name in own] == sorted(names.index(name) for name in own)
    prefixes = tuple(f"{m}{'__' if field == 'name' else '+'}" for m in fed.members)
    renamed = set(RENAMED["ts"].values()) if key == "tools" else set()
    assert all(name.startswith(prefixes) for name in set(names) - renamed), names
    assert renamed <= set(names)


async def test_calls_reads_and_prompts_reach_each_kind(fed: Fed):
    mark = marker()
    async with Client(fed.url, mode=MODERN) as client:
        simple = await client.call_tool("py__test_simple_text", {})
        assert simple.content[0].text == "This is a simple text response for testing."
        echo = await client.call_tool("ts__ts_echo", {"text": "hi", "marker": mark})
        assert echo.content[0].text == "echo: hi"
        total = await client.call_tool("legacy__add", {"a": 2, "b": 3})
        assert total.content[0].text == "5"
        npm_sum = await client.call_tool("everything__get-sum", {"a": 20, "b": 22})
        assert "42" in npm_sum.content[0].text

        reads = {
            "py+test://static-text": "This is the content of the static text resource.",
            "ts+ts://static/info": "ts-server static info",
            "ts+ts://items/7": "item 7",
            "legacy+static://hello": "hello",
            "everything+demo://resource/dynamic/text/3": "Resource 3",
        }
        for uri, expected in reads.items():
            read = await client.read_resource(uri)
            assert read.contents[0].uri == uri  # the federated URI, back in the answer
            assert expected in read.contents[0].text, (uri, read.contents[0].text)

        prompts = {
            ("py__test_simple_prompt", None): "This is a simple prompt for testing.",
            ("ts__ts_greeting", "Ada"): "Hello, Ada!",
            ("legacy__greeting", "Ada"): "Hello, Ada!",
            ("everything__simple-prompt", None): "This is a simple prompt without arguments.",
        }
        for (name, who), expected in prompts.items():
            got = await client.get_prompt(name, {"name": who} if who else None)
            assert got.messages[0].content.text == expected, (name, got)
    # The TypeScript server got its call under its own name.
    (logged,) = read_request_log(fed.members["ts"].request_log, mark)  # type: ignore[arg-type]
    assert logged["method"] == "tools/call" and logged["name"] == "ts_echo"


# ---- MRTR across replicas ----------------------------------------------------------------------

#: member -> (tool, arguments, the answers of round 2, what the finished call says)
FLOWS: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "py-elicitation": (
        "py__test_input_required_result_elicitation",
        {},
        {"user_name": {"action": "accept", "content": {"name": "Ada"}}},
        "Hello, Ada!",
    ),
    "ts-elicitation": (
        "confirm",
        {"action": "deploy"},
        {"confirm": {"action": "accept", "content": {"confirm": True}}},
        "confirmed deploy",
    ),
    "legacy-elicitation": (
        "legacy__book_table",
        {"date": "sunday"},
        {"*": {"action": "accept", "content": {"size": 3}}},
        "Booked 3 on sunday",
    ),
    "everything-elicitation": (
        "everything__trigger-elicitation-request",
        {},
        {"*": {"action": "accept", "content": {"name": "Ada", "check": True}}},
        "Ada",
    ),
    "everything-sampling": (
        "everything__trigger-sampling-request",
        {"prompt": "capital of France?", "maxTokens": 10},
        {
            "*": {
                "role": "assistant",
                "content": {"type": "text", "text": "Paris, said the model"},
                "model": "test-model",
            }
        },
        "Paris, said the model",
    ),
}


def other_next(fed: Fed, replica: int) -> None:
    """Turn nginx's round robin so that its next request goes to the replica that is not
    ``replica``: probe until a probe lands on ``replica`` (each probe's replica read from its
    marker in nginx's log)."""
    for _ in range(4):
        probe = marker()
        httpx.get(fed.nginx.base + "/readyz", headers={"X-Test-Marker": probe}, timeout=5)
        if fed.replica(probe) == replica:
            return
    raise AssertionError("nginx never sent a probe to the replica of round 1")


@pytest.mark.parametrize("flow", list(FLOWS))
def test_a_members_question_is_answered_through_the_other_replica(fed: Fed, flow: str):
    tool, arguments, answers, expected = FLOWS[flow]
    first_mark = marker()
    first = call(fed.url, 1, tool, arguments, mark=first_mark)
    result = first["result"]
    assert result["resultType"] == "input_required", first
    (key,) = result["inputRequests"]
    responses = {key if k == "*" else k: v for k, v in answers.items()}
    first_replica = fed.replica(first_mark)
    other_next(fed, first_replica)
    second_mark = marker()
    params = {"requestState": result["requestState"], "inputResponses": responses}
    done, _ = post(
        fed.url, 2, "tools/call", {"name": tool, "arguments": arguments, **params}, mark=second_mark
    )
    assert fed.replica(second_mark) == 1 - first_replica
    assert expected in text_of(done), done


# ---- a state is bound to its member ------------------------------------------------------------


def legacy_calls(fed: Fed, mark: str) -> list[dict[str, Any]]:
    """The legacy server's logged tool calls whose ``date`` argument is ``mark``."""
    log = fed.members["legacy"].request_log
    assert log is not None
    entries = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [
        e
        for e in entries
        if e.get("method") == "tools/call"
        and ((e.get("params") or {}).get("arguments") or {}).get("date") == mark
    ]


def ts_calls(fed: Fed, mark: str) -> list[dict[str, Any]]:
    return read_request_log(fed.members["ts"].request_log, mark)  # type: ignore[arg-type]


def test_a_state_replayed_at_another_member_reaches_nobody(fed: Fed):
    ts_mark, legacy_mark, replay_ts, replay_legacy = (marker() for _ in range(4))
    ts_state = call(fed.url, 1, "confirm", {"action": "a", "marker": ts_mark})
    legacy_state = call(fed.url, 2, "legacy__book_table", {"date": legacy_mark})
    replays = {
        ("legacy__book_table", "date", replay_legacy): ts_state,
        ("confirm", "marker", replay_ts): legacy_state,
    }
    for rid, ((tool, field, mark), first) in enumerate(replays.items(), start=10):
        arguments = {"action": "b"} if tool == "confirm" else {}
        state = first["result"]["requestState"]
        (key,) = first["result"]["inputRequests"]
        doc, resp = post(
            fed.url,
            rid,
            "tools/call",
            {
                "name": tool,
                "arguments": {**arguments, field: mark},
                "requestState": state,
                "inputResponses": {key: {"action": "accept", "content": {"confirm": True}}},
            },
        )
        assert doc["error"]["code"] == -32602, doc
        assert doc["error"]["data"]["reason"] == "binding", doc
    # Neither server saw the replays; each saw its own first round once.
    for mark in (replay_ts, replay_legacy, ts_mark, legacy_mark):
        seen = ts_calls(fed, mark) + legacy_calls(fed, mark)
        assert len(seen) == (1 if mark in (ts_mark, legacy_mark) else 0), (mark, seen)


def rolled_out(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``confirm`` moved from the TypeScript server to the 1.x server."""
    changed = json.loads(json.dumps(config))
    for entry in changed["routes"][0]["members"]:
        if entry["name"] == "ts":
            del entry["tools"]
        if entry["name"] == "legacy":
            entry["tools"] = {"rename": RENAMED["legacy"]}
    return changed


def test_a_name_moved_to_another_member_does_not_carry_its_state_there(fed: Fed, state_key: str):
    """Replicas of one gateway (one key ring, one route) whose configurations give ``confirm``
    to different members, as during a rollout: a state the 1.x server's question issued, sent
    back with the same name, arguments and answers to a replica where ``confirm`` is the
    TypeScript server's, is refused by its member binding alone and reaches neither server."""
    mark = marker()
    arguments = {"action": "a", "date": mark, "marker": mark}
    with ExitStack() as stack:
        moved = start_gateway(stack, fed.tmp, keys=state_key, config=rolled_out(fed.config))
        wait_members(moved, list(fed.members), "up")
        first = call(moved.url, 1, "confirm", arguments)
        assert first["result"]["resultType"] == "input_required", first
        (key,) = first["result"]["inputRequests"]
        answers = {key: {"action": "accept", "content": {"size": 2, "confirm": True}}}
        state = first["result"]["requestState"]
        params = {"name": "confirm", "arguments": arguments, "requestState": state}
        doc, _ = post(fed.url, 2, "tools/call", {**params, "inputResponses": answers})
        assert doc["error"]["code"] == -32602, doc
        assert doc["error"]["data"]["reason"] == "binding", doc
        assert len(legacy_calls(fed, mark)) == 1  # the first round only
        assert ts_calls(fed, mark) == []
        # The same retry where ``confirm`` is still the 1.x server's finishes the flow.
        done, _ = post(moved.url, 3, "tools/call", {**params, "inputResponses": answers})
        assert text_of(done) == f"Booked 2 on {mark}"


# ---- a slow member ---------------------------------------------------------------------------


def test_a_slow_member_is_missing_from_lists_within_its_deadline(fed: Fed):
    own = ("legacy__add", "legacy__book_table")
    fed.delay_file.write_text(str(LEGACY_DELAY_S))
    try:
        for rid in (1, 2):  # the second is no cached copy of a list once taken as complete
            started = time.monotonic()
            doc, resp = post(fed.url, rid, "tools/list")
            took = time.monotonic() - started
            result = doc["result"]
            assert result["_meta"][FEDERATION_META]["missing"] == [
                {"member": "legacy", "reason": "timeout"}
            ], result.get("_meta")
            assert resp.headers["mcp-edge-missing"] == "legacy"
            assert result["ttlMs"] == 0
            names = {tool["name"] for tool in result["tools"]}
            assert {"py__test_simple_text", "ts__ts_echo", "everything__get-sum"} <= names
            assert not names & set(own)
            # Its deadline (1.2 s), not its 2 s, bounded the answer.
            assert took < LEGACY_DELAY_S, took
    finally:
        fed.delay_file.unlink()
    # Quick again: the next list is whole, with nothing said missing.
    doc, resp = post(fed.url, 3, "tools/list")
    assert FEDERATION_META not in doc["result"].get("_meta", {})
    assert "mcp-edge-missing" not in resp.headers
    assert set(own) <= {tool["name"] for tool in doc["result"]["tools"]}


# ---- a member killed, then started again ------------------------------------------------------


def test_a_member_killed_fails_alone_and_is_used_again_once_back(fed: Fed):
    py = fed.members["py"]
    assert py.process is not None and py.url is not None
    os.killpg(py.process.pid, signal.SIGKILL)
    py.process.stop(grace=3.0)
    # The others answer, through either replica.
    for rid, replica in enumerate(fed.replicas, start=1):
        mark = marker()
        assert text_of(call(replica.url, rid, "ts__ts_echo", {"text": "x", "marker": mark}))
        assert text_of(call(replica.url, rid, "legacy__add", {"a": 1, "b": 1})) == "2"
        assert "3" in text_of(call(replica.url, rid, "everything__get-sum", {"a": 1, "b": 2}))
        assert len(ts_calls(fed, mark)) == 1
        # The dead member's call: a JSON-RPC error for its id, naming the member.
        err = call(replica.url, 100 + rid, "py__test_simple_text", {})
        assert err["error"]["code"] == -32603, err
        assert err["error"]["data"]["member"] == "py", err
        assert py.url.split("//")[1] not in json.dumps(err)  # no address
        # Lists go on without it, saying so.
        doc, resp = post(replica.url, 200 + rid, "tools/list")
        assert resp.headers["mcp-edge-missing"] == "py"
        assert doc["result"]["_meta"][FEDERATION_META]["missing"] == [
            {"member": "py", "reason": "unavailable"}
        ]
        health = members_health(replica)
        assert health["py"]["state"] == "down", health
        assert {health[m]["state"] for m in ("ts", "legacy", "everything")} == {"up"}
        samples = scrape(replica.base)
        assert metric(samples, "mcp_edge_member_up", route=ROUTE, member="py") == 0
        assert metric(samples, "mcp_edge_member_up", route=ROUTE, member="ts") == 1
    # Started again on its address: the first call after it answers is served, on each replica.
    restarted_at = time.monotonic()
    again = ManagedProcess("py-again", py.process.argv, log_path=fed.tmp / "py-again.log")
    fed.stack.callback(again.stop, 3.0)
    port = int(py.url.rsplit(":", 1)[1].split("/")[0])
    wait_for_port(port, timeout=60, process=again)
    answering_at = time.monotonic()
    for rid, replica in enumerate(fed.replicas, start=300):
        assert text_of(call(replica.url, rid, "py__test_simple_text", {})).startswith("This is")
    served_at = time.monotonic()
    for replica in fed.replicas:
        assert members_health(replica)["py"]["state"] == "up"
    print(
        f"\nmember py: process start to listening {answering_at - restarted_at:.2f} s, "
        f"listening to served on both replicas {served_at - answering_at:.2f} s"
    )
