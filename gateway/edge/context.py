"""Per-request facts the edge guard hands to the upstream adapter through the ASGI scope."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

from gateway.auth.base import Principal

SCOPE_KEY = "mcp_edge"


@dataclass(slots=True)
class EdgeContext:
    request_id: Any = None
    rpc_method: str | None = None
    modern: bool = False
    principal: Principal | None = None
    #: The raw bearer token, kept only for routes that forward the client's token.
    client_token: str | None = None
    #: Upstream endpoint a retry must go back to (from the sealed state), if any.
    pinned_endpoint: str | None = None
    #: Upstream endpoint that answered this request (set by the adapter).
    answered_by: str | None = None
    #: Upstream endpoint holding the legacy session of this request (from its sealed token).
    session_endpoint: str | None = None
    #: The upstream's id of that session, from the same sealed token (never the client's text).
    session_id: str | None = None
    request_uid: str = ""
    #: The request carried MRTR retry fields (``inputResponses`` / ``requestState``), verified or
    #: not, kept or stripped. Layers behind the guard read these (the edge cache never answers or
    #: stores such a request).
    retry_fields: bool = False
    #: A retry whose sealed ``requestState`` verified: its round, the state's random id and
    #: expiry (rate limits count an MRTR flow once).
    retry_round: int = 0
    retry_state_id: str | None = None
    retry_state_expires: int = 0
    #: ``time.perf_counter()`` when the request arrived, for the gateway-overhead histogram.
    arrived: float = 0.0
    #: The request's OpenTelemetry span, when tracing is on (parent of the upstream call's).
    span: Any = None


def get_context(scope: MutableMapping[str, Any]) -> EdgeContext:
    ctx = scope.get(SCOPE_KEY)
    if ctx is None:
        ctx = scope[SCOPE_KEY] = EdgeContext()
    return ctx
