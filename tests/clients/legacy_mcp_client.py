"""A 2025-era client for tests: the published ``mcp`` 1.x ``ClientSession`` over Streamable HTTP.

Runs in an environment of its own (``mcp`` 1.x cannot live beside this project's 2.x)::

    uv run --isolated --no-project --with mcp==1.30.0 python tests/clients/legacy_mcp_client.py PLAN

PLAN is a JSON file: ``url``, ``headers`` (sent with every request, e.g. ``Authorization``),
``calls`` (``[{"name": ..., "arguments": {...}}, ...]``, made in order in one session). It
prints ONE JSON document: ``{"protocolVersion", "tools": [...], "calls": [{"ok": true, "text"}
| {"ok": false, "error"}, ...]}``, or ``{"failed": "..."}`` when the session could not be opened.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client


async def run(plan: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = {"calls": []}
    transport = streamablehttp_client(
        plan["url"], headers=plan.get("headers") or {}, timeout=30, sse_read_timeout=60
    )
    async with (
        transport as (read, write, _),
        ClientSession(read, write, read_timeout_seconds=timedelta(seconds=30)) as s,
    ):
        init = await s.initialize()
        report["protocolVersion"] = init.protocolVersion
        report["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
        for call in plan.get("calls") or []:
            try:
                result = await s.call_tool(call["name"], call.get("arguments") or {})
            except Exception as exc:  # noqa: BLE001  (a JSON-RPC error: reported, go on)
                report["calls"].append({"ok": False, "error": str(exc)[:2000]})
                continue
            text = "".join(getattr(c, "text", "") for c in result.content)
            report["calls"].append({"ok": not result.isError, "text": text})
    return report


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        plan = json.load(f)
    try:
        report = asyncio.run(asyncio.wait_for(run(plan), plan.get("timeout", 60)))
    except BaseException as exc:  # noqa: BLE001  (one report, whatever failed)
        report = {"failed": f"{type(exc).__name__}: {exc}"[:2000]}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
