"""``mcp-edge try``: one visible MRTR round trip against a gateway in front of the demo upstream."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "book_table",
}


def demo_call(request_id: int, responses: dict[str, Any] | None, state: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "name": "book_table",
        "arguments": {"date": "2026-12-24"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }
    if responses is not None:
        params["inputResponses"] = responses
    if state is not None:
        params["requestState"] = state
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


_call = demo_call


class _Client:
    """POSTs a request and reads its answer (JSON, or the last event of an SSE stream)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def post(self, url: str, *, headers: dict[str, str], json: Any) -> tuple[str, str]:
        async with self.session.post(url, headers=headers, json=json) as response:
            return response.headers.get("content-type", ""), await response.text()


def _result(response: tuple[str, str]) -> dict[str, Any]:
    content_type, text = response
    if content_type.startswith("text/event-stream"):
        last = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")][-1]
        return json.loads(last)
    return json.loads(text)


async def run_tryout(url: str, *, token: str | None = None) -> int:
    headers = dict(HEADERS)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10.0), trust_env=False) as session:
        client = _Client(session)
        first = _result(await client.post(url, headers=headers, json=_call(1, None, None)))
        result = first.get("result") or {}
        if result.get("resultType") != "input_required":
            print("round 1: expected input_required, got:", json.dumps(first))
            return 1
        state = result.get("requestState", "")
        keys = list((result.get("inputRequests") or {}).keys())
        print(f"round 1: input_required, asks {keys}; sealed requestState {state[:24]}... ({len(state)} chars)")
        for key, request in (result.get("inputRequests") or {}).items():
            print(f"         {key}: {request['method']}: {request['params'].get('message', '')}")
        answers = {key: {"action": "accept", "content": {"size": 4}} for key in keys}
        second = _result(await client.post(url, headers=headers, json=_call(2, answers, state)))
        if "error" in second:
            print("round 2: error:", json.dumps(second["error"]))
            return 1
        text = " ".join(c.get("text", "") for c in second["result"].get("content", []))
        print(f"round 2: {second['result'].get('resultType')}: {text}")
        tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        third = _result(await client.post(url, headers=headers, json=_call(3, answers, tampered)))
        print(f"tampered retry: {json.dumps(third.get('error'))}")
    return 0
