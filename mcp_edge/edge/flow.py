"""The MRTR flow of each 2026-07-28 request, on both sides of the upstream.

On the way in: MRTR retry fields on a method that may not carry them are stripped; a request of
an MRTR method gets its :class:`~mcp_edge.core.flow.Flow`, which opens and verifies a retry's
sealed state (``-32602`` "Invalid or expired requestState" otherwise, and the upstream never sees
the request); on a single-use route the state is spent once (the replay guard); then the route's
policy decides the call (:class:`CallPolicy`), and may ask the gateway's own question instead of
forwarding it. On the way back, the answer goes through the response inspector
(mcp_edge.edge.responses), which checks it and, for an InputRequiredResult, has the flow seal it.

2025-era requests carry no MRTR fields (the transport middleware refuses them): they pass
untouched.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from mcp_edge.core import mrtr
from mcp_edge.core.errors import RpcError, state_error
from mcp_edge.core.flow import Flow, FlowRules, Verdict
from mcp_edge.core.jsonrpc import dumps
from mcp_edge.core.seal import StateRejected
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send, send_json, send_rpc_error
from mcp_edge.edge.body import AnswerBudget
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.responses import ResponseInspector, run_inspected
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics

#: Spends a sealed state's random id once; raises StateRejected("replayed") on a second use.
ReplayGuard = Callable[[str, int], Awaitable[None]]


class CallPolicy(Protocol):
    """A route's policy as the flow uses it (mcp_edge.policy.hook.RoutePolicy)."""

    async def decide(self, ctx: RequestContext, flow: Flow | None) -> Verdict:
        """Decide one request once its sealed state (if any) is verified: raise
        :class:`~mcp_edge.core.errors.RpcError` to refuse it, or say whether it changed the
        request's params and whether the gateway asks a question of its own instead."""
        ...


class FlowMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        route: str,
        rules: FlowRules,
        metrics: Metrics,
        max_inspect_bytes: int = 16 * 1024 * 1024,
        final_response_timeout: float | None = 600.0,
        replay_guard: ReplayGuard | None = None,
        policy: CallPolicy | None = None,
        answer_budget: AnswerBudget | None = None,
        clock: Callable[[], float] = time.time,
        rules_for: Callable[[str, dict[str, Any]], FlowRules] | None = None,
    ) -> None:
        self.app = app
        #: A route with members binds each state to the member its target names (its own
        #: audience): (method, params) -> the rules of that member (mcp_edge.server.stack).
        self.rules_for = rules_for
        #: The process's budget for answers held to be inspected (mcp_edge.edge.responses).
        self.answer_budget = answer_budget
        self.route = route
        self.rules = rules
        self.metrics = metrics
        self.max_inspect_bytes = max_inspect_bytes
        #: Longest wait for the final response of an MRTR method (None: no bound).
        self.final_response_timeout = final_response_timeout
        self.replay_guard = replay_guard
        self.policy = policy
        self.clock = clock
        self._accepted = metrics.rounds_accepted.labels(route)
        self._issued = metrics.rounds_issued.labels(route)
        self._completed = metrics.flows_completed.labels(route)
        self._over_budget = metrics.answer_refused.labels(route, "answer_budget")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        rpc = ctx.rpc
        if scope["type"] != "http" or not ctx.modern or rpc is None:
            await self.app(scope, receive, send)
            return
        method = rpc.method
        params = rpc.params
        flow: Flow | None = None
        try:
            if method not in mrtr.MRTR_METHODS:
                if mrtr.strip_retry_fields(params):
                    ctx.retry_fields = True
                    ctx.rewritten_body = dumps(rpc.raw)
            else:
                ctx.retry_fields = "requestState" in params or "inputResponses" in params
                flow = ctx.flow = Flow.open(
                    self.rules if self.rules_for is None else self.rules_for(method, params),
                    principal_id=ctx.principal.id if ctx.principal else "",
                    method=method,
                    params=params,
                    now=self.clock(),
                )
                if flow.state_id is not None:
                    ctx.pinned_endpoint = flow.pinned_endpoint
                    ctx.retry_round, ctx.retry_state_id, ctx.retry_state_expires = (
                        flow.round,
                        flow.state_id,
                        flow.expires,
                    )
                    ctx.rewritten_body = dumps(rpc.raw)
                    if self.replay_guard is not None:
                        await self.replay_guard(flow.state_id, flow.expires)
                    # Counted once verified and, on a single-use route, not spent before.
                    self._accepted.inc()
            if self.policy is not None:
                verdict = await self.policy.decide(ctx, flow)
                if verdict.rewritten:
                    ctx.rewritten_body = dumps(rpc.raw)
                if verdict.question is not None:
                    assert flow is not None  # only calls (MRTR methods) are asked about
                    answer = {
                        "jsonrpc": "2.0",
                        "id": ctx.request_id,
                        "result": flow.ask(verdict.question, now=self.clock()),
                    }
                    self._issued.inc()
                    await send_json(send, 200, dumps(answer))
                    return
        except RpcError as err:
            await send_rpc_error(send, err, ctx.request_id)
            return
        except StateRejected as rej:
            self.metrics.state_rejections.labels(self.route, rej.reason).inc()
            event(
                logging.INFO,
                "requestState rejected",
                route=self.route,
                reason=rej.reason,
                method=method,
                request_uid=ctx.request_uid,
            )
            await send_rpc_error(send, state_error(rej.reason), ctx.request_id)
            return

        inspector = ResponseInspector(
            send,
            request_id=ctx.request_id,
            rpc_method=method,
            mrtr_method=flow is not None,
            sealer=self._sealer(ctx, flow) if flow is not None else None,
            max_inspect_bytes=self.max_inspect_bytes,
            on_violation=self._violation,
            declared=flow.declared if flow is not None else None,
            on_upstream_error=self._upstream_error,
            budget=self.answer_budget,
            on_over_budget=self._over_budget.inc,
        )
        ctx.outcome = inspector.outcome
        await run_inspected(
            self.app,
            scope,
            receive,
            inspector,
            self.final_response_timeout if flow is not None else None,
        )
        if flow is not None:
            if inspector.outcome.input_required:
                self._issued.inc()
            elif inspector.outcome.completed and flow.round:
                self._completed.inc()

    def _violation(self, kind: str) -> None:
        self.metrics.violations.labels(self.route, kind).inc()

    def _upstream_error(self, kind: str) -> None:
        self.metrics.upstream_errors.labels(self.route, kind).inc()

    def _sealer(
        self, ctx: RequestContext, flow: Flow
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def sealer(result: dict[str, Any]) -> dict[str, Any]:
            return flow.seal(result, endpoint=ctx.answered_by, now=self.clock())

        return sealer
