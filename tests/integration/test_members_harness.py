"""The federation tests' harness (`tests/support/members.py`) starts every member kind, and what
it hands the gateway's configuration for each works: one gateway with each member as a route of
its own lists each server's own tools (the stdio one started by the gateway itself)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import Running
from tests.support.members import (
    Member,
    federation_route,
    gateway_config,
    legacy_member,
    member_route,
    python_member,
    start_gateway_with,
    stdio_member,
    ts_member,
)
from tests.support.processes import write_private
from tests.support.ts_server import mcp_headers, mcp_request, read_request_log

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: A tool each kind's server lists (and no other kind's does).
OWN_TOOL = {"py": "test_simple_text", "ts": "ts_echo", "legacy": "add", "everything": "get-sum"}


@pytest.fixture(scope="module")
def started(module_tmp: Path, state_key: str) -> Iterator[tuple[list[Member], Running]]:
    with ExitStack() as stack:
        # Started side by side: each server, the gateway, the stdio install check.
        members = [
            python_member(stack, module_tmp, wait=False),
            ts_member(stack, module_tmp, wait=False, prefix="node"),
            legacy_member(stack, module_tmp, wait=False),
        ]
        members.append(stdio_member())
        routes = [member_route(member) for member in members]
        gateway = start_gateway_with(stack, module_tmp, routes, keys=state_key, members=members)
        yield members, gateway


def test_each_member_kind_is_served_as_configured(started: tuple[list[Member], Running]):
    members, gateway = started
    assert [(m.name, m.kind) for m in members] == [
        ("py", "python"),
        ("ts", "ts"),
        ("legacy", "legacy"),
        ("everything", "stdio"),
    ]
    for member in members:
        url = f"{gateway.base}/{member.name}"
        r = httpx.post(
            url, headers=mcp_headers("tools/list"), json=mcp_request(1, "tools/list"), timeout=30
        )
        assert r.status_code == 200, (member.name, r.text)
        tools = {tool["name"] for tool in r.json()["result"]["tools"]}
        assert OWN_TOOL[member.name] in tools, (member.name, sorted(tools))
        others = {OWN_TOOL[m.name] for m in members if m is not member}
        assert not tools & others, (member.name, tools & others)
    # Servers with a request log saw the gateway's requests.
    ts, legacy = members[1], members[2]
    assert ts.request_log and any(
        e["method"] == "tools/list" for e in read_request_log(ts.request_log)
    )
    assert legacy.request_log and "tools/list" in legacy.request_log.read_text()


def test_the_federated_route_lists_the_members_in_order(started, module_tmp: Path):
    members, _ = started
    route = federation_route(members, name="tools", separator="__")
    config = gateway_config([route])
    path = write_private(module_tmp / "federation.yaml", yaml.safe_dump(config))
    (written,) = yaml.safe_load(path.read_text())["routes"]
    assert {k: v for k, v in written.items() if k != "members"} == {
        "name": "tools",
        "path": "/mcp",
        "separator": "__",
    }
    assert written["members"] == [
        {"name": "py", "upstream": members[0].url, "era": "modern"},
        {"name": "ts", "upstream": members[1].url, "era": "modern", "prefix": "node"},
        {"name": "legacy", "upstream": members[2].url, "era": "legacy"},
        {"name": "everything", "upstream": members[3].upstream},
    ]
    assert isinstance(members[3].upstream, dict) and members[3].url is None
