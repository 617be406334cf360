"""The error table: JSON-RPC codes the gateway emits and the HTTP status each one travels with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022
#: Implementation-defined server errors (outside the spec-reserved -32020..-32099 band).
UPSTREAM_ERROR = -32000

#: HTTP status for each code on the 2026-07-28 wire (anything else travels with 200).
HTTP_STATUS: dict[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}

STATE_ERROR_MESSAGE = "Invalid or expired requestState"

#: Key of the JSON-RPC error code on the ``http.response.start`` of an error the gateway wrote
#: itself (ASGI servers ignore keys they do not know); read by the metrics and the tracing.
ERROR_CODE = "mcp_edge.error_code"


@dataclass(frozen=True, slots=True)
class RpcError(Exception):
    """A JSON-RPC error to answer with, plus the HTTP status to send it with."""

    code: int
    message: str
    data: Any = None
    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def http_status(self) -> int:
        return self.status if self.status is not None else HTTP_STATUS.get(self.code, 200)

    def to_response(self, request_id: Any) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return {"jsonrpc": "2.0", "id": request_id, "error": err}

    def body(self, request_id: Any) -> bytes:
        return orjson.dumps(self.to_response(request_id))


def state_error(reason: str) -> RpcError:
    """A rejected ``requestState``; ``reason`` is one of :data:`mcp_edge.core.seal.REASONS`."""
    return RpcError(INVALID_PARAMS, STATE_ERROR_MESSAGE, {"reason": reason})
