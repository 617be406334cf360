"""The edge guard: a pure ASGI middleware in front of one upstream route.

It reads and checks the request (size, JSON, authentication, the 2026-07-28 envelope, the MRTR
retry fields and sealed state), then calls the inner app (an HTTP proxy or any in-process ASGI MCP
app) and checks what comes back. Nothing that fails a check reaches the inner app.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers

from gateway.auth.base import Authenticator, AuthError, Principal
from gateway.auth.upstream import client_bearer_token
from gateway.core import envelope, methods, mrtr, strict_json
from gateway.core import headers as h
from gateway.core.digest import request_digest
from gateway.core.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, RpcError, state_error
from gateway.core.jsonrpc import Message as RpcMessage
from gateway.core.jsonrpc import best_effort_id, dumps, parse_json, parse_single_request
from gateway.core.session_token import UpstreamSession, open_session, seal_session
from gateway.core.seal import (
    MAX_TOKEN_CHARS,
    Binding,
    KeyRing,
    StateRejected,
    b64u_encode,
    new_claims,
    open_state,
    seal,
    verify_binding,
)
from gateway.edge import compat
from gateway.edge.asgi import ERROR_CODE, ASGIApp, Receive, Scope, Send, replay_body, send_json, send_rpc_error
from gateway.edge.context import EdgeContext, get_context
from gateway.edge.last_resort import last_resort
from gateway.edge.request_body import BodyBudget, BodyRefused, Reservation, read_body
from gateway.edge.responses import ResponseInspector, run_inspected
from gateway.observability.logs import event
from gateway.observability.metrics import Metrics
from gateway.observability.operations import OperationMetrics, error_type, protocol_version

if TYPE_CHECKING:
    from gateway.observability.tracing import Tracing

#: Largest upstream ``requestState`` the gateway will carry inside its own (the sealed envelope
#: grows by a third in base64 and must stay under the size ``open_state`` accepts).
MAX_UPSTREAM_STATE_CHARS = 128 * 1024

#: ``mcp_edge_body_refused`` reasons by the refusal's HTTP status (413: size).
_BODY_REFUSALS = {408: "body_timeout", 503: "body_budget"}

#: Consumes a sealed state's random id once; raises StateRejected("replayed") on a second use.
ReplayGuard = Callable[[str, int], Awaitable[None]]


@dataclass(slots=True)
class GuardSettings:
    route: str
    audience: str
    ring: KeyRing
    authenticator: Authenticator
    ttl_seconds: int = 600
    leeway_seconds: int = 5
    max_rounds: int = 16
    strict: bool = False
    max_body_bytes: int = 4 * 1024 * 1024
    max_inspect_bytes: int = 16 * 1024 * 1024
    #: Longest wait for the final response of an MRTR method (None: no bound).
    final_response_timeout: float | None = 600.0
    #: Tool names with their own ``gen_ai_tool_name`` metrics label (the rest: ``_OTHER``).
    max_tool_names: int = 100
    allowed_hosts: list[str] | None = None
    allowed_origins: list[str] = field(default_factory=list)
    replay_guard: ReplayGuard | None = None
    clock: Callable[[], float] = time.time
    #: One JSON log line per request (route, method, status, duration, request id).
    access_log: bool = False
    #: Keep the caller's bearer token in the context for the upstream (route opted in).
    forward_client_token: bool = False
    #: Serve legacy-era (2025) clients: requests whose MCP-Protocol-Version is absent or a 2025
    #: version. When False they are refused at the edge.
    legacy_clients: bool = True
    #: Replace upstream ``Mcp-Session-Id`` values with sealed tokens (endpoint + upstream id,
    #: bound to the caller), so legacy sessions work across replicas and endpoints.
    seal_sessions: bool = True
    #: The route's policy (``gateway.policy.hook.RoutePolicy``): decides each call once the
    #: request and any sealed state are verified, and may ask for approval itself.
    policy: Any = None
    #: The whole body must arrive within this many seconds (None: no deadline).
    body_timeout: float | None = 30.0
    #: Request bodies held by all requests in flight in the process (None: not counted).
    body_budget: BodyBudget | None = None
    max_json_depth: int = strict_json.DEFAULT_MAX_DEPTH
    #: HTTP status of -32021 answers (400, the spec; 200 for go-sdk v1.7 clients).
    missing_capability_status: int = 400


class EdgeGuard:
    def __init__(self, app: ASGIApp, settings: GuardSettings, metrics: Metrics | None = None,
                 tracing: Tracing | None = None) -> None:  # fmt: skip
        self.app = last_resort(app, settings.route)  # whatever fails inside: a JSON-RPC answer
        self.tracing = tracing
        self.s = settings
        self.metrics = metrics or Metrics()
        route = settings.route
        # Labelled children resolved once: labels() costs a lock and a dict walk per call.
        self._inflight = self.metrics.inflight.labels(route)
        self._request_seconds = self.metrics.request_seconds.labels(route)
        self._counters: dict[tuple[str, int], Any] = {}
        self._operations = OperationMetrics(self.metrics.operation_seconds, route, settings.max_tool_names)

    def _count(self, method: str, status: int) -> None:
        key = (method, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.requests.labels(self.s.route, method, str(status))
        counter.inc()

    # ------------------------------------------------------------------ entry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        ctx = get_context(scope)
        ctx.arrived = started
        ctx.request_uid = _request_uid(h.first(scope["headers"], "x-request-id"))
        reservation = Reservation(self.s.body_budget)
        status_box: dict[str, Any] = {"status": 0, "method": "-", "reservation": reservation, "tool": None,
                                      "outcome": None, "code": None}  # fmt: skip

        async def counting_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status_box["status"] = message["status"]
                status_box["code"] = message.get(ERROR_CODE)
                self._request_seconds.observe(time.perf_counter() - started)
                message["headers"] = [*message.get("headers", []), (b"x-request-id", ctx.request_uid.encode())]
            await send(message)

        self._inflight.inc()
        try:
            # The route's -32021 status (gateway.edge.compat) applies to every answer, whoever wrote it.
            respond = compat.missing_capability_status(counting_send, self.s.missing_capability_status)
            await self._handle(scope, receive, respond, status_box)
        finally:
            reservation.release()
            self._inflight.dec()
            method = _metric_method(status_box["method"])
            self._count(method, status_box["status"])
            error = self._observe(scope, status_box, method, time.perf_counter() - started)
            if self.tracing is not None:
                self.tracing.end_request(scope, ctx, status=status_box["status"], error_type=error,
                                         outcome=status_box["outcome"])  # fmt: skip
            if self.s.access_log:
                event(logging.INFO, "request", route=self.s.route, method=method,
                      status=status_box["status"], ms=round((time.perf_counter() - started) * 1000, 2),
                      request_uid=ctx.request_uid)  # fmt: skip

    def _observe(self, scope: Scope, box: dict[str, Any], method: str, seconds: float) -> str:
        """One observation of ``mcp_server_operation_duration_seconds``; returns its error type."""
        outcome = box["outcome"]
        code = outcome.error_code if outcome is not None else None
        error = error_type(box["code"] if code is None else code, outcome is not None and outcome.tool_error,
                           box["status"])  # fmt: skip
        tool = ""
        if method == "tools/call":
            tool = self._operations.tool_label(box["tool"], error, answer_read=outcome is not None)
        version = protocol_version(h.first(scope["headers"], h.PROTOCOL_VERSION))
        self._operations.observe(seconds, method, tool, error, version)
        return error

    async def _handle(self, scope: Scope, receive: Receive, send: Send, box: dict[str, Any]) -> None:
        raw_headers = scope["headers"]
        ctx = get_context(scope)

        # Transport security first: DNS rebinding (Host) and cross-origin callers (Origin).
        if self.s.allowed_hosts is not None and not h.host_allowed(
            h.first(raw_headers, "host"), self.s.allowed_hosts
        ):
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "Invalid Host header", status=421))
            return
        origin = h.first(raw_headers, "origin")
        if origin is not None and not h.origin_allowed(origin, self.s.allowed_origins):
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "Origin not allowed", status=403))
            return

        modern = envelope.is_modern(raw_headers)
        ctx.modern = modern
        http_method = scope["method"]
        if http_method != "POST":
            if modern or http_method not in ("GET", "DELETE"):
                await send_rpc_error(
                    send,
                    RpcError(INVALID_REQUEST, f"{http_method} is not supported: POST one JSON-RPC request",
                             status=405, headers={"Allow": "POST"}),  # fmt: skip
                )
                return
            # Legacy GET stream / session DELETE: authenticate, then pass through.
            if not self.s.legacy_clients:
                await send_rpc_error(send, _legacy_refused(None))
                return
            if await self._authenticate(scope, ctx, send, request_id=None) is None:
                return
            await self._legacy(scope, receive, send, None)
            return

        try:
            body = await self._read_body(scope, receive, box["reservation"])
        except BodyRefused as refused:
            if refused.error is not None:  # else the client went away mid-body: nothing to forward
                reason = _BODY_REFUSALS.get(refused.error.http_status, "size")
                self.metrics.body_refused.labels(self.s.route, reason).inc()
                await send_rpc_error(send, refused.error)
            return
        doc = None
        try:
            doc = parse_json(body)
            # Nor a body other parsers may read otherwise (duplicate names, ...): gateway.core.strict_json.
            strict_json.check(body, doc, max_depth=self.s.max_json_depth)
        except RpcError as err:
            # Legacy traffic too: a body the gateway cannot read might be read otherwise upstream
            # (NaN, say), so what the edge checked would not be what the upstream acts on.
            await send_rpc_error(send, err, None if strict_json.id_is_ambiguous(err) else best_effort_id(doc))
            return
        request_id = best_effort_id(doc)
        ctx.request_id = request_id
        if self.tracing is not None:
            self.tracing.start_request(scope, ctx, doc)

        principal = await self._authenticate(scope, ctx, send, request_id=request_id)
        if principal is None:
            return

        if not modern:
            if isinstance(doc, dict) and isinstance(doc.get("method"), str):
                box["method"] = doc["method"]
                if doc["method"] == "tools/call" and isinstance(doc.get("params"), dict):
                    box["tool"] = doc["params"].get("name")
            if not self.s.legacy_clients:
                await send_rpc_error(send, _legacy_refused(doc), request_id)
                return
            refused = methods.legacy_refusal(doc)
            if refused is not None:
                event(logging.INFO, "legacy-era request refused", route=self.s.route, reason=refused.data["reason"],
                      request_uid=ctx.request_uid)  # fmt: skip
                await send_rpc_error(send, refused, request_id)
                return
            retry_fields = mrtr.legacy_retry_fields(doc)
            if retry_fields:
                event(logging.INFO, "legacy-era request with MRTR fields refused", route=self.s.route,
                      method=box["method"], fields=retry_fields, request_uid=ctx.request_uid)  # fmt: skip
                await send_rpc_error(send, mrtr.legacy_retry_fields_error(retry_fields), request_id)
                return
            await self._legacy(scope, replay_body(body, receive), send, request_id)
            return

        try:
            msg = parse_single_request(doc)
            ctx.rpc_method = box["method"] = msg.method
            if msg.method == "tools/call":
                box["tool"] = msg.params.get("name")
            if msg.is_notification:
                raise methods.notification_refused()
            envelope.check_request(msg, raw_headers)
            methods.check_spelling(msg.method)
            body, sealer_ctx = self._request_side(msg, body, principal, ctx)
            if sealer_ctx is not None and sealer_ctx.jti is not None:
                await self._replay_check(sealer_ctx)
                # Counted once verified and, on a single-use route, not spent before.
                self.metrics.rounds_accepted.labels(self.s.route).inc()
            if self.s.policy is not None:
                body, question = await self.s.policy.on_request(msg, body, principal, sealer_ctx, ctx)
                if question is not None:
                    await self._send_gateway_round(send, msg, ctx, sealer_ctx, question, request_id)
                    return
        except RpcError as err:
            await send_rpc_error(send, err, request_id)
            return
        except StateRejected as rej:
            self.metrics.state_rejections.labels(self.s.route, rej.reason).inc()
            event(logging.INFO, "requestState rejected", route=self.s.route, reason=rej.reason,
                  method=msg.method, request_uid=ctx.request_uid)  # fmt: skip
            await send_rpc_error(send, state_error(rej.reason), request_id)
            return

        is_mrtr = msg.method in mrtr.MRTR_METHODS
        inspector = ResponseInspector(
            send,
            request_id=request_id,
            rpc_method=msg.method,
            mrtr_method=is_mrtr,
            sealer=self._make_sealer(msg, ctx, sealer_ctx) if is_mrtr else _no_sealer,
            max_inspect_bytes=self.s.max_inspect_bytes,
            on_violation=lambda kind: self.metrics.violations.labels(self.s.route, kind).inc(),
            declared=sealer_ctx.declared if sealer_ctx is not None else None,
            on_upstream_error=lambda kind: self.metrics.upstream_errors.labels(self.s.route, kind).inc(),
        )
        box["outcome"] = inspector.outcome
        timeout = self.s.final_response_timeout if is_mrtr else None
        await run_inspected(self.app, scope, replay_body(body, receive), inspector, timeout)
        if is_mrtr:
            if inspector.outcome.input_required:
                self.metrics.rounds_issued.labels(self.s.route).inc()
            elif inspector.outcome.completed and sealer_ctx and sealer_ctx.previous_round:
                self.metrics.flows_completed.labels(self.s.route).inc()

    # ------------------------------------------------------------------ legacy sessions

    async def _legacy(self, scope: Scope, receive: Receive, send: Send, request_id: Any) -> None:
        """Pass a legacy-era request through, mapping its sealed session token (if the route
        seals sessions) to the upstream's session id and endpoint, and back on the answer."""
        if not self.s.seal_sessions:
            await self.app(scope, receive, send)
            return
        ctx = get_context(scope)
        principal_id = ctx.principal.id if ctx.principal else ""
        presented: tuple[str, UpstreamSession] | None = None
        token = h.first(scope["headers"], "mcp-session-id")
        if token is not None:
            upstream = open_session(self.s.ring, token, audience=self.s.audience, principal_id=principal_id)
            if upstream is None:
                event(logging.INFO, "legacy session token refused", route=self.s.route, request_uid=ctx.request_uid)
                await send_rpc_error(send, RpcError(INVALID_REQUEST, "Session not found", status=404), request_id)
                return
            presented = (token, upstream)
            ctx.session_endpoint = upstream.endpoint
            ctx.session_id = upstream.session_id
            scope["headers"] = [
                *(item for item in scope["headers"] if item[0] != b"mcp-session-id"),
                (b"mcp-session-id", upstream.session_id.encode("latin-1")),
            ]

        async def sealing_send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = self._seal_session_header(message.get("headers", []), ctx, principal_id, presented)
            await send(message)

        await self.app(scope, receive, sealing_send)

    def _seal_session_header(self, headers: Any, ctx: EdgeContext, principal_id: str,
                             presented: tuple[str, UpstreamSession] | None) -> list[tuple[bytes, bytes]]:  # fmt: skip
        out: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name.lower() != b"mcp-session-id":
                out.append((name, value))
                continue
            endpoint = ctx.answered_by
            session_id = value.decode("latin-1")
            if endpoint is None:
                continue  # no upstream answered: nothing to map back to
            if presented is not None and presented[1].session_id == session_id and presented[1].endpoint == endpoint:
                out.append((name, presented[0].encode("latin-1")))
            else:
                token = seal_session(self.s.ring, audience=self.s.audience, principal_id=principal_id,
                                     endpoint=endpoint, session_id=session_id)  # fmt: skip
                out.append((name, token.encode("ascii")))
        return out

    # ------------------------------------------------------------------ request side

    async def _read_body(self, scope: Scope, receive: Receive, reservation: Reservation) -> bytes:
        """The whole body within the size, time and memory bounds (gateway.edge.request_body)."""
        return await read_body(scope, receive, max_bytes=self.s.max_body_bytes, timeout=self.s.body_timeout,
                               reservation=reservation)  # fmt: skip

    async def _authenticate(
        self, scope: Scope, ctx: EdgeContext, send: Send, *, request_id: Any
    ) -> Principal | None:
        client = scope.get("client")
        request_headers = Headers(scope=scope)
        try:
            principal = await self.s.authenticator.authenticate(
                request_headers, client[0] if client else None, query_string=scope.get("query_string", b"")
            )
        except AuthError as err:
            headers = {"WWW-Authenticate": err.www_authenticate} if err.www_authenticate else {}
            code = INVALID_REQUEST if err.status != 503 else INTERNAL_ERROR
            await send_rpc_error(send, RpcError(code, err.message, status=err.status, headers=headers), request_id)
            return None
        ctx.principal = principal
        if self.s.forward_client_token:
            ctx.client_token = client_bearer_token(request_headers)
        return principal

    def _request_side(
        self, msg: RpcMessage, body: bytes, principal: Principal, ctx: EdgeContext
    ) -> tuple[bytes, _FlowContext | None]:
        """Apply the MRTR request rules; return the body to forward and the flow context."""
        params = msg.params
        if msg.method not in mrtr.MRTR_METHODS:
            if mrtr.strip_retry_fields(params):
                ctx.retry_fields = True
                return dumps(msg.raw), None
            return body, None
        ctx.retry_fields = "requestState" in params or "inputResponses" in params

        flow = _FlowContext(
            audience=self.s.audience,
            principal_id=principal.id,
            method=msg.method,
            params=params,
            declared=envelope.client_capabilities(params),
        )
        if "requestState" in params:
            claims, key = open_state(
                self.s.ring, params["requestState"], now=self.s.clock(), leeway=self.s.leeway_seconds
            )
            verify_binding(claims, key, flow.binding, max_rounds=self.s.max_rounds)
            flow.previous_round = claims.r
            flow.jti = claims.j
            flow.expires = claims.exp
            flow.approved, flow.gateway_round, flow.issued = claims.a, claims.g, claims.k
            ctx.pinned_endpoint = claims.e
            ctx.retry_round, ctx.retry_state_id, ctx.retry_state_expires = claims.r, claims.j, claims.exp
            if claims.s is None:
                del params["requestState"]
            else:
                params["requestState"] = claims.s
            return dumps(msg.raw), flow
        if "inputResponses" in params and self.s.strict:
            raise StateRejected("missing")
        return body, flow

    async def _replay_check(self, flow: _FlowContext) -> None:
        if self.s.replay_guard is not None and flow.jti is not None:
            await self.s.replay_guard(flow.jti, flow.expires)

    def _make_sealer(
        self, msg: RpcMessage, ctx: EdgeContext, flow: _FlowContext | None
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        assert flow is not None

        def sealer(result: dict[str, Any]) -> dict[str, Any]:
            mrtr.check_input_required(result, flow.declared)
            upstream_state = result.get("requestState")
            if upstream_state is not None and len(upstream_state) > MAX_UPSTREAM_STATE_CHARS:
                raise _state_too_large()
            round_number = flow.previous_round + 1
            if round_number > self.s.max_rounds:
                # The retry was valid and the upstream ran it; it is the new round it asks for
                # that the route does not allow.
                raise RpcError(INTERNAL_ERROR,
                               f"The upstream asked for more input rounds than this route allows ({self.s.max_rounds})",
                               {"reason": "rounds"})  # fmt: skip
            requests = result.get("inputRequests") or {}
            claims = new_claims(
                self.s.ring,
                flow.binding,
                now=self.s.clock(),
                ttl=self.s.ttl_seconds,
                input_keys=list(requests.keys()),
                round_number=round_number,
                upstream_state=result.get("requestState"),
                endpoint=ctx.answered_by,
                approved=flow.approved,
            )
            token = seal(self.s.ring, claims)
            if len(token) > MAX_TOKEN_CHARS:  # it would not be accepted back on the retry
                raise _state_too_large()
            sealed = dict(result)
            sealed["requestState"] = token
            return sealed

        return sealer

    async def _send_gateway_round(self, send: Send, msg: RpcMessage, ctx: EdgeContext, flow: _FlowContext | None,
                                  result: dict[str, Any], request_id: Any) -> None:  # fmt: skip
        """Answer with an InputRequiredResult of the gateway's own (the policy's approval
        question), sealed like any round but marked as the gateway's: its retry never carries
        upstream state, and goes to any endpoint."""
        assert flow is not None
        round_number = flow.previous_round + 1
        if round_number > self.s.max_rounds:
            raise RpcError(INTERNAL_ERROR, f"More input rounds than this route allows ({self.s.max_rounds})",
                           {"reason": "rounds"})  # fmt: skip
        claims = new_claims(self.s.ring, flow.binding, now=self.s.clock(), ttl=self.s.ttl_seconds,
                            input_keys=list(result.get("inputRequests") or {}), round_number=round_number,
                            upstream_state=None, gateway_round=True)  # fmt: skip
        answer = {"jsonrpc": "2.0", "id": request_id, "result": {**result, "requestState": seal(self.s.ring, claims)}}
        self.metrics.rounds_issued.labels(self.s.route).inc()
        await send_json(send, 200, dumps(answer))


class _FlowContext:
    """One MRTR-method request: what its state is bound to, computed only when a state is
    opened or sealed (the digest costs a canonical JSON encoding)."""

    __slots__ = ("_binding", "approved", "audience", "declared", "expires", "gateway_round", "issued", "jti",
                 "method", "params", "previous_round", "principal_id")  # fmt: skip

    def __init__(self, *, audience: str, principal_id: str, method: str, params: dict[str, Any],
                 declared: dict[str, Any]) -> None:  # fmt: skip
        self.audience = audience
        self.principal_id = principal_id
        self.method = method
        self.params = params
        self.declared = declared
        self.previous_round = 0
        self.jti: str | None = None
        self.expires = 0
        #: From the verified state: the policy's approval was granted in this flow; the round
        #: was the gateway's own question; the inputRequests keys that round issued.
        self.approved = False
        self.gateway_round = False
        self.issued: list[str] = []
        self._binding: Binding | None = None

    @property
    def binding(self) -> Binding:
        if self._binding is None:
            self._binding = Binding(
                audience=self.audience,
                principal_id=self.principal_id,
                method=self.method,
                target=envelope.target_of(self.method, self.params),
                digest=b64u_encode(request_digest(self.method, self.params)),
            )
        return self._binding


#: Methods that get their own metrics label; anything else a client sends is "other", so callers
#: cannot grow the metrics without bound.
_KNOWN_METHODS = frozenset({
    "server/discover", "initialize", "ping", "tools/list", "tools/call", "prompts/list", "prompts/get",
    "resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
    "resources/unsubscribe", "completion/complete", "subscriptions/listen", "logging/setLevel",
    "tasks/get", "tasks/update", "tasks/cancel", "-",
})  # fmt: skip


def _metric_method(method: str) -> str:
    if method in _KNOWN_METHODS:
        return method
    if method.startswith("notifications/"):
        return "notifications"
    return "other"


def _request_uid(offered: str | None) -> str:
    """The client's X-Request-Id when it is a sane token (it ends up in logs), else a new one."""
    if offered and len(offered) <= 64 and all(c.isalnum() or c in "-_.:" for c in offered):
        return offered
    # Not a secret (clients and logs see it): a fast PRNG is enough, no system call per request.
    return f"{random.getrandbits(64):016x}"


def _state_too_large() -> RpcError:
    return RpcError(
        INTERNAL_ERROR,
        f"Upstream requestState is too large to carry (limit {MAX_UPSTREAM_STATE_CHARS} characters)",
        {"violation": "state_too_large"},
    )


def _legacy_refused(doc: Any) -> RpcError:
    """What a legacy-era request gets on a route that serves 2026-07-28 clients only (an
    ``initialize`` learns which version to use, as a version mismatch in that era says it)."""
    supported = list(envelope.SUPPORTED_VERSIONS)
    if isinstance(doc, dict) and doc.get("method") == "initialize":
        params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
        return RpcError(INVALID_PARAMS, "Unsupported protocol version",
                        {"supported": supported, "requested": params.get("protocolVersion")})  # fmt: skip
    return RpcError(
        INVALID_REQUEST,
        "This endpoint serves MCP 2026-07-28 only: send MCP-Protocol-Version: 2026-07-28",
        {"supported": supported},
        status=400,
    )


def _no_sealer(result: dict[str, Any]) -> dict[str, Any]:
    raise RpcError(INTERNAL_ERROR, "unreachable")
