"""The per-route switch for go-sdk v1.7 clients: ``-32021`` with HTTP 200 instead of 400.

Every place a ``-32021`` comes from, each behind a route with the default (400, the spec) and one
with ``compat.missing_capability_status: 200``:

* the edge guard: a real ``mcp`` 2.x upstream (``plaintext_state.py``) answers InputRequiredResult
  asking for sampling, which the request did not declare;
* the legacy bridge: a 2025-era server (``legacy_server.py``, FastMCP 1.x) asks for sampling
  mid-call;
* the upstream itself: ``everything.py`` refuses with its own ``-32021``.

Only the status changes: the body (code, message, ``data.requiredCapabilities``, id) is the same,
and other 400 answers on the switched route keep their 400.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_gateway, start_upstream
from tests.support.legacy import start_legacy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MODERN = "2026-07-28"
FORM_ONLY = {"elicitation": {"form": {}}}


@pytest.fixture(scope="module")
def gateway(module_tmp: Path, state_key: str):
    with ExitStack() as stack:
        modern = start_upstream(stack, "plaintext_state.py", module_tmp)
        own = start_upstream(stack, "everything.py", module_tmp)
        legacy = start_legacy(stack, module_tmp, "--instance", "compat")
        routes = []
        for name, up, extra in (
            ("modern", modern, {}),
            ("own", own, {}),
            ("legacy", legacy, {"era": "legacy"}),
        ):
            routes.append({"name": name, "path": f"/{name}", "upstream": up.url, **extra})
            routes.append(
                {
                    "name": f"{name}-go",
                    "path": f"/{name}-go",
                    "upstream": up.url,
                    **extra,
                    "compat": {"missing_capability_status": 200},
                }
            )
        yield start_gateway(stack, module_tmp, keys=state_key, config={"routes": routes})


def call(
    gateway, path: str, request_id: int, tool: str, arguments: dict, **extra
) -> httpx.Response:
    params = {
        "name": tool,
        "arguments": arguments,
        **extra,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": FORM_ONLY,
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    with httpx.Client(timeout=30) as http:
        return http.post(
            f"{gateway.base}{path}",
            headers=headers,
            json={"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
        )


SOURCES = [
    (
        "modern",
        "ask_sample",
        {},
        "The upstream needs a client capability this request did not declare",
    ),
    (
        "legacy",
        "ask_model",
        {"question": "hi"},
        "The upstream needs a client capability this request did not declare",
    ),
    ("own", "test_missing_capability", {}, "This tool requires the client 'sampling' capability"),
]


@pytest.mark.parametrize(
    "route,tool,arguments,message", SOURCES, ids=["edge guard", "legacy bridge", "upstream's own"]
)
def test_32021_status_follows_the_route_switch(gateway, route, tool, arguments, message):
    expected = {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32021,
            "message": message,
            "data": {"requiredCapabilities": {"sampling": {}}},
        },
    }
    spec = call(gateway, f"/{route}", 7, tool, arguments)
    assert spec.status_code == 400, spec.text
    assert spec.json() == expected
    go = call(gateway, f"/{route}-go", 7, tool, arguments)
    assert go.status_code == 200, go.text
    assert go.json() == expected
    assert go.headers["content-type"].startswith("application/json")


def test_other_400s_on_a_switched_route_stay_400(gateway):
    r = call(
        gateway,
        "/modern-go",
        8,
        "ask_name",
        {},
        inputResponses={"name": {"action": "accept"}},
        requestState="mcpe1.AAAAAAAA.AAAA",
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == -32602
    with httpx.Client(timeout=10) as http:  # a header mismatch (-32020)
        r = http.post(
            f"{gateway.base}/modern-go",
            headers={
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": MODERN,
                "Mcp-Method": "tools/list",
            },
            json={
                "jsonrpc": "2.0",
                "id": 9,
                "method": "tools/call",
                "params": {
                    "name": "x",
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": MODERN,
                        "io.modelcontextprotocol/clientCapabilities": {},
                    },
                },
            },
        )
    assert r.status_code == 400 and r.json()["error"]["code"] == -32020


def test_a_declared_capability_is_served_as_usual_on_a_switched_route(gateway):
    r = call(gateway, "/modern-go", 10, "ask_name", {})
    assert r.status_code == 200
    assert r.json()["result"]["resultType"] == "input_required"
    assert r.json()["result"]["requestState"].startswith("mcpe1.")
