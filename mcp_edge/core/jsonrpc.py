"""Parsing one JSON-RPC message from a POST body."""

from __future__ import annotations

from typing import Any

import orjson

from mcp_edge.core.errors import INVALID_REQUEST, PARSE_ERROR, RpcError


class Message:
    """One parsed JSON-RPC message (request or notification) whose ``method`` is a string (as
    :func:`parse_single_request` checks). Its method and params are read once, here: every layer
    after the transport reads them, and most read them more than once."""

    __slots__ = ("method", "params", "raw")

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.method: str = raw["method"]
        params = raw.get("params")
        #: The message's params object (the same dict as in ``raw``), or an empty one.
        self.params: dict[str, Any] = params if isinstance(params, dict) else {}

    def __repr__(self) -> str:
        return f"Message({self.raw!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and other.raw == self.raw

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def is_notification(self) -> bool:
        return "id" not in self.raw


def parse_json(body: bytes) -> Any:
    """Decode a body, mapping any failure to a -32700 parse error."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise RpcError(PARSE_ERROR, "Parse error: body is not valid JSON") from None


def best_effort_id(doc: Any) -> Any:
    """The request id to echo in an error, when there is one to find."""
    if isinstance(doc, dict):
        rid = doc.get("id")
        if isinstance(rid, (str, int)) and not isinstance(rid, bool):
            return rid
    return None


def parse_single_request(doc: Any) -> Message:
    """Check that a 2026-07-28 POST body is exactly one request or notification object."""
    if isinstance(doc, list):
        raise RpcError(
            INVALID_REQUEST, "Batches are not supported: send one JSON-RPC message per POST"
        )
    if not isinstance(doc, dict):
        raise RpcError(INVALID_REQUEST, "Body must be a single JSON-RPC request object")
    if doc.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'Invalid Request: jsonrpc must be "2.0"')
    method = doc.get("method")
    if not isinstance(method, str):
        if "result" in doc or "error" in doc:
            raise RpcError(
                INVALID_REQUEST, "Clients must not POST JSON-RPC responses in 2026-07-28"
            )
        raise RpcError(INVALID_REQUEST, "Invalid Request: method must be a string")
    if "id" in doc:
        rid = doc["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            raise RpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    params = doc.get("params")
    if params is not None and not isinstance(params, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: params must be an object")
    return Message(doc)


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc)
