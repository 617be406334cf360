"""The 2026-07-28 request envelope: era detection and the checks made before anything is forwarded.

Order (as the spec and the conformance suite expect): required ``_meta`` keys (-32602), routing
headers equal to the body (-32020), protocol version supported (-32022).
"""

from __future__ import annotations

from typing import Any

from mcp_edge.core import headers as h
from mcp_edge.core.errors import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from mcp_edge.core.jsonrpc import Message

META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"

MODERN_VERSION = "2026-07-28"
SUPPORTED_VERSIONS: tuple[str, ...] = (MODERN_VERSION,)
#: Versions of the handshake era: such traffic passes through as it is.
LEGACY_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})

#: Methods whose ``Mcp-Name`` header mirrors a body field, and which field.
NAME_FIELDS: dict[str, str] = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
}
#: Extension methods that carry ``Mcp-Name`` when the client sends it.
OPTIONAL_NAME_FIELDS: dict[str, str] = {
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


_PROTOCOL_VERSION = h.PROTOCOL_VERSION.encode()
_MCP_METHOD = h.MCP_METHOD.encode()
_MCP_NAME = h.MCP_NAME.encode()


def is_modern(headers: h.RawHeaders | h.HeaderIndex) -> bool:
    """2026-07-28 traffic is told apart by its ``MCP-Protocol-Version`` header alone, the way
    SDK servers route it: absent or a handshake-era version means legacy."""
    versions = h.index(headers).all(_PROTOCOL_VERSION)
    if not versions:
        return False
    return not (len(versions) == 1 and versions[0].strip() in LEGACY_VERSIONS)


def target_of(method: str, params: dict[str, Any]) -> str | None:
    """The name or URI a request addresses (what ``Mcp-Name`` mirrors)."""
    field = NAME_FIELDS.get(method)
    if field is None:
        return None
    value = params.get(field)
    return value if isinstance(value, str) else None


def client_capabilities(params: dict[str, Any]) -> dict[str, Any]:
    meta = params.get("_meta")
    if isinstance(meta, dict):
        caps = meta.get(META_CLIENT_CAPABILITIES)
        if isinstance(caps, dict):
            return caps
    return {}


def check_request(msg: Message, headers: h.RawHeaders | h.HeaderIndex) -> str:
    """Validate a 2026-07-28 request; return its protocol version or raise :class:`RpcError`."""
    params = msg.params
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        raise RpcError(
            INVALID_PARAMS,
            "params._meta must be an object carrying the required "
            f"'{META_PROTOCOL_VERSION}' and '{META_CLIENT_CAPABILITIES}' keys",
        )
    if META_PROTOCOL_VERSION not in meta or META_CLIENT_CAPABILITIES not in meta:
        missing = [k for k in (META_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES) if k not in meta]
        raise RpcError(
            INVALID_PARAMS, f"params._meta is missing required key(s): {', '.join(missing)}"
        )
    version = meta[META_PROTOCOL_VERSION]
    if not isinstance(version, str):
        raise RpcError(INVALID_PARAMS, f"params._meta['{META_PROTOCOL_VERSION}'] must be a string")
    if not isinstance(meta[META_CLIENT_CAPABILITIES], dict):
        raise RpcError(
            INVALID_PARAMS, f"params._meta['{META_CLIENT_CAPABILITIES}'] must be an object"
        )

    _check_headers(msg, h.index(headers), version)

    if version not in SUPPORTED_VERSIONS:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            "Unsupported protocol version",
            {"supported": list(SUPPORTED_VERSIONS), "requested": version},
        )
    return version


def _single(headers: h.HeaderIndex, name: bytes) -> str | None:
    try:
        return headers.once(name)
    except ValueError:
        raise RpcError(
            HEADER_MISMATCH, f"{name.decode()} header must be sent exactly once"
        ) from None


def _check_headers(msg: Message, headers: h.HeaderIndex, version: str) -> None:
    header_version = _single(headers, _PROTOCOL_VERSION)
    if header_version is None or header_version.strip() != version:
        raise RpcError(
            HEADER_MISMATCH,
            "MCP-Protocol-Version header does not match params._meta protocolVersion",
        )
    header_method = _single(headers, _MCP_METHOD)
    if header_method is None or header_method.strip() != msg.method:
        raise RpcError(
            HEADER_MISMATCH, "Mcp-Method header does not match the request body's method"
        )
    header_name = _single(headers, _MCP_NAME)
    field = NAME_FIELDS.get(msg.method)
    if field is None and header_name is not None:
        field = OPTIONAL_NAME_FIELDS.get(msg.method)
    if field is None:
        return
    body_value = msg.params.get(field)
    decoded = h.decode_header_value(header_name) if header_name is not None else None
    if decoded is None or not isinstance(body_value, str) or decoded != body_value:
        raise RpcError(
            HEADER_MISMATCH,
            f"Mcp-Name header does not match the request body's '{field}' parameter",
        )
