"""The errors a bridged request ends with when its call cannot go on."""

from __future__ import annotations

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError


def flow_lost(reason: str, message: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": reason}, status=502)


def cannot_ask(message: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": "upstream_cannot_ask"})
