"""Requests in disguise: a request method without an id, and a method name spelt loosely, never
reach the upstream past the checks they would dodge (the sealed state, the policy, rate limits).

The upstream is a real ``mcp`` 2.x server (``tests/servers/edge_probe.py``) that logs every request
before its SDK reads it; each test finds its own requests there by a marker it put in the arguments.
One gateway process, anonymous callers, six routes: ``/mcp`` (nothing configured), ``/limited``
and ``/limited-legacy`` (two requests per caller per hour), ``/tool-limited`` (one call of the tool
``work`` per hour), ``/policy`` (only the tool ``allowed``; methods it does not know are denied, the
default) and ``/policy-open`` (the same with ``unknown_methods: allow``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running, start_gateway, start_upstream
from tests.support.legacy import open_legacy_session

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]
MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}
POLICY = {"default": "deny", "rules": [{"when": 'name == "allowed"', "action": "allow"}]}


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    log = module_tmp / "probe.jsonl"
    log.write_text("")
    with ExitStack() as stack:
        upstream = start_upstream(stack, "edge_probe.py", module_tmp, "--log", str(log))
        u = upstream.url
        config = {
            "routes": [
                {"name": "plain", "path": "/mcp", "upstream": u},
                {
                    "name": "limited",
                    "path": "/limited",
                    "upstream": u,
                    "rate_limits": {"per_principal": "2/hour"},
                },
                {
                    "name": "limited-legacy",
                    "path": "/limited-legacy",
                    "upstream": u,
                    "rate_limits": {"per_principal": "2/hour"},
                },
                {
                    "name": "tool-limited",
                    "path": "/tool-limited",
                    "upstream": u,
                    "rate_limits": {"tools": {"work": "1/hour"}},
                },
                {
                    "name": "policy",
                    "path": "/policy",
                    "upstream": u,
                    "legacy_clients": "deny",
                    "policy": POLICY,
                },
                {
                    "name": "policy-open",
                    "path": "/policy-open",
                    "upstream": u,
                    "legacy_clients": "deny",
                    "policy": {**POLICY, "unknown_methods": "allow"},
                },
            ]
        }
        gateway = start_gateway(stack, module_tmp, config=config, keys=state_key)
        yield {"gateway": gateway, "log": log}


def marker() -> str:
    return f"m-{uuid.uuid4().hex}"


def arrived(env: dict[str, Any], mark: str) -> list[dict[str, Any]]:
    """The upstream's log entries whose body carries ``mark``."""
    lines = env["log"].read_text().splitlines()
    return [json.loads(line) for line in lines if mark in line]


def url(env: dict[str, Any], path: str) -> str:
    gateway: Running = env["gateway"]
    return gateway.base + path


def modern(method: str, name: str | None = None) -> dict[str, str]:
    h = {"Accept": ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        h["Mcp-Name"] = name
    return h


def tool_call(
    mark: str, tool: str = "work", request_id: Any = None, method: str = "tools/call", **extra: Any
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "jsonrpc": "2.0",
        "method": method,
        "params": {"name": tool, "arguments": {"marker": mark}, **extra, "_meta": META},
    }
    if request_id is not None:
        doc["id"] = request_id
    return doc


def assert_id_less_refused(r: httpx.Response) -> None:
    assert r.status_code == 400, r.text
    assert r.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32600,
            "message": "Invalid Request: MCP 2026-07-28 has no client notifications over HTTP; "
            "a request needs an id",
            "data": {"reason": "notification"},
        },
    }


# ---------------------------------------------------------------- 2026-07-28 without an id


def test_an_id_less_call_with_a_forged_state_never_reaches_the_upstream(env):
    mark = marker()
    with httpx.Client(timeout=10) as http:
        r = http.post(
            url(env, "/mcp"),
            headers=modern("tools/call", "work"),
            json=tool_call(mark, requestState="forged-by-client", inputResponses={"x": {}}),
        )
        assert_id_less_refused(r)
        # The same forged state with an id: refused by the seal, as always.
        r = http.post(
            url(env, "/mcp"),
            headers=modern("tools/call", "work"),
            json=tool_call(mark, request_id=1, requestState="forged-by-client"),
        )
        assert r.status_code == 400 and r.json()["error"]["data"] == {"reason": "malformed"}
    assert arrived(env, mark) == []


def test_an_id_less_call_of_a_denied_tool_never_reaches_the_upstream(env):
    mark = marker()
    with httpx.Client(timeout=10) as http:
        assert_id_less_refused(
            http.post(
                url(env, "/policy"),
                headers=modern("tools/call", "denied"),
                json=tool_call(mark, "denied"),
            )
        )
        r = http.post(
            url(env, "/policy"),
            headers=modern("tools/call", "denied"),
            json=tool_call(mark, "denied", request_id=2),
        )
        assert r.status_code == 400 and r.json()["error"]["message"] == "Unknown tool: denied"
    assert arrived(env, mark) == []
    allowed = marker()  # the policy's allowed tool still works
    with httpx.Client(timeout=10) as http:
        r = http.post(
            url(env, "/policy"),
            headers=modern("tools/call", "allowed"),
            json=tool_call(allowed, "allowed", request_id=3),
        )
    assert r.status_code == 200 and r.json()["result"]["content"][0]["text"] == f"allowed {allowed}"
    assert len(arrived(env, allowed)) == 1


def test_an_id_less_call_over_the_rate_limit_never_reaches_the_upstream(env):
    spent = marker()
    with httpx.Client(timeout=10) as http:
        for rid in (1, 2):
            r = http.post(
                url(env, "/limited"),
                headers=modern("tools/call", "work"),
                json=tool_call(spent, request_id=rid),
            )
            assert r.status_code == 200, r.text
        r = http.post(
            url(env, "/limited"),
            headers=modern("tools/call", "work"),
            json=tool_call(spent, request_id=3),
        )
        assert r.status_code == 429 and r.json()["id"] == 3
        mark = marker()
        for _ in range(3):
            assert_id_less_refused(
                http.post(
                    url(env, "/limited"), headers=modern("tools/call", "work"), json=tool_call(mark)
                )
            )
    assert len(arrived(env, spent)) == 2
    assert arrived(env, mark) == []


@pytest.mark.parametrize("method", ["notifications/cancelled", "notifications/initialized", "ping"])
def test_no_client_notification_is_forwarded(env, method):
    """2026-07-28 defines no client notifications over HTTP: whatever comes without an id is
    refused at the edge (HTTP 400, id null), never forwarded as a notification."""
    mark = marker()
    with httpx.Client(timeout=10) as http:
        body = {"jsonrpc": "2.0", "method": method, "params": {"requestId": mark, "_meta": META}}
        r = http.post(url(env, "/mcp"), headers=modern(method), json=body)
    assert_id_less_refused(r)
    assert arrived(env, mark) == []


# ---------------------------------------------------------------- 2025-era without an id


def legacy_call(mark: str, request_id: Any = None, method: str = "tools/call") -> dict[str, Any]:
    params = {"name": "work", "arguments": {"marker": mark}}
    doc: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        doc["id"] = request_id
    return doc


def test_a_legacy_id_less_call_over_the_rate_limit_never_reaches_the_upstream(env):
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(
            http, url(env, "/limited-legacy"), client="id-less"
        )  # initialize spends 1 of 2
        spent = marker()
        r = http.post(url(env, "/limited-legacy"), headers=headers, json=legacy_call(spent, 2))
        assert r.status_code == 200 and spent in r.text
        r = http.post(url(env, "/limited-legacy"), headers=headers, json=legacy_call(spent, 3))
        assert r.status_code == 429 and r.json()["id"] == 3
        mark = marker()
        for body in (
            legacy_call(mark),
            [legacy_call(mark)],
            [legacy_call(mark, 4), legacy_call(mark)],
        ):
            r = http.post(url(env, "/limited-legacy"), headers=headers, json=body)
            assert r.status_code == 400, r.text
            assert r.json()["error"] == {
                "code": -32600,
                "message": "Invalid Request: tools/call needs an id "
                "(only notifications/* go without)",
                "data": {"reason": "request_without_id"},
            }
            assert r.json()["id"] is None
    assert len(arrived(env, spent)) == 1
    assert arrived(env, mark) == []


# ---------------------------------------------------------------- method names, exactly


@pytest.mark.parametrize(
    "method",
    [
        "Tools/Call",
        "TOOLS/CALL",
        "tools/Call",
        "tools/ call",
        "tools/call ",
        "tools/call\t",
        "Tools/call",
    ],
)
@pytest.mark.parametrize("path", ["/mcp", "/policy"])
def test_a_loosely_spelt_method_never_reaches_the_upstream(env, method, path):
    mark = marker()
    header = method.strip(" \t")
    with httpx.Client(timeout=10) as http:
        r = http.post(
            url(env, path),
            headers=modern(header, "denied"),
            json=tool_call(mark, "denied", 5, method),
        )
    assert arrived(env, mark) == [], f"{method!r} reached the upstream"
    assert r.status_code == (404 if method == header else 400), r.text
    assert r.json()["id"] == 5
    if method == header:  # the body and the header agree: the name itself is refused
        assert r.status_code == 404
        assert r.json()["error"]["code"] == -32601 and r.json()["error"]["data"] == {
            "reason": "method_spelling"
        }
    else:  # a header cannot carry the blank: it disagrees with the body
        assert r.json()["error"]["code"] == -32020


def test_a_loosely_spelt_call_does_not_escape_its_tool_budget(env):
    """``/tool-limited`` gives the tool ``work`` one call per hour: ``Tools/Call`` is no way around it."""
    spent, mark = marker(), marker()
    with httpx.Client(timeout=10) as http:
        for rid, status in ((1, 200), (2, 429)):
            r = http.post(
                url(env, "/tool-limited"),
                headers=modern("tools/call", "work"),
                json=tool_call(spent, request_id=rid),
            )
            assert r.status_code == status, r.text
        for method in ("Tools/Call", "TOOLS/CALL"):
            r = http.post(
                url(env, "/tool-limited"),
                headers=modern(method, "work"),
                json=tool_call(mark, request_id=3, method=method),
            )
            assert arrived(env, mark) == [], f"{method} reached the upstream"
            assert r.status_code == 404 and r.json()["error"]["data"] == {
                "reason": "method_spelling"
            }, r.text
    assert len(arrived(env, spent)) == 1


def test_a_loosely_spelt_legacy_method_never_reaches_the_upstream(env):
    mark = marker()
    with httpx.Client(timeout=10) as http:
        headers = open_legacy_session(http, url(env, "/mcp"), client="id-less")
        r = http.post(url(env, "/mcp"), headers=headers, json=legacy_call(mark, 6, "Tools/Call"))
        assert r.status_code == 400 and r.json()["id"] == 6
        assert r.json()["error"]["code"] == -32601 and r.json()["error"]["data"] == {
            "reason": "method_spelling"
        }
        ok = marker()
        r = http.post(url(env, "/mcp"), headers=headers, json=legacy_call(ok, 7))
        assert r.status_code == 200 and ok in r.text
    assert arrived(env, mark) == []


def test_a_method_the_policy_does_not_know_is_denied_by_default_and_allowed_when_configured(env):
    denied, allowed = marker(), marker()
    body = {
        "jsonrpc": "2.0",
        "id": 8,
        "method": "vendor/export",
        "params": {"marker": denied, "_meta": META},
    }
    with httpx.Client(timeout=10) as http:
        r = http.post(url(env, "/policy"), headers=modern("vendor/export"), json=body)
        assert arrived(env, denied) == [], "the policy route forwarded a method it does not know"
        assert r.status_code == 404, r.text
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": 8,
            "error": {
                "code": -32601,
                "message": "Method not found",
                "data": {"reason": "policy_unknown_method"},
            },
        }
        body["params"]["marker"] = allowed
        r = http.post(url(env, "/policy-open"), headers=modern("vendor/export"), json=body)
        # Forwarded: the upstream answers for itself (it has no such method).
        assert r.status_code == 404 and r.json()["id"] == 8 and r.json()["error"]["code"] == -32601
        assert "reason" not in (r.json()["error"].get("data") or {})
        # Methods the policy knows pass on both routes.
        for path in ("/policy", "/policy-open"):
            listing = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": META}}
            r = http.post(url(env, path), headers=modern("tools/list"), json=listing)
            assert r.status_code == 200 and [t["name"] for t in r.json()["result"]["tools"]] == [
                "allowed"
            ]
    assert arrived(env, denied) == []
    assert len(arrived(env, allowed)) == 1
