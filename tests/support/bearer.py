"""2026-07-28 requests from a caller with a bearer token: a raw ``tools/call`` over HTTP (to see
the status and error as they are) and an SDK client."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MODERN = "2026-07-28"


def rpc(request_id: int, method: str, caps: dict | None = None, **params: Any) -> dict[str, Any]:
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}
        if caps is None
        else caps,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def headers(token: str, method: str, name: str | None = None) -> dict[str, str]:
    h = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name:
        h["Mcp-Name"] = name
    return h


async def call(
    url: str, token: str, request_id: int, name: str, arguments: dict, **extra: Any
) -> httpx.Response:
    caps = extra.pop("caps", None)
    async with httpx.AsyncClient(timeout=15) as http:
        return await http.post(
            url,
            headers=headers(token, "tools/call", name),
            json=rpc(request_id, "tools/call", caps, name=name, arguments=arguments, **extra),
        )


def client(
    env: dict[str, Any], who: str, on_elicit: Any = None, url: str | None = None
) -> tuple[Any, Client]:
    """An SDK client of ``env["gateway"]`` (or ``url``) with ``env[who]``'s token; close the
    returned HTTP client with it."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {env[who]}"}, timeout=15)
    return http, Client(
        streamable_http_client(url or env["gateway"].url, http_client=http),
        mode=MODERN,
        elicitation_callback=on_elicit,
    )
