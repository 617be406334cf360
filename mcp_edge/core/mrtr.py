"""The Multi Round-Trip Request rules a gateway enforces on both directions."""

from __future__ import annotations

from typing import Any

from mcp_edge.core import capabilities as caps
from mcp_edge.core.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
)

#: The only requests that may end with ``resultType: "input_required"``.
MRTR_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})
#: The only requests an InputRequiredResult may ask the client to fulfil.
INPUT_REQUEST_METHODS = frozenset({"elicitation/create", "sampling/createMessage", "roots/list"})
#: Top-level params fields that belong to MRTR retries.
RETRY_FIELDS = ("inputResponses", "requestState")

INPUT_REQUIRED = "input_required"


def is_input_required(result: Any) -> bool:
    return isinstance(result, dict) and result.get("resultType") == INPUT_REQUIRED


def strip_retry_fields(params: dict[str, Any]) -> bool:
    """Remove MRTR retry fields from a request that may not carry them; True if any was there."""
    changed = False
    for name in RETRY_FIELDS:
        if name in params:
            del params[name]
            changed = True
    return changed


def legacy_retry_fields(doc: Any) -> list[str]:
    """The MRTR retry fields a legacy-era body carries, in any of its requests (a 2025-03-26 body
    may be a batch). Such a body is refused at the edge: those fields exist only in 2026-07-28,
    where the gateway verifies them, and an upstream that reads them on its legacy leg would
    otherwise act on a state nobody checked."""
    found: list[str] = []
    for message in doc if isinstance(doc, list) else [doc]:
        if not isinstance(message, dict):
            continue
        params = message.get("params")
        if isinstance(params, dict):
            found.extend(name for name in RETRY_FIELDS if name in params and name not in found)
    return found


def legacy_retry_fields_error(fields: list[str]) -> RpcError:
    return RpcError(
        INVALID_PARAMS,
        f"{' and '.join(fields)} belong to MCP 2026-07-28: send them with "
        "MCP-Protocol-Version: 2026-07-28 and the request envelope in params._meta",
        {"reason": "legacy_retry_fields", "fields": fields},
    )


def wrong_method_violation(method: str) -> RpcError:
    """An upstream asked for input on a method that may not do so."""
    return RpcError(
        INTERNAL_ERROR,
        f"Upstream violated MRTR: {method} may not return resultType 'input_required'",
        {"violation": "input_required_on_method", "method": method},
    )


def _violation(detail: str, kind: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, f"Upstream violated MRTR: {detail}", {"violation": kind})


def check_input_required(result: dict[str, Any], declared: caps.Capabilities) -> None:
    """Validate an upstream InputRequiredResult against the rules and the client's capabilities.

    Raises -32603 for a malformed result and -32021 (with ``data.requiredCapabilities``) when an
    input request needs a capability this request did not declare.
    """
    requests = result.get("inputRequests")
    state = result.get("requestState")
    if state is not None and not isinstance(state, str):
        raise _violation("requestState must be a string", "bad_request_state")
    if requests is not None and not isinstance(requests, dict):
        raise _violation("inputRequests must be an object", "bad_input_requests")
    if not requests and state is None:
        raise _violation(
            "an InputRequiredResult must carry inputRequests and/or requestState", "empty"
        )
    missing: caps.Capabilities = {}
    for key, request in (requests or {}).items():
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            raise _violation(
                f"inputRequests[{key!r}] must be an object with a method", "bad_input_request"
            )
        method = request["method"]
        if method not in INPUT_REQUEST_METHODS:
            raise _violation(
                f"inputRequests[{key!r}] uses {method!r}; only elicitation/create, "
                "sampling/createMessage and roots/list may be requested",
                "unknown_input_request",
            )
        params = request.get("params", {})
        if params is None and method == "roots/list":
            params = {}
        if not isinstance(params, dict):
            raise _violation(
                f"inputRequests[{key!r}].params must be an object", "bad_input_request"
            )
        need = caps.required_for(method, params)
        if not caps.covers(declared, need):
            caps.merge(missing, need)
    if missing:
        raise RpcError(
            MISSING_REQUIRED_CLIENT_CAPABILITY,
            "The upstream needs a client capability this request did not declare",
            {"requiredCapabilities": missing},
        )
