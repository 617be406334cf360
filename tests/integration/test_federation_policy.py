"""Policy on a route with ``members:``, end to end: rules over the member and its own names, lists
filtered to federated names, approval asked by the gateway for a federated tool, pinned federated
tool definitions.

One gateway for the module (jwt mode, a real JWKS server) with one route of two members, each a
real ``mcp`` 2.x server (tests/servers/policy_upstream.py, which logs every request it receives):

- ``prod``: prefix ``prod``;
- ``lab``: prefix ``sbx`` (so a rule reading ``member`` sees the configured name, not the prefix).

Both serve the same tools under the same own names, so a rule can tell ``prod__get_weather`` from
``sbx__get_weather`` only by ``member`` (or the federated ``name``). Three callers: alice
(readers), bob (admins), carol (pinners). Clients: the ``mcp`` 2.x SDK client, and raw HTTP where
the exact wire answer matters. Each test finds its own requests in a member's log by the
arguments it sent (a marker), never by position.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.auth.support import JwksServer, claims, jwt_auth, new_ec
from tests.conftest import Running, start_gateway, start_upstream
from tests.support.approval import approve_with, arguments_sha256, shown_call
from tests.support.bearer import call, client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
ISSUER = "https://idp.fedpolicy.test"
APPROVAL = "mcp-edge/approval"

#: Every rule names members by their configured names (``lab``, never its prefix ``sbx``) and
#: tools by the member's own names (``original``), but one (``name``, the federated name).
RULES = [
    {
        "name": "prod-destructive",
        "when": 'has(claims.groups) && "admins" in claims.groups && member == "prod" '
        '&& original in ["delete_repo", "confirm_transfer"]',
        "action": "approve",
        "message": "This cannot be undone.",
    },
    {
        "name": "lab-admins",
        "when": 'has(claims.groups) && "admins" in claims.groups && member == "lab" '
        '&& original in ["get_weather", "whoami"]',
        "action": "allow",
    },
    {
        "name": "prod-readers",
        "when": 'has(claims.groups) && "readers" in claims.groups && member == "prod" '
        '&& (original == "get_weather" || name == "prod__list_files")',
        "action": "allow",
    },
    {
        "name": "pinners",
        "when": 'has(claims.groups) && "pinners" in claims.groups && original == "calc"',
        "action": "allow",
    },
]


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    key = new_ec("fedpolicy-key")
    jwks = JwksServer()
    jwks.start()
    jwks.state.keys = [key.jwk()]
    logs = {name: module_tmp / f"{name}.jsonl" for name in ("prod", "lab")}
    with ExitStack() as stack:
        stack.callback(jwks.stop)
        upstreams = {}
        for name, log in logs.items():
            log.write_text("")
            upstreams[name] = start_upstream(
                stack, "policy_upstream.py", module_tmp, "--log", str(log)
            )
        config = {
            "gateway": {"id": "mcp-edge-fedpolicy"},
            "auth": jwt_auth(ISSUER, jwks.url),
            "logging": {"format": "json", "level": "info"},
            "routes": [
                {
                    "name": "tools",
                    "path": "/mcp",
                    "members": [
                        {"name": "prod", "upstream": upstreams["prod"].url, "era": "modern"},
                        {
                            "name": "lab",
                            "prefix": "sbx",
                            "upstream": upstreams["lab"].url,
                            "era": "modern",
                        },
                    ],
                    "policy": {"default": "deny", "pin_tools": True, "rules": RULES},
                }
            ],
        }
        gateway = start_gateway(stack, module_tmp, config=config, keys=state_key, anonymous=False)

        def token(sub: str, groups: list[str]) -> str:
            return key.sign(claims(iss=ISSUER, sub=sub, aud="mcp-edge-tests", groups=groups))

        yield {
            "gateway": gateway,
            "upstreams": upstreams,
            "logs": logs,
            "alice": token("alice", ["readers"]),
            "bob": token("bob", ["admins"]),
            "carol": token("carol", ["pinners"]),
        }


# ---------------------------------------------------------------- helpers


def received(env: dict[str, Any], member: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tools/call`` requests with exactly these arguments that reached the member."""
    digest = arguments_sha256(arguments)
    entries = [json.loads(line) for line in env["logs"][member].read_text().splitlines() if line]
    return [
        e for e in entries if e.get("method") == "tools/call" and e["arguments_sha256"] == digest
    ]


def reached(env: dict[str, Any], arguments: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Per member: (own name, requestState sent, inputResponses keys) of each call with these
    arguments."""
    return {
        member: [
            (e["name"], e["requestState"], e["inputResponses"])
            for e in received(env, member, arguments)
        ]
        for member in ("prod", "lab")
    }


async def tool_names(env: dict[str, Any], who: str) -> list[str]:
    http, c = client(env, who)
    async with http, c:
        return sorted(t.name for t in (await c.list_tools()).tools)


def gateway_log(gateway: Running) -> list[dict[str, Any]]:
    out = []
    for line in gateway.process.log_path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


# ---------------------------------------------------------------- rules and lists


async def test_each_caller_lists_what_it_may_use_under_federated_names(env):
    assert await tool_names(env, "alice") == ["prod__get_weather", "prod__list_files"]
    assert await tool_names(env, "bob") == [
        "prod__confirm_transfer",
        "prod__delete_repo",
        "sbx__get_weather",
        "sbx__whoami",
    ]


@pytest.mark.parametrize(
    "who, allowed, member, other, refused",
    [
        ("alice", "prod__get_weather", "prod", "lab", "sbx__get_weather"),
        ("bob", "sbx__get_weather", "lab", "prod", "prod__get_weather"),
    ],
)
async def test_a_rule_on_the_member_allows_its_tool_and_refuses_the_same_tool_of_the_other(
    env, who, allowed, member, other, refused
):
    """alice may use prod's get_weather and not lab's; bob the other way round. A refused call
    reaches no member (and is logged under its federated name); an allowed one reaches its member
    only, under its own name."""
    refused_args = {"city": f"refused-{who}-4c1e"}
    allowed_args = {"city": f"allowed-{who}-4c1e"}
    r = await call(env["gateway"].url, env[who], 101, refused, refused_args)
    assert (r.status_code, r.json()) == (
        400,
        {
            "jsonrpc": "2.0",
            "id": 101,
            "error": {"code": -32602, "message": f"Unknown tool: {refused}"},
        },
    )
    http, c = client(env, who)
    async with http, c:
        with pytest.raises(MCPError, match=f"Unknown tool: {refused}"):
            await c.call_tool(refused, refused_args)
        result = await c.call_tool(allowed, allowed_args)
    assert result.content[0].text == f"Sunny in allowed-{who}-4c1e"
    assert reached(env, refused_args) == {"prod": [], "lab": []}
    assert reached(env, allowed_args) == {member: [("get_weather", False, None)], other: []}
    assert any(
        e.get("msg") == "policy denied"
        and e.get("target") == refused
        and e.get("rule") == "default"
        for e in gateway_log(env["gateway"])
    )


async def test_a_rule_on_the_federated_name_is_decided_on_that_name(env):
    """``name == "prod__list_files"`` lets alice list files on prod; ``sbx__list_files`` is
    refused, and no rule sees a prefix where the member's name is meant."""
    ok = {"path": "/srv/allowed-9d2b"}
    refused = {"path": "/srv/refused-9d2b"}
    http, alice = client(env, "alice")
    async with http, alice:
        assert (await alice.call_tool("prod__list_files", ok)).content[
            0
        ].text == "/srv/allowed-9d2b: a.txt b.txt"
        with pytest.raises(MCPError, match="Unknown tool: sbx__list_files"):
            await alice.call_tool("sbx__list_files", refused)
        # A name with no member: refused like any unknown tool, before any member is asked.
        with pytest.raises(MCPError, match="Unknown tool: lab__list_files"):
            await alice.call_tool("lab__list_files", refused)
    assert reached(env, ok) == {"prod": [("list_files", False, None)], "lab": []}
    assert reached(env, refused) == {"prod": [], "lab": []}


# ---------------------------------------------------------------- approval


async def test_an_approved_federated_call_reaches_its_member_once_under_its_own_name(env):
    arguments = {"repo": "acme/approved-51f0"}
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        result = await bob.call_tool("prod__delete_repo", arguments)
    assert result.content[0].text == "deleted acme/approved-51f0"
    (message,) = messages
    assert shown_call(message) == {"tool": "prod__delete_repo", "arguments": arguments}
    assert message.endswith("This cannot be undone.")
    # Exactly that call, once, as a first call (no state, no answers), under the member's name.
    assert reached(env, arguments) == {"prod": [("delete_repo", False, None)], "lab": []}


async def test_a_declined_approval_reaches_no_member(env):
    arguments = {"repo": "acme/declined-51f0"}
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with(None, "decline", seen=messages))
    async with http, bob:
        with pytest.raises(MCPError, match="Not run: the approval was declined"):
            await bob.call_tool("prod__delete_repo", arguments)
    (message,) = messages
    assert shown_call(message) == {"tool": "prod__delete_repo", "arguments": arguments}
    assert reached(env, arguments) == {"prod": [], "lab": []}


async def test_the_same_named_tool_of_the_other_member_is_not_asked_about(env):
    """bob's approval rule names prod: lab's delete_repo is refused outright (no question), and
    an approval state prod's tool got cannot be spent on it."""
    arguments = {"repo": "acme/other-member-51f0"}
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        with pytest.raises(MCPError, match="Unknown tool: sbx__delete_repo"):
            await bob.call_tool("sbx__delete_repo", arguments)
    assert messages == []
    first = await call(env["gateway"].url, env["bob"], 201, "prod__delete_repo", arguments)
    asked = first.json()["result"]
    assert asked["resultType"] == "input_required" and list(asked["inputRequests"]) == [APPROVAL]
    yes = {APPROVAL: {"action": "accept", "content": {"approve": True}}}
    moved = await call(
        env["gateway"].url,
        env["bob"],
        202,
        "sbx__delete_repo",
        arguments,
        inputResponses=yes,
        requestState=asked["requestState"],
    )
    assert moved.status_code == 400 and moved.json()["id"] == 202
    assert moved.json()["error"]["code"] == -32602
    assert moved.json()["error"]["data"] == {"reason": "binding"}  # bound to prod, not lab
    assert reached(env, arguments) == {"prod": [], "lab": []}


async def test_approval_then_the_members_own_question(env):
    """The gateway's question first, then the member's own round: one chain of sealed states on
    a federated name, the member seeing a first call and then its own round only."""
    arguments = {"amount": 7351}
    messages: list[str] = []
    http, bob = client(env, "bob", approve_with({"approve": True}, seen=messages))
    async with http, bob:
        result = await bob.call_tool("prod__confirm_transfer", arguments)
    assert result.content[0].text == "transferred 7351 (confirmed: True; keys seen: ['confirm'])"
    assert shown_call(messages[0]) == {"tool": "prod__confirm_transfer", "arguments": arguments}
    assert messages[1:] == ["Transfer 7351?"]
    assert reached(env, arguments) == {
        "prod": [("confirm_transfer", False, None), ("confirm_transfer", True, ["confirm"])],
        "lab": [],
    }


# ---------------------------------------------------------------- pinning


async def test_a_changed_definition_of_one_members_tool_is_hidden_and_refused(env):
    """carol may use calc of both members. lab's calc changes its description: its federated name
    is hidden and refused (logged and counted under that name); prod's calc, same own name, is
    untouched."""
    assert await tool_names(env, "carol") == ["prod__calc", "sbx__calc"]  # pinned now (or before)
    before = {"x": 6101}
    http, carol = client(env, "carol")
    async with http, carol:
        assert (await carol.call_tool("sbx__calc", before)).content[0].text == "12202"
    assert reached(env, before) == {"prod": [], "lab": [("calc", False, None)]}

    async with httpx.AsyncClient(timeout=10) as admin:
        r = await admin.post(env["upstreams"]["lab"].base + "/admin/change-calc")
        assert r.status_code == 204
    assert await tool_names(env, "carol") == ["prod__calc"]

    after = {"x": 6102}
    r = await call(env["gateway"].url, env["carol"], 301, "sbx__calc", after)
    assert (r.status_code, r.json()["error"]) == (
        400,
        {"code": -32602, "message": "Unknown tool: sbx__calc"},
    )
    http, carol = client(env, "carol")
    async with http, carol:
        with pytest.raises(MCPError, match="Unknown tool: sbx__calc"):
            await carol.call_tool("sbx__calc", after)
        assert (await carol.call_tool("prod__calc", after)).content[0].text == "12204"
    assert reached(env, after) == {"prod": [("calc", False, None)], "lab": []}

    changed = [
        e
        for e in gateway_log(env["gateway"])
        if e.get("msg") == "tool definition changed; hidden until accepted"
    ]
    assert [(e["route"], e["tool"]) for e in changed] == [("tools", "sbx__calc")]
    metrics = httpx.get(env["gateway"].base + "/metrics", timeout=10).text
    (count,) = re.findall(
        r'^mcp_edge_tool_definition_changes_total\{route="tools"\} (\S+)$', metrics, re.M
    )
    assert float(count) >= 1  # one per list that hid it
