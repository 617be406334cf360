"""The transport and envelope checks, and authentication: nothing that fails them goes further.

In this order, each answered with a JSON-RPC error for the request's id (when one can be read):

1. ``Host`` (DNS rebinding, 421) and ``Origin`` (cross-origin callers, 403);
2. the HTTP method: POST; GET and DELETE only for 2025-era clients (their stream and session),
   authenticated and passed on (405 otherwise);
3. the body, whole, within its size, time and memory bounds (mcp_edge.edge.body);
4. the body parsed, once, and readable the same by every parser (mcp_edge.core.strict_json;
   ``-32700``). The parsed message travels on in the request's context: nobody parses it again;
5. the caller authenticated (the route's authenticator, mcp_edge.auth);
6. for a 2025-era request: served on this route at all, no loosely spelt method or id-less
   request (mcp_edge.core.methods), no MRTR retry fields (they belong to 2026-07-28);
7. for a 2026-07-28 request: one JSON-RPC request, not a notification, its envelope (``_meta``
   and the routing headers, mcp_edge.core.envelope) and its exact method name.

A request that passes goes on to ``app``; a 2025-era one to ``legacy_app`` when the route gives
one (the middlewares only that era needs, in front of ``app``: mcp_edge.server.stack), so a
2026-07-28 request does not pass through them.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.datastructures import Headers

from mcp_edge.auth.base import (
    ANONYMOUS,
    AnonymousAuthenticator,
    Authenticator,
    AuthError,
    Principal,
)
from mcp_edge.auth.upstream import client_bearer_token
from mcp_edge.core import envelope, methods, mrtr, strict_json
from mcp_edge.core import headers as h
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, RpcError
from mcp_edge.core.jsonrpc import best_effort_id, parse_json, parse_single_request
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_rpc_error
from mcp_edge.edge.body import BodyBudget, BodyRefused, Reservation, read_body
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics

_HOST_REFUSED = RpcError(INVALID_REQUEST, "Invalid Host header", status=421)
_ORIGIN_REFUSED = RpcError(INVALID_REQUEST, "Origin not allowed", status=403)


class TransportMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        route: str,
        authenticator: Authenticator,
        allowed_hosts: list[str] | None = None,
        allowed_origins: list[str] | tuple[str, ...] = (),
        max_body_bytes: int = 4 * 1024 * 1024,
        body_timeout: float | None = 30.0,
        body_budget: BodyBudget | None = None,
        max_json_depth: int = strict_json.DEFAULT_MAX_DEPTH,
        legacy_clients: bool = True,
        forward_client_token: bool = False,
        metrics: Metrics | None = None,
        legacy_app: ASGIApp | None = None,
    ) -> None:
        self.app = app
        #: Where 2025-era requests go (``app`` unless the route adds middlewares for them).
        self.legacy_app = app if legacy_app is None else legacy_app
        self.route = route
        self.authenticator = authenticator
        self.hosts = h.AllowList(allowed_hosts) if allowed_hosts is not None else None
        self.origins = h.AllowList(allowed_origins, origins=True)
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
        self.body_budget = body_budget
        self.max_json_depth = max_json_depth
        #: Serve 2025-era clients (no MCP-Protocol-Version, or a 2025 one); else refuse them.
        self.legacy_clients = legacy_clients
        #: Keep the caller's bearer token in the context for the upstream (the route opted in).
        self.forward_client_token = forward_client_token
        self._anonymous = type(authenticator) is AnonymousAuthenticator and not forward_client_token
        #: ``mcp_edge_body_refused`` by the refusal's HTTP status (else 413: size), resolved once.
        self._body_refused = (
            {
                status: metrics.body_refused.labels(route, reason)
                for status, reason in ((408, "body_timeout"), (503, "body_budget"), (413, "size"))
            }
            if metrics is not None
            else {}
        )  # fmt: skip -- one table, built once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = get_context(scope)
        headers = ctx.headers
        # Transport security first: DNS rebinding (Host) and cross-origin callers (Origin).
        if self.hosts is not None and not self.hosts.allows_host(headers.get(b"host")):
            await send_rpc_error(send, _HOST_REFUSED)
            return
        origin = headers.get(b"origin")
        if origin is not None and not self.origins.allows_origin(origin):
            await send_rpc_error(send, _ORIGIN_REFUSED)
            return

        modern = ctx.modern = envelope.is_modern(headers)
        http_method = scope["method"]
        if http_method != "POST":
            if modern or http_method not in ("GET", "DELETE"):
                await send_rpc_error(
                    send,
                    RpcError(
                        INVALID_REQUEST,
                        f"{http_method} is not supported: POST one JSON-RPC request",
                        status=405,
                        headers={"Allow": "POST"},
                    ),
                )
                return
            # A 2025-era GET stream or session DELETE: authenticated, then passed on.
            if not self.legacy_clients:
                await send_rpc_error(send, legacy_refused(None))
                return
            if await self._authenticate(scope, ctx, send) is not None:
                await self.legacy_app(scope, receive, send)
            return

        reservation = Reservation(self.body_budget)
        try:
            try:
                body = await read_body(
                    headers,
                    receive,
                    max_bytes=self.max_body_bytes,
                    timeout=self.body_timeout,
                    reservation=reservation,
                )
            except BodyRefused as refused:
                if (
                    refused.error is not None
                ):  # else the client went away mid-body: nothing to forward
                    if self._body_refused:
                        self._body_refused.get(
                            refused.error.http_status, self._body_refused[413]
                        ).inc()
                    await send_rpc_error(send, refused.error)
                return
            ctx.body = body
            if await self._read(scope, ctx, body, send):
                await (self.app if modern else self.legacy_app)(
                    scope, _forwarded(ctx, receive), send
                )
        finally:
            reservation.release()

    async def _read(self, scope: Scope, ctx: RequestContext, body: bytes, send: Send) -> bool:
        """Parse, authenticate and check the request; False when it has been answered."""
        doc = None
        try:
            doc = parse_json(body)
            # Nor a body other parsers may read otherwise (duplicate names, ...): mcp_edge.core.strict_json.
            strict_json.check(body, doc, max_depth=self.max_json_depth)
        except RpcError as err:
            # Legacy traffic too: a body the gateway cannot read might be read otherwise upstream
            # (NaN, say), so what the edge checked would not be what the upstream acts on.
            await send_rpc_error(
                send, err, None if strict_json.id_is_ambiguous(err) else best_effort_id(doc)
            )
            return False
        ctx.message, ctx.parsed = doc, True
        request_id = ctx.request_id = best_effort_id(doc)

        if self._anonymous:  # nothing to read: every caller is the same principal
            ctx.principal = ANONYMOUS
        elif await self._authenticate(scope, ctx, send, request_id=request_id) is None:
            return False

        if not ctx.modern:
            refused = self._legacy_refusal(ctx, doc)
            if refused is not None:
                await send_rpc_error(send, refused, request_id)
                return False
            return True

        try:
            rpc = ctx.rpc = parse_single_request(doc)
            ctx.rpc_method = rpc.method
            if rpc.is_notification:
                raise methods.notification_refused()
            envelope.check_request(rpc, ctx.headers)
            methods.check_spelling(rpc.method)
        except RpcError as err:
            await send_rpc_error(send, err, request_id)
            return False
        return True

    def _legacy_refusal(self, ctx: RequestContext, doc: Any) -> RpcError | None:
        if not self.legacy_clients:
            return legacy_refused(doc)
        refused = methods.legacy_refusal(doc)
        if refused is not None:
            event(
                logging.INFO,
                "legacy-era request refused",
                route=self.route,
                reason=refused.data["reason"],
                request_uid=ctx.request_uid,
            )
            return refused
        retry_fields = mrtr.legacy_retry_fields(doc)
        if retry_fields:
            method = (
                doc["method"]
                if isinstance(doc, dict) and isinstance(doc.get("method"), str)
                else "-"
            )
            event(
                logging.INFO,
                "legacy-era request with MRTR fields refused",
                route=self.route,
                method=method,
                fields=retry_fields,
                request_uid=ctx.request_uid,
            )
            return mrtr.legacy_retry_fields_error(retry_fields)
        return None

    async def _authenticate(
        self, scope: Scope, ctx: RequestContext, send: Send, *, request_id: Any = None
    ) -> Principal | None:
        if self._anonymous:  # nothing to read: every caller is the same principal
            ctx.principal = ANONYMOUS
            return ANONYMOUS
        client = scope.get("client")
        request_headers = Headers(scope=scope)
        try:
            principal = await self.authenticator.authenticate(
                request_headers,
                client[0] if client else None,
                query_string=scope.get("query_string", b""),
            )
        except AuthError as err:
            headers = {"WWW-Authenticate": err.www_authenticate} if err.www_authenticate else {}
            code = INVALID_REQUEST if err.status != 503 else INTERNAL_ERROR
            await send_rpc_error(
                send, RpcError(code, err.message, status=err.status, headers=headers), request_id
            )
            return None
        ctx.principal = principal
        if self.forward_client_token:
            ctx.client_token = client_bearer_token(request_headers)
        return principal


def _forwarded(ctx: RequestContext, receive: Receive) -> Receive:
    """``receive`` for the apps after this one: the body to forward once (as the flow left it:
    ``ctx.forward_body``), then the client's own messages (a disconnect)."""
    sent = False

    async def forwarded() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": ctx.forward_body, "more_body": False}
        return await receive()

    return forwarded


def legacy_refused(doc: Any) -> RpcError:
    """What a legacy-era request gets on a route that serves 2026-07-28 clients only (an
    ``initialize`` learns which version to use, as a version mismatch in that era says it)."""
    supported = list(envelope.SUPPORTED_VERSIONS)
    if isinstance(doc, dict) and doc.get("method") == "initialize":
        params = doc.get("params")
        return RpcError(
            INVALID_PARAMS,
            "Unsupported protocol version",
            {
                "supported": supported,
                "requested": params.get("protocolVersion") if isinstance(params, dict) else None,
            },
        )
    return RpcError(
        INVALID_REQUEST,
        "This endpoint serves MCP 2026-07-28 only: send MCP-Protocol-Version: 2026-07-28",
        {"supported": supported},
        status=400,
    )
