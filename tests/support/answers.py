"""The JSON-RPC response in a 2026-07-28 answer read over plain HTTP, whether the body is JSON or
an SSE stream."""

from __future__ import annotations

import json
from typing import Any

import httpx


def rpc_answer(resp: httpx.Response) -> dict[str, Any]:
    """The JSON body, or the stream's first event that is a response (a result or an error)."""
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        docs = [json.loads(line[5:]) for line in resp.text.splitlines() if line.startswith("data:")]
        return next(d for d in docs if "result" in d or "error" in d)
    doc: dict[str, Any] = resp.json()
    return doc
