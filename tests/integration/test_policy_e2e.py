"""Policy at the edge, end to end: a real gateway in jwt mode (real JWKS server), a real ``mcp`` 2.x
upstream that logs every request it receives, the real ``mcp`` 2.x client, and two callers whose
tokens carry different groups: alice (readers) and bob (admins)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from mcp_edge.core.digest import request_digest
from mcp_edge.core.seal import generate_key
from tests.auth.support import JwksServer, claims, jwt_auth, new_ec
from tests.conftest import start_gateway, start_upstream
from tests.support.approval import approve_with, arguments_sha256, shown_call
from tests.support.bearer import call, client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
ISSUER = "https://idp.policy.test"
APPROVAL = "mcp-edge/approval"

RULES = [
    {
        "name": "destructive",
        "when": '"admins" in claims.groups && name in ["delete_repo", "confirm_transfer", "run_command"]',
        "action": "approve",
        "message": "This cannot be undone.",
    },
    {"name": "admins", "when": '"admins" in claims.groups', "action": "allow"},
    {
        "name": "readers",
        "when": '"readers" in claims.groups && (name.startsWith("get_") || name.startsWith("list_") '
        '|| name in ["calc", "whoami"])',
        "action": "allow",
    },
    {"name": "public-docs", "when": 'uri == "doc://public"', "action": "allow"},
    {"name": "prompts", "when": 'method == "prompts/get"', "action": "allow"},
]


def gateway_config(upstream: str, jwks_url: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "gateway": {"id": "mcp-edge-policy"},
        "auth": jwt_auth(ISSUER, jwks_url),
        "logging": {"format": "json", "level": "info"},
        "routes": [
            {
                "name": "tools",
                "path": "/mcp",
                "upstream": upstream,
                "legacy_clients": "deny",
                "policy": {"default": "deny", "pin_tools": True, "rules": rules},
            },
            # Calls too long to show are asked about with a marked digest instead of refused.
            {
                "name": "digest",
                "path": "/digest",
                "upstream": upstream,
                "legacy_clients": "deny",
                "policy": {"default": "deny", "rules": rules, "approval": {"too_long": "digest"}},
            },
        ],
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("policy")
    key = new_ec("policy-key")
    jwks = JwksServer()
    jwks.start()
    jwks.state.keys = [key.jwk()]
    log = tmp / "upstream.jsonl"
    log.write_text("")
    keys = generate_key()
    with ExitStack() as stack:
        stack.callback(jwks.stop)
        upstream = start_upstream(stack, "policy_upstream.py", tmp, "--log", str(log))
        gateway = start_gateway(
            stack,
            tmp,
            config=gateway_config(upstream.url, jwks.url, RULES),
            keys=keys,
            anonymous=False,
        )
        # The same gateway identity and key ring with a stricter policy, as during a rollout: a
        # flow started on one replica can be retried on the other.
        stricter = [{"when": 'name == "confirm_transfer"', "action": "deny"}, *RULES]
        strict = start_gateway(
            stack,
            tmp,
            config=gateway_config(upstream.url, jwks.url, stricter),
            keys=keys,
            anonymous=False,
        )

        def token(sub: str, groups: list[str]) -> str:
            return key.sign(claims(iss=ISSUER, sub=sub, aud="mcp-edge-tests", groups=groups))

        yield {
            "gateway": gateway,
            "strict": strict,
            "upstream": upstream,
            "log": log,
            "tmp": tmp,
            "alice": token("alice", ["readers"]),
            "bob": token("bob", ["admins", "ops"]),
        }


def upstream_log(env: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in env["log"].read_text().splitlines() if line.strip()]


def calls_of(env: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [
        e for e in upstream_log(env) if e.get("method") == "tools/call" and e.get("name") == name
    ]


def received(env: dict[str, Any], arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """The upstream's log entries of calls with exactly these arguments."""
    digest = arguments_sha256(arguments)
    return [e for e in upstream_log(env) if e.get("arguments_sha256") == digest]


# ---------------------------------------------------------------- lists


async def test_each_caller_lists_what_it_may_use(env):
    http_a, alice = client(env, "alice")
    http_b, bob = client(env, "bob")
    async with http_a, alice, http_b, bob:
        alice_tools = sorted(t.name for t in (await alice.list_tools()).tools)
        bob_tools = sorted(t.name for t in (await bob.list_tools()).tools)
        alice_resources = sorted(str(r.uri) for r in (await alice.list_resources()).resources)
        bob_resources = sorted(str(r.uri) for r in (await bob.list_resources()).resources)
        assert [p.name for p in (await alice.list_prompts()).prompts] == ["greet"]
    assert alice_tools == ["calc", "get_weather", "list_files", "whoami"]
    assert bob_tools == [
        "calc",
        "confirm_transfer",
        "delete_repo",
        "get_weather",
        "list_files",
        "run_command",
        "whoami",
        "write_file",
    ]
    assert alice_resources == ["doc://public"]
    assert bob_resources == ["doc://public", "doc://secret"]


# ---------------------------------------------------------------- deny


async def test_a_denied_call_never_reaches_the_upstream(env):
    before = len(upstream_log(env))
    r = await call(env["gateway"].url, env["alice"], 11, "delete_repo", {"repo": "acme/site"})
    assert r.status_code == 400
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": 11,
        "error": {"code": -32602, "message": "Unknown tool: delete_repo"},
    }
    http, alice = client(env, "alice")
    async with http, alice:
        with pytest.raises(MCPError, match="Unknown tool: write_file"):
            await alice.call_tool("write_file", {"path": "/tmp/x", "text": "hi"})
        with pytest.raises(MCPError, match="Resource not found: doc://secret"):
            await alice.read_resource("doc://secret")
        assert (await alice.call_tool("get_weather", {"city": "Paris"})).content[
            0
        ].text == "Sunny in Paris"
    after = upstream_log(env)[before:]
    assert [e["name"] for e in after if e["method"] == "tools/call"] == ["get_weather"]
    assert not any(e.get("uri") == "doc://secret" for e in after)
    gateway_log = env["gateway"].process.log_path.read_text()
    assert (
        '"msg":"policy denied"' in gateway_log
        and '"target":"delete_repo","rule":"default"' in gateway_log
    )
    assert "acme/site" not in gateway_log  # argument values are never logged
    metrics = httpx.get(env["gateway"].base + "/metrics").text
    assert 'mcp_edge_policy_denied_total{route="tools",rule="default"}' in metrics


async def test_a_retry_is_decided_again_and_denied_before_the_upstream(env):
    """Bob starts an approved transfer on one replica; the retry lands on a replica whose policy
    now denies it: refused there, and the upstream never sees the retry."""
    first = await call(env["gateway"].url, env["bob"], 21, "confirm_transfer", {"amount": 7})
    state = first.json()["result"]["requestState"]
    answer = {APPROVAL: {"action": "accept", "content": {"approve": True}}}
    second = await call(
        env["gateway"].url,
        env["bob"],
        22,
        "confirm_transfer",
        {"amount": 7},
        inputResponses=answer,
        requestState=state,
    )
    upstream_round = second.json()["result"]
    assert upstream_round["resultType"] == "input_required" and list(
        upstream_round["inputRequests"]
    ) == ["confirm"]
    seen = len(calls_of(env, "confirm_transfer"))
    refused = await call(
        env["strict"].url,
        env["bob"],
        23,
        "confirm_transfer",
        {"amount": 7},
        inputResponses={"confirm": {"action": "accept", "content": {"ok": True}}},
        requestState=upstream_round["requestState"],
    )
    assert refused.status_code == 400 and refused.json()["error"]["code"] == -32602
    assert refused.json()["id"] == 23
    assert len(calls_of(env, "confirm_transfer")) == seen


# ---------------------------------------------------------------- approval


async def test_approval_accepted_then_the_upstream_asks_its_own_question(env):
    before = len(calls_of(env, "confirm_transfer"))
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        result = await bob.call_tool("confirm_transfer", {"amount": 42})
    assert result.content[0].text == "transferred 42 (confirmed: True; keys seen: ['confirm'])"
    assert shown_call(messages[0]) == {"tool": "confirm_transfer", "arguments": {"amount": 42}}
    assert "This cannot be undone." in messages[0] and messages[1] == "Transfer 42?"
    upstream = calls_of(env, "confirm_transfer")[before:]
    # The upstream saw a first call (no state, no answers) and then its own round only.
    assert [(e["requestState"], e["inputResponses"]) for e in upstream] == [
        (False, None),
        (True, ["confirm"]),
    ]


async def test_approval_accepted_for_a_plain_tool(env):
    before = len(calls_of(env, "delete_repo"))
    http, bob = client(env, "bob", approve_with({"approve": True}))
    async with http, bob:
        assert (await bob.call_tool("delete_repo", {"repo": "acme/old"})).content[
            0
        ].text == "deleted acme/old"
    assert [
        (e["requestState"], e["inputResponses"]) for e in calls_of(env, "delete_repo")[before:]
    ] == [(False, None)]


def hidden_characters(text: str) -> list[str]:
    """Characters a person would not see as themselves (the question's own line breaks aside)."""
    return [
        c
        for c in text
        if c != "\n" and c != " " and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp", "Zs"}
    ]


async def test_the_approval_shows_exactly_the_call_that_runs(env):
    """Hostile names and values reach the person approving as quoted JSON, every hidden character
    escaped, and what the upstream then receives is exactly what was shown."""
    marker = "shown-7f3a"
    arguments = {
        "command": f"echo {marker}\nThis call is safe to approve.\r\x1b[2K\x1b[1A\u202e/ fr- mr ;\u200d\u2028ok"
        + " " * 250
        + "; rm -rf /",
        "options": {
            'cwd": "/tmp"\n  "x': "\u2066nested\u2069",
            "approve": True,
            "deep": [{"\ufeff\u200b": None}],
        },
        'command": "ls': "a name that looks like another field",
    }
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        result = await bob.call_tool("run_command", arguments)
    assert result.content[0].text == "ran"
    (message,) = messages
    assert hidden_characters(message) == [], [hex(ord(c)) for c in hidden_characters(message)]
    for escaped in (
        "\\n",
        "\\r",
        "\\u001b[2K",
        "\\u202e",
        "\\u200d",
        "\\u2028",
        "\\u2066",
        "\\ufeff",
    ):
        assert escaped in message, escaped
    assert (
        "; rm -rf /" in message
        and "\u27e6250 spaces\u27e7; rm -rf /" in message  # the run cannot push the tail away
        and "Careful:" in message
        and message.endswith("This cannot be undone.")
    )
    assert shown_call(message) == {"tool": "run_command", "arguments": arguments}
    # The upstream received that very call, once, as a first call.
    (entry,) = received(env, shown_call(message)["arguments"])
    assert (entry["name"], entry["requestState"], entry["inputResponses"]) == (
        "run_command",
        False,
        None,
    )
    assert entry["argument_names"] == sorted(arguments)


async def test_a_call_too_long_to_show_is_refused_before_anyone_is_asked(env):
    arguments = {"command": "echo hello-refused" + " " * 5000 + "; rm -rf /"}
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        with pytest.raises(MCPError, match="too long to show"):
            await bob.call_tool("run_command", arguments)
    assert messages == [] and received(env, arguments) == []
    r = await call(env["gateway"].url, env["bob"], 51, "run_command", arguments)
    assert r.status_code == 400
    error = r.json()["error"]
    assert (
        r.json()["id"] == 51
        and error["code"] == -32602
        and error["data"] == {"reason": "approval_too_long"}
    )
    assert received(env, arguments) == []
    metrics = httpx.get(env["gateway"].base + "/metrics").text
    assert 'decision="approval_too_long"' in metrics


async def test_a_call_too_long_to_show_gets_a_marked_digest_on_a_route_that_says_so(env):
    arguments = {"command": "echo hello-digest" + " " * 5000 + "; rm -rf /"}
    messages: list[str] = []
    url = env["gateway"].base + "/digest"
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages), url=url)
    async with http, bob:
        assert (await bob.call_tool("run_command", arguments)).content[0].text == "ran"
    (message,) = messages
    digest = request_digest("tools/call", {"name": "run_command", "arguments": arguments}).hex()
    assert "CALL NOT SHOWN IN FULL" in message and f"sha256:{digest}" in message
    assert "hello-digest" not in message and "```" not in message and len(message) < 1500
    assert len(received(env, arguments)) == 1
    # The digest approval holds for that call only: other arguments under its state are refused.
    first = await call(url, env["bob"], 61, "run_command", arguments)
    state = first.json()["result"]["requestState"]
    yes = {APPROVAL: {"action": "accept", "content": {"approve": True}}}
    other = dict(arguments, command=arguments["command"] + " && curl evil")
    r = await call(
        url, env["bob"], 62, "run_command", other, inputResponses=yes, requestState=state
    )
    assert r.status_code == 400 and r.json()["error"]["data"] == {"reason": "binding"}
    assert received(env, other) == []


@pytest.mark.parametrize(
    "action,answer,reason",
    [
        ("decline", None, "declined"),
        ("cancel", None, "cancelled"),
        ("accept", {"approve": False}, "not confirmed"),
    ],
)
async def test_approval_declined_or_cancelled_is_a_clear_error(env, action, answer, reason):
    before = len(calls_of(env, "delete_repo"))
    http, bob = client(env, "bob", approve_with(answer, action))
    async with http, bob:
        with pytest.raises(MCPError, match=f"Not run: the approval (was|form was) {reason}"):
            await bob.call_tool("delete_repo", {"repo": "acme/site"})
    assert len(calls_of(env, "delete_repo")) == before


async def test_approval_needs_form_elicitation(env):
    r = await call(
        env["gateway"].url, env["bob"], 31, "delete_repo", {"repo": "x"}, caps={"sampling": {}}
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == -32021 and error["data"] == {
        "requiredCapabilities": {"elicitation": {"form": {}}}
    }
    assert "elicitation.form" in error["message"]


async def test_an_approval_state_is_refused_for_another_caller_other_arguments_or_twice(env):
    url = env["gateway"].url
    before = len(calls_of(env, "delete_repo"))
    first = await call(url, env["bob"], 41, "delete_repo", {"repo": "acme/site"})
    state = first.json()["result"]["requestState"]
    yes = {APPROVAL: {"action": "accept", "content": {"approve": True}}}
    other_caller = await call(
        url,
        env["alice"],
        42,
        "delete_repo",
        {"repo": "acme/site"},
        inputResponses=yes,
        requestState=state,
    )
    assert other_caller.status_code == 400 and other_caller.json()["error"]["data"] == {
        "reason": "principal"
    }
    other_args = await call(
        url,
        env["bob"],
        43,
        "delete_repo",
        {"repo": "acme/prod"},
        inputResponses=yes,
        requestState=state,
    )
    assert other_args.status_code == 400 and other_args.json()["error"]["data"] == {
        "reason": "binding"
    }
    assert len(calls_of(env, "delete_repo")) == before
    ok = await call(
        url,
        env["bob"],
        44,
        "delete_repo",
        {"repo": "acme/site"},
        inputResponses=yes,
        requestState=state,
    )
    assert ok.json()["result"]["content"][0]["text"] == "deleted acme/site"
    again = await call(
        url,
        env["bob"],
        45,
        "delete_repo",
        {"repo": "acme/site"},
        inputResponses=yes,
        requestState=state,
    )
    assert again.status_code == 400 and again.json()["error"]["data"] == {"reason": "replayed"}
    assert len(calls_of(env, "delete_repo")) == before + 1


# ---------------------------------------------------------------- pinning


async def test_a_changed_tool_definition_is_hidden_and_refused(env):
    http, alice = client(env, "alice")
    async with http, alice:
        assert "calc" in [
            t.name for t in (await alice.list_tools()).tools
        ]  # pinned (first seen earlier or now)
        async with httpx.AsyncClient() as admin:
            assert (
                await admin.post(env["upstream"].base + "/admin/change-calc")
            ).status_code == 204
        assert "calc" not in [t.name for t in (await alice.list_tools()).tools]
        before = len(calls_of(env, "calc"))
        with pytest.raises(MCPError, match="Unknown tool: calc"):
            await alice.call_tool("calc", {"x": 2})
        assert len(calls_of(env, "calc")) == before
        assert "get_weather" in [t.name for t in (await alice.list_tools()).tools]
    metrics = httpx.get(env["gateway"].base + "/metrics").text
    assert 'mcp_edge_tool_definition_changes_total{route="tools"}' in metrics
    assert (
        "tool definition changed; hidden until accepted"
        in env["gateway"].process.log_path.read_text()
    )
