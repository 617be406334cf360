"""The benchmark's workloads: valid 2026-07-28 requests and a cheap check of each answer.

Every request carries ``MCP-Protocol-Version: 2026-07-28``, ``Mcp-Method``, ``Mcp-Name`` (for
``tools/call``) and ``params._meta`` with the protocol version and the client capabilities.
One *operation* is one HTTP request, except ``mrtr``: round 1 (``input_required`` with a
``requestState``) plus the retry carrying the answer and that state, i.e. two HTTP requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

PROTOCOL_VERSION = "2026-07-28"
PROGRESS_STEPS = 100
BIG_BYTES = 100 * 1024

#: name -> (what it is, HTTP requests per operation, route: "json" or "sse" upstream)
WORKLOADS: dict[str, tuple[str, int, str]] = {
    "tools_list": ("tools/list", 1, "json"),
    "tools_list_cached": (
        "tools/list, through a route with the edge cache (the upstream says public, 60 s)",
        1,
        "cached",
    ),
    "small_call": ("tools/call, tiny result", 1, "json"),
    "small_call_policy": (
        "tools/call, tiny result, through a route with 10 policy rules (none matches)",
        1,
        "policy",
    ),
    "small_call_light": (
        "tools/call, tiny result, against the light upstream (bare ASGI, no SDK)",
        1,
        "light",
    ),
    "big_call": ("tools/call, 100 KB result", 1, "json"),
    "mrtr": ("MRTR flow: input_required + retry with state (2 requests)", 2, "json"),
    "sse_progress": ("tools/call, SSE with 100 progress notifications", 1, "sse"),
}


#: Workloads measured only through the gateway (no direct or nginx path can serve them): a
#: 2026-07-28 MRTR flow against a legacy (2025-era) server, which only the bridge makes possible.
BRIDGE_WORKLOADS: dict[str, tuple[str, int, str]] = {
    "mrtr_legacy_resume": (
        "MRTR flow against a legacy server through the bridge, resume (2 requests)",
        2,
        "legacy_resume",
    ),
    "mrtr_legacy_park": (
        "MRTR flow against a legacy server through the bridge, park (2 requests)",
        2,
        "legacy_park",
    ),
}
ALL_WORKLOADS = {**WORKLOADS, **BRIDGE_WORKLOADS}


class BadAnswer(Exception):
    """The answer was not what a correct server (or proxy) gives."""


def _meta(capabilities: dict[str, Any], progress_token: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "mcp-edge-bench", "version": "1"},
    }
    if progress_token is not None:
        meta["progressToken"] = progress_token
    return meta


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: int
    json_path: str  # where the json-mode upstream is reached
    sse_path: str  # where the SSE-mode upstream is reached
    cached_path: str = "/mcp"  # the json-mode upstream through a route with the edge cache
    policy_path: str = "/mcp"  # the json-mode upstream through a route with ten policy rules
    light_path: str = "/mcp"  # the light upstream (bench.light)
    #: Other routes of the gateway, by name (the legacy bridge's).
    paths: dict[str, str] | None = None
    #: More request header lines, each ``Name: value`` (e.g. a bearer token).
    headers: tuple[str, ...] = ()

    def path(self, route: str) -> str:
        known = {
            "json": self.json_path,
            "sse": self.sse_path,
            "cached": self.cached_path,
            "policy": self.policy_path,
            "light": self.light_path,
        }
        return known[route] if route in known else (self.paths or {})[route]


class RequestBuilder:
    """Pre-encodes everything that does not change between requests."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._heads: dict[tuple[str, str, str | None], bytes] = {}

    def head(self, path: str, method: str, name: str | None) -> bytes:
        key = (path, method, name)
        head = self._heads.get(key)
        if head is None:
            lines = [
                f"POST {path} HTTP/1.1",
                f"Host: {self.target.host}:{self.target.port}",
                "Content-Type: application/json",
                "Accept: application/json, text/event-stream",
                f"MCP-Protocol-Version: {PROTOCOL_VERSION}",
                f"Mcp-Method: {method}",
            ]
            if name is not None:
                lines.append(f"Mcp-Name: {name}")
            lines.extend(self.target.headers)
            head = self._heads[key] = ("\r\n".join(lines) + "\r\nContent-Length: ").encode()
        return head

    def request(self, route: str, method: str, name: str | None, body: dict[str, Any]) -> bytes:
        payload = orjson.dumps(body)
        return b"%s%d\r\n\r\n%s" % (
            self.head(self.target.path(route), method, name),
            len(payload),
            payload,
        )

    # -------------------------------------------------------------- the requests

    def tools_list(self, rid: int, route: str = "json") -> bytes:
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/list", "params": {"_meta": _meta({})}}
        return self.request(route, "tools/list", None, body)

    def call(
        self,
        rid: int,
        tool: str,
        *,
        route: str = "json",
        capabilities: dict[str, Any] | None = None,
        progress_token: int | None = None,
        extra: dict[str, Any] | None = None,
        arguments: dict[str, Any] | None = None,
    ) -> bytes:
        params: dict[str, Any] = {
            "name": tool,
            "arguments": arguments or {},
            "_meta": _meta(capabilities or {}, progress_token),
        }
        if extra:
            params.update(extra)
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        return self.request(route, "tools/call", tool, body)


ELICIT_CAPS = {"elicitation": {"form": {}}}
ANSWER = {"colour": {"action": "accept", "content": {"colour": "blue"}}}


def check_status(status: int, body: bytes) -> None:
    if status != 200:
        raise BadAnswer(f"HTTP {status}: {body[:200]!r}")


def check_tools_list(status: int, body: bytes) -> None:
    check_status(status, body)
    if b'"tools"' not in body or b'"result"' not in body:
        raise BadAnswer(f"not a tools/list result: {body[:200]!r}")


def check_tools_list_of(rid: int, status: int, body: bytes) -> None:
    """A tools/list answer for this very request (a cached one too must carry the request's id)."""
    check_tools_list(status, body)
    if b'"id":%d,' % rid not in body[:64]:
        raise BadAnswer(f"not the answer to request {rid}: {body[:200]!r}")


def check_small(status: int, body: bytes) -> None:
    check_status(status, body)
    if b'"result"' not in body or b'"ok"' not in body:
        raise BadAnswer(f"not the small result: {body[:200]!r}")


def check_big(status: int, body: bytes) -> None:
    check_status(status, body)
    if len(body) < BIG_BYTES or b'"result"' not in body[:100] + body[-400:]:
        raise BadAnswer(f"not the 100 KB result ({len(body)} bytes): {body[:200]!r}")


def check_round1(status: int, body: bytes) -> str:
    """Round 1 of the MRTR flow; returns the requestState to send back."""
    check_status(status, body)
    try:
        result = orjson.loads(body)["result"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise BadAnswer(f"round 1 is not a result: {body[:200]!r}") from None
    state = result.get("requestState")
    if result.get("resultType") != "input_required" or not isinstance(state, str):
        raise BadAnswer(f"round 1 is not input_required with a state: {body[:200]!r}")
    return state


def check_round2(status: int, body: bytes) -> None:
    check_status(status, body)
    if b"colour=blue" not in body or b'"complete"' not in body:
        raise BadAnswer(f"the retry did not complete: {body[:300]!r}")


def check_sse(status: int, body: bytes) -> None:
    check_status(status, body)
    if not body.startswith((b"event:", b"data:", b"id:", b":")):
        raise BadAnswer(f"not an SSE stream: {body[:200]!r}")
    seen = body.count(b"notifications/progress")
    if seen != PROGRESS_STEPS or b'"done"' not in body[-600:]:
        raise BadAnswer(f"SSE stream had {seen} progress events, final={body[-300:]!r}")


def legacy_answer(status: int, body: bytes) -> tuple[str, str]:
    """Round 1 of the bridged flow: the key the bridge gave the question, and the state."""
    state = check_round1(status, body)
    keys = list(orjson.loads(body)["result"].get("inputRequests") or {})
    if len(keys) != 1:
        raise BadAnswer(f"round 1 should ask one question: {body[:200]!r}")
    return keys[0], state


def check_legacy_done(status: int, body: bytes) -> None:
    check_status(status, body)
    if b"Booked 4 on 2026-12-24" not in body or b'"complete"' not in body:
        raise BadAnswer(f"the bridged retry did not complete: {body[:300]!r}")
