"""Tool names in the metrics cannot be steered by callers: a gateway process in front of a real SDK
upstream (``tests/servers/tool_names.py``), which answers a call of a tool it does not have with
``isError: true``, as SDK servers do. Invented names never take one of the route's label slots
(``observability.max_tool_names``, 3 here), tools the upstream listed get theirs, and no control
character reaches ``/metrics``."""

from __future__ import annotations

import base64
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import start_gateway, start_upstream
from tests.servers.tool_names import CONTROL_NAME

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def post(http: httpx.Client, rid: int, method: str, name: str | None = None) -> dict[str, Any]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    params: dict[str, Any] = {"_meta": META}
    if name is not None:
        params |= {"name": name, "arguments": {}}
        # A name that cannot be a header value travels in the spec's base64 form.
        headers["Mcp-Name"] = (
            name
            if name.isprintable()
            else "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
        )
    r = http.post(
        "/mcp",
        headers=headers,
        json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["id"] == rid and "result" in doc, doc
    return doc["result"]


def test_invented_names_never_take_label_slots_and_listed_tools_get_theirs(
    module_tmp: Path, state_key: str
):
    with ExitStack() as stack:
        upstream = start_upstream(stack, "tool_names.py", module_tmp)
        gateway = start_gateway(
            stack,
            module_tmp,
            upstream=upstream.url,
            keys=state_key,
            config={"observability": {"max_tool_names": 3}},
        )
        with httpx.Client(base_url=gateway.base, timeout=30) as http:
            invented = ["made-up\x1b[2J\x07", *(f"made-up-{i}" for i in range(5))]
            for rid, name in enumerate(invented, 1):
                result = post(http, rid, "tools/call", name)
                assert result["isError"] is True, result  # "Unknown tool", as a tool error
            listed = post(http, 10, "tools/list")
            assert sorted(t["name"] for t in listed["tools"]) == sorted(
                ["echo", "fails", CONTROL_NAME]
            )
            assert post(http, 11, "tools/call", "fails")["isError"] is True  # listed: labelled
            assert post(http, 12, "tools/call", "echo")["isError"] is False
            assert post(http, 13, "tools/call", CONTROL_NAME)["isError"] is False
            metrics = http.get("/metrics").text

    unprintable = sorted({repr(c) for c in metrics if not c.isprintable() and c != "\n"})
    assert not unprintable, f"unprintable characters in /metrics: {unprintable}"
    assert "made-up" not in metrics
    calls = {
        line.split('gen_ai_tool_name="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("mcp_server_operation_duration_seconds_count{")
        and 'mcp_method_name="tools/call"' in line
        and 'error_type="tool_error"' not in line
    }
    failures = {
        line.split('gen_ai_tool_name="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("mcp_server_operation_duration_seconds_count{")
        and 'error_type="tool_error"' in line
    }
    assert failures == {"_OTHER": len(invented), "fails": 1.0}, failures
    # echo has its label; the tool whose name holds control characters has none.
    assert calls == {"echo": 1.0, "_OTHER": 1.0}, calls
