"""What one request's middlewares, features and upstream adapter know of it: the
:class:`RequestContext`, carried in the ASGI scope.

The request is read and parsed once, by the transport middleware; everything after it reads the
parsed message here (nobody parses the body again). Each field has one writer, named beside it;
everyone else only reads it.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_edge.auth.base import Principal
from mcp_edge.core.headers import HeaderIndex
from mcp_edge.core.jsonrpc import Message

if TYPE_CHECKING:
    from mcp_edge.core.flow import Flow

SCOPE_KEY = "mcp_edge"

_NO_HEADERS = HeaderIndex(())


@dataclass(slots=True)
class RequestContext:
    # ---- observe (mcp_edge.edge.observe), when the request arrives
    #: ``time.perf_counter()`` at arrival (the gateway-overhead histogram, the span's start).
    arrived: float = 0.0
    #: The client's ``X-Request-Id`` when sane, else a new one (logs and the response header).
    request_uid: str = ""
    #: The request's OpenTelemetry span, when tracing is on; opened when first needed
    #: (mcp_edge.observability.tracing), ended by observe.
    span: Any = None
    #: The client's headers, indexed once (each read is a lookup; the list stays in the scope).
    headers: HeaderIndex = _NO_HEADERS
    #: The event loop running the request, looked up once: on this Python every
    #: ``asyncio.get_running_loop()`` is a system call (a fork check), and the request's
    #: deadline and disconnect watch need it.
    loop: asyncio.AbstractEventLoop | None = None

    # ---- transport (mcp_edge.edge.transport): read, parsed and checked once
    #: A 2026-07-28 request (``MCP-Protocol-Version``), else the 2025 era's.
    modern: bool = False
    #: The whole body as the client sent it (bounded in size, time and memory).
    body: bytes = b""
    #: The body parsed and found readable the same by every parser (``message`` holds it).
    parsed: bool = False
    #: The parsed body: any JSON value (a 2025-era body may be a batch).
    message: Any = None
    #: The request's id, when there is one to echo.
    request_id: Any = None
    #: A 2026-07-28 body that is one JSON-RPC request: it, and its method.
    rpc: Message | None = None
    rpc_method: str | None = None
    #: Who calls (after authentication), and its validated bearer token for routes that forward
    #: or exchange it (mcp_edge.identity: the token exchange's subject token; never sent upstream
    #: unless the route forwards it).
    principal: Principal | None = None
    client_token: str | None = None

    # ---- legacy sessions (mcp_edge.edge.legacy_sessions): a 2025-era sealed session id, opened
    #: The upstream endpoint holding the session, and the upstream's own id for it.
    session_endpoint: str | None = None
    session_id: str | None = None

    # ---- flow (mcp_edge.edge.flow): the MRTR flow of a 2026-07-28 request
    #: The flow of a request of an MRTR method (None for other methods).
    flow: Flow | None = None
    #: The request carried MRTR retry fields (``inputResponses`` / ``requestState``), verified or
    #: not, kept or stripped (the edge cache never answers or stores such a request).
    retry_fields: bool = False
    #: A retry whose sealed state verified: the endpoint it must go back to, its round, the
    #: state's random id and expiry (rate limits count an MRTR flow once).
    pinned_endpoint: str | None = None
    retry_round: int = 0
    retry_state_id: str | None = None
    retry_state_expires: int = 0
    #: The body the upstream gets when the flow or the policy changed the message (else ``body``).
    rewritten_body: bytes | None = None
    #: What happened to the answer (mcp_edge.edge.responses.Outcome), for the metrics.
    outcome: Any = None

    # ---- identity (mcp_edge.identity.layer), in front of a member's adapter
    #: The bearer token this request's member gets as ``Authorization`` (exchanged or granted
    #: for this caller and member); None on members without upstream identity.
    upstream_bearer: str | None = None
    #: The upstream refused that token (``401`` with ``WWW-Authenticate``), as an adapter that
    #: does not pass the upstream's status on (the 2025-era bridge) reports it: its challenge.
    upstream_challenge: str | None = None

    # ---- the route's upstream adapter
    #: The upstream endpoint that answered this request.
    answered_by: str | None = None

    @property
    def forward_body(self) -> bytes:
        """The body the upstream gets."""
        rewritten = self.rewritten_body
        return self.body if rewritten is None else rewritten


#: Where the lifespan state (which the server copies into every request's ``scope["state"]``)
#: holds the event loop serving the app, set at start-up (mcp_edge.server.app).
LOOP_STATE_KEY = "mcp_edge.loop"


def serving_loop(scope: MutableMapping[str, Any]) -> asyncio.AbstractEventLoop:
    """The event loop running this request: the one the app started on (lifespan and requests
    share it: what starts with the app runs on it), else looked up. The lookup is a system call
    on this Python, once per request otherwise."""
    state = scope.get("state")
    if state:
        loop = state.get(LOOP_STATE_KEY)
        if loop is not None:
            return loop
    return asyncio.get_running_loop()


def get_context(scope: MutableMapping[str, Any]) -> RequestContext:
    """The request's context (made here for a scope that has none yet: a test, a peer request)."""
    ctx = scope.get(SCOPE_KEY)
    if ctx is None:
        ctx = scope[SCOPE_KEY] = RequestContext(headers=HeaderIndex(scope.get("headers", ())))
    return ctx
