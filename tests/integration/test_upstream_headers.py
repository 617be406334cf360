"""What reaches the upstream of the headers the edge checked, consumed or sets itself.

A real gateway in trusted-header mode (``X-Forwarded-User`` from 127.0.0.1) that tells the upstream
who is calling (``X-MCP-Principal``), in front of a real ``mcp`` 2.x server
(``tests/servers/edge_probe.py``) that logs the headers of every request exactly as they arrived.
Requests are written by hand (``tests/support/raw_http.py``) so that header names are sent as
spelt. Routes: ``/mcp`` (proxied) and ``/bridged`` (the same server reached through the legacy
bridge, ``era: legacy``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import start_gateway, start_upstream
from tests.support.raw_http import ACCEPT, META, exchange
from tests.support.raw_http import head as raw_head

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    log = module_tmp / "probe.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "edge_probe.py", module_tmp, "--log", str(log))
        who = {"principal_header": "X-MCP-Principal"}
        config = {
            "auth": {
                "mode": "trusted_header",
                "trusted_header": {"header": "X-Forwarded-User", "trusted_cidrs": ["127.0.0.1/32"]},
            },
            "routes": [
                {"name": "proxied", "path": "/mcp", "upstream": upstream.url, "upstream_auth": who},
                {
                    "name": "bridged",
                    "path": "/bridged",
                    "upstream": upstream.url,
                    "upstream_auth": who,
                    "era": "legacy",
                },
            ],
        }
        gateway = start_gateway(stack, module_tmp, config=config, keys=state_key, anonymous=False)
        yield {"gateway": gateway, "log": log}


def marker() -> str:
    return f"m-{uuid.uuid4().hex}"


def arrived(env: dict[str, Any], mark: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in env["log"].read_text().splitlines() if mark in line]


def names(entry: dict[str, Any]) -> list[str]:
    return [k for k, _ in entry["headers"]]


def values(entry: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in entry["headers"] if k == name]


def call_body(mark: str, request_id: int = 1) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "work", "arguments": {"marker": mark}, "_meta": META},
        }
    ).encode()


def post(
    env: dict[str, Any],
    body: bytes,
    extra: list[str],
    *,
    path: str = "/mcp",
    modern: bool = True,
    method: str = "tools/call",
    name: str | None = "work",
) -> Any:
    data = (
        raw_head(
            method,
            name=name,
            length=len(body),
            modern=modern,
            path=path,
            extra=["X-Forwarded-User: alice", *extra],
        )
        + body
    )
    return exchange(env["gateway"].port, data)


def test_connection_cannot_strip_what_the_edge_verified(env):
    mark = marker()
    r = post(
        env,
        call_body(mark),
        ["Connection: Mcp-Name, MCP-Protocol-Version, Content-Type, Mcp-Method"],
    )
    assert r.status == 200, r.body
    assert r.json()["result"]["content"][0]["text"] == f"worked {mark}"
    (entry,) = arrived(env, mark)
    assert values(entry, "mcp-protocol-version") == ["2026-07-28"]
    assert values(entry, "mcp-method") == ["tools/call"]
    assert values(entry, "mcp-name") == ["work"]
    assert values(entry, "content-type") == ["application/json"]
    assert "connection" not in names(entry) or values(entry, "connection") == ["keep-alive"]


def test_a_modern_request_carries_no_session_upstream(env):
    mark = marker()
    r = post(env, call_body(mark), ["Mcp-Session-Id: raw-upstream-session-id", "Last-Event-ID: 7"])
    assert r.status == 200, r.body
    (entry,) = arrived(env, mark)
    assert "mcp-session-id" not in names(entry) and "last-event-id" not in names(entry)


SPOOFS = [
    "X_Forwarded_User: root",
    "x-forwarded_user: root",
    "X_MCP_Principal: root",
    "X-Mcp_Principal: root",
    "X-MCP-Principal: root",
    "Mcp_Session_Id: raw-upstream-session-id",
    "Mcp_Method: tools/list",
]


def canonical(name: str) -> str:
    return name.lower().replace("_", "-")


def test_other_spellings_of_the_identity_headers_never_reach_the_upstream(env):
    mark = marker()
    r = post(env, call_body(mark), SPOOFS)
    assert r.status == 200, r.body
    (entry,) = arrived(env, mark)
    spelled = [
        (k, v)
        for k, v in entry["headers"]
        if canonical(k) in ("x-forwarded-user", "x-mcp-principal", "mcp-session-id", "mcp-method")
    ]
    assert spelled == [("mcp-method", "tools/call"), ("x-mcp-principal", "alice")]


def test_legacy_era_requests_get_the_same_header_rules(env):
    mark = marker()
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": mark, "version": "1"},
            },
        }
    ).encode()
    r = post(env, body, [*SPOOFS, "Connection: Content-Type, Accept"], modern=False, name=None)
    assert r.status == 200, r.body
    (entry,) = arrived(env, mark)
    spelled = [
        (k, v)
        for k, v in entry["headers"]
        if canonical(k) in ("x-forwarded-user", "x-mcp-principal")
    ]
    assert spelled == [("x-mcp-principal", "alice")]
    assert values(entry, "content-type") == ["application/json"] and values(entry, "accept") == [
        ACCEPT
    ]


def test_the_legacy_bridge_sends_only_its_own_headers(env):
    """Through the bridge the upstream's requests are the gateway's own: the caller's identity
    under the gateway's header and nothing the client spelt otherwise."""
    mark = marker()
    r = post(
        env,
        call_body(mark),
        [*SPOOFS, "Connection: Mcp-Name, MCP-Protocol-Version, Content-Type"],
        path="/bridged",
    )
    assert r.status == 200, r.body
    assert f"worked {mark}" in r.body.decode()
    entries = arrived(env, mark)
    assert entries, "the bridged call never reached the upstream"
    for entry in entries:
        spelled = [
            (k, v)
            for k, v in entry["headers"]
            if canonical(k) in ("x-forwarded-user", "x-mcp-principal")
        ]
        assert spelled == [("x-mcp-principal", "alice")]
        assert values(entry, "content-type") == ["application/json"]


@pytest.mark.parametrize(
    "line", ["X-MCP-Principal : root", " X-MCP-Principal: root", "X-MCP-Principal\t: root"]
)
def test_blanks_around_a_header_name_are_refused(env, line):
    """A name with blanks around it is malformed HTTP (RFC 9112 5.1): 400, nothing forwarded."""
    mark = marker()
    r = post(env, call_body(mark), [line])
    assert r.status == 400
    assert arrived(env, mark) == []
