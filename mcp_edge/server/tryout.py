"""``mcp-edge try``: one visible MRTR round trip against a gateway in front of the demo upstream.

Anything but the expected round trip ends the command with one line (``mcp_edge.exits``): no
answer at all is ``UNREACHABLE``, an answer that is no MCP answer or not the round trip is
``FAILED``.
"""

from __future__ import annotations

import errno
import json
import socket
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from mcp_edge.exits import FAILED, UNREACHABLE, CommandError

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2026-07-28",
    "Mcp-Method": "tools/call",
    "Mcp-Name": "book_table",
}

#: Bodies longer than this are no answer ``try`` waits for.
MAX_ANSWER_BYTES = 1 << 20


def demo_call(
    request_id: int, responses: dict[str, Any] | None, state: str | None
) -> dict[str, Any]:
    """A ``tools/call`` of the demo's ``book_table`` (round 1 without ``responses`` and ``state``)."""
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


def _unreachable(url: str, exc: BaseException, timeout: float) -> str:
    """One line saying why no answer came from ``url``."""
    if isinstance(exc, (TimeoutError, aiohttp.ServerTimeoutError)):
        return f"{url}: no answer within {timeout:g} s"
    host = urlsplit(url).netloc
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (socket.gaierror, aiohttp.ClientConnectorDNSError)):
            return f"{url}: cannot resolve {urlsplit(url).hostname}"
        if (
            isinstance(cause, ConnectionRefusedError)
            or getattr(cause, "errno", None) == errno.ECONNREFUSED
        ):
            return f"{url}: connection refused by {host}"
        if isinstance(cause, OSError) and cause.strerror:
            return f"{url}: cannot connect to {host} ({cause.strerror})"
        if isinstance(cause, aiohttp.ClientConnectorError):
            cause = cause.os_error
            continue
        cause = cause.__cause__ or cause.__context__
    return f"{url}: {exc or type(exc).__name__}"


def _message(step: str, response: aiohttp.ClientResponse, body: bytes) -> dict[str, Any]:
    """The JSON-RPC response in a JSON body, or the last one in an SSE stream."""
    content_type = response.headers.get("content-type", "").split(";", 1)[0].strip()
    found: Any = None
    try:
        if content_type == "application/json":
            found = json.loads(body)
        elif content_type == "text/event-stream":
            for line in body.decode().splitlines():
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if isinstance(event, dict) and ("result" in event or "error" in event):
                        found = event
    except ValueError:
        found = None
    is_answer = isinstance(found, dict) and found.get("jsonrpc") == "2.0"
    if not (
        is_answer
        and (isinstance(found.get("result"), dict) or isinstance(found.get("error"), dict))
    ):
        what = f"HTTP {response.status} {content_type or '(no content type)'}"
        raise CommandError(f"{step}: not an MCP answer: {what}", FAILED)
    return found


async def _post(
    client: aiohttp.ClientSession,
    url: str,
    headers: dict[str, str],
    step: str,
    message: dict[str, Any],
    *,
    error_expected: bool = False,
) -> dict[str, Any]:
    """The result of one call (its error when ``error_expected``), else CommandError."""
    async with client.post(url, headers=headers, json=message) as response:
        body = b""
        async for chunk in response.content.iter_chunked(1 << 16):
            body += chunk
            if len(body) > MAX_ANSWER_BYTES:
                raise CommandError(
                    f"{step}: not an MCP answer: over {MAX_ANSWER_BYTES} bytes", FAILED
                )
    answer = _message(step, response, body)
    if error_expected:
        if "error" not in answer:
            raise CommandError(f"{step}: the gateway did not refuse it: {_brief(answer)}", FAILED)
        return answer["error"]
    if "error" in answer:
        error = answer["error"]
        hint = " (does the gateway want --token?)" if response.status == 401 else ""
        raise CommandError(
            f"{step}: the gateway answered HTTP {response.status}, error "
            f"{error.get('code')}: {error.get('message')}{hint}",
            FAILED,
        )
    return answer["result"]


async def run_tryout(url: str, *, token: str | None = None, timeout: float = 10.0) -> int:
    headers = dict(HEADERS)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as client:
            await _round_trip(client, url, headers)
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise CommandError(_unreachable(url, exc, timeout), UNREACHABLE) from None
    return 0


async def _round_trip(client: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> None:
    first = await _post(client, url, headers, "round 1", demo_call(1, None, None))
    state, requests = first.get("requestState"), first.get("inputRequests")
    if (
        first.get("resultType") != "input_required"
        or not isinstance(state, str)
        or not isinstance(requests, dict)
    ):
        raise CommandError(
            f"round 1: expected input_required with a requestState, got {_brief(first)}", FAILED
        )
    print(
        f"round 1: input_required, asks {list(requests)}; sealed requestState {state[:24]}... ({len(state)} chars)"
    )
    for key, request in requests.items():
        request = request if isinstance(request, dict) else {}
        found = request.get("params")
        params: dict[str, Any] = found if isinstance(found, dict) else {}
        print(f"         {key}: {request.get('method')}: {params.get('message', '')}")
    answers = {key: {"action": "accept", "content": {"size": 4}} for key in requests}
    second = await _post(client, url, headers, "round 2", demo_call(2, answers, state))
    if second.get("resultType") != "complete":
        raise CommandError(f"round 2: expected a complete result, got {_brief(second)}", FAILED)
    listed = second.get("content")
    content: list[Any] = listed if isinstance(listed, list) else []
    print(
        f"round 2: complete: {' '.join(str(c.get('text', '')) for c in content if isinstance(c, dict))}"
    )
    tampered = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    refused = await _post(
        client, url, headers, "tampered retry", demo_call(3, answers, tampered), error_expected=True
    )
    print(f"tampered retry: {json.dumps(refused)}")


def _brief(doc: dict[str, Any]) -> str:
    text = json.dumps(doc)
    return text if len(text) <= 200 else text[:200] + "..."
