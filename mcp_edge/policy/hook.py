"""A route's policy in the MRTR flow: decide each call before anything is forwarded, and run the
gateway's own approval round.

The flow middleware (mcp_edge.edge.flow) calls :meth:`RoutePolicy.decide` after authentication,
the envelope checks and the verification of any sealed ``requestState`` (and, on single-use routes,
its consumption), and before the request goes on. So a denied call never reaches the upstream, an
MRTR retry included: the policy is decided again on every round.

How the approval chains with the upstream's rounds, in one sealed state:

1. First request, decision ``approve``: the gateway answers itself with an InputRequiredResult
   (a form elicitation under :data:`~mcp_edge.policy.approval.APPROVAL_KEY`); the flow seals it
   like any round (:meth:`mcp_edge.core.flow.Flow.ask`), bound to the principal, route, method,
   target and argument digest, marked as the gateway's round (claim ``g``), with no upstream
   state and no upstream endpoint.
2. The retry verifies like any retry. Its state is the gateway's round: the answer is read
   (``accept`` with ``approve: true`` lets it go on; decline, cancel or an unconfirmed form are a
   clear error; no answer asks again), the state is spent in the store (single-use approvals),
   the answer is removed from ``inputResponses`` and the upstream gets the call as a first call:
   no ``requestState``, and none of the gateway's answer.
3. When the upstream asks its own questions, the flow seals its rounds with the approval claim
   (``a``) carried along; their retries pass the policy without asking again (still decided
   again: a rule that now denies, denies) and, with single-use approvals, are spent too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp_edge.core.errors import METHOD_NOT_FOUND, RpcError
from mcp_edge.core.flow import GO_ON, Flow, Verdict
from mcp_edge.core.memo import BoundedMemo
from mcp_edge.core.methods import MODERN_REQUESTS
from mcp_edge.core.uri import canonical_uri, not_canonical
from mcp_edge.edge.context import RequestContext
from mcp_edge.observability.logs import event
from mcp_edge.observability.observer import Count
from mcp_edge.policy import approval as ap
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.metrics import PolicyMetrics
from mcp_edge.policy.pins import PinStoreUnavailable, ToolPins
from mcp_edge.policy.rules import (
    ALLOW,
    APPROVE,
    CALL_METHODS,
    DENY,
    LIST_METHODS,
    Decision,
    RouteRules,
)

#: Spends a sealed state's random id once (``mcp_edge.store.make_replay_guard``).
SpendOnce = Callable[[str, int], Awaitable[None]]
#: (principal id, member) -> whether the caller holds its own grant for the member (None: the
#: store cannot tell); set by the wiring when a member of the route has ``upstream_auth.oauth``
#: (mcp_edge.identity; policy reads it through this, never imports it).
GrantLookup = Callable[[str, str], Awaitable[bool | None]]


class _RateLimitedLog:
    """At most one line per key every ``seconds`` (rule errors can come with every request)."""

    def __init__(self, seconds: float = 10.0) -> None:
        self.seconds = seconds
        self._last: BoundedMemo[str, float] = BoundedMemo(1024)

    def __call__(self, key: str) -> bool:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.seconds:
            return False
        self._last.put(key, now)
        return True


_REWRITTEN = Verdict(rewritten=True)


class RoutePolicy:
    """One route's policy (a :class:`mcp_edge.edge.flow.CallPolicy`)."""

    def __init__(
        self,
        *,
        route: str,
        config: RoutePolicyConfig,
        metrics: PolicyMetrics,
        spend_approval: SpendOnce | None = None,
        pins: ToolPins | None = None,
    ) -> None:
        self.route = route
        self.config = config
        self.metrics = metrics
        self.rules = RouteRules(config, on_error=self._rule_error)
        self.spend_approval = spend_approval
        self.pins = pins
        #: The caller's grants, for rules that read ``grant`` (None: no member has them).
        self.grant_lookup: GrantLookup | None = None
        self._log_once = _RateLimitedLog()
        self._decisions: dict[tuple[str, str], Count] = {}
        self.deny_unknown = config.unknown_methods == DENY
        #: The canonical spelling of a resource URI on this route (mcp_edge.core.uri; a route
        #: with members: the namespace's, which keeps a member's prefix as it is).
        self.canonical_uri: Callable[[str], str | None] = canonical_uri

    # ------------------------------------------------------------------ bookkeeping

    def _count(self, method: str, decision: str) -> None:
        key = (method, decision)
        child = self._decisions.get(key)
        if child is None:
            child = self._decisions[key] = Count(
                self.metrics.decisions.labels(self.route, method, decision)
            )
        child.inc()

    def _rule_error(self, label: str) -> None:
        self.metrics.rule_errors.labels(self.route, label).inc()
        if self._log_once(f"error:{label}"):
            event(
                logging.WARNING,
                "policy rule failed to evaluate; it fails closed",
                route=self.route,
                rule=label,
            )

    def _deny(
        self,
        method: str,
        target: str | None,
        label: str,
        request_uid: str,
        *,
        visible: bool,
        message: str | None,
    ) -> RpcError:
        self._count(method, "deny" if label != "pinned" else "pinned_blocked")
        self.metrics.denied.labels(self.route, label).inc()
        # The tool/prompt name or resource URI and the rule: never the arguments, never who.
        event(
            logging.INFO,
            "policy denied",
            route=self.route,
            method=method,
            target=target,
            rule=label,
            request_uid=request_uid,
        )
        return ap.denied(method, target, visible=visible, message=message)

    def _deny_unknown(self, method: str, request_uid: str) -> RpcError:
        """A method the policy does not know, on a route that refuses those (``unknown_methods``)."""
        self._count("other", "deny")  # the method is the caller's text: not a metrics label
        self.metrics.denied.labels(self.route, "unknown_methods").inc()
        event(
            logging.INFO,
            "policy denied",
            route=self.route,
            method=method[:64],
            rule="unknown_methods",
            request_uid=request_uid,
        )
        return RpcError(
            METHOD_NOT_FOUND, "Method not found", {"reason": "policy_unknown_method"}, status=404
        )

    # ------------------------------------------------------------------ the decision

    async def decide(self, ctx: RequestContext, flow: Flow | None) -> Verdict:
        """Decide one 2026-07-28 request (``ctx.rpc``; ``flow``: its MRTR flow, for a call). Raises
        :class:`RpcError` for a denial, and what the single-use store raises for a spent state;
        otherwise says whether the params changed (the gateway's answer removed) and, when the
        gateway itself asks (the approval question), the InputRequiredResult to seal and answer with."""
        assert ctx.rpc is not None
        method = ctx.rpc.method
        uid = ctx.request_uid
        if method not in CALL_METHODS:
            if self.deny_unknown and method not in MODERN_REQUESTS:
                raise self._deny_unknown(method, uid)
            return GO_ON
        assert flow is not None  # every call (an MRTR method) has a flow
        params = ctx.rpc.params
        principal = ctx.principal
        target = params.get("uri" if method == "resources/read" else "name")
        target = target if isinstance(target, str) else None
        name, uri = (None, target) if method == "resources/read" else (target, None)
        if uri is not None:
            # The rules see the URI the server resolves: one spelling only (a CEL rule
            # ``uri.startsWith("file:///secret/")`` must not be stepped over by ``/public/../``).
            canonical = self.canonical_uri(uri)
            if canonical != uri:
                self._count(method, "not_canonical")
                raise not_canonical(uri, canonical)

        if self.pins is not None and method == "tools/call" and target is not None:
            if await self._pin_blocked(target):
                raise self._deny(method, target, "pinned", uid, visible=False, message=None)

        grant = await self._grant(principal, method, target)
        decision = self.rules.decide(principal, method, name, uri, params.get("arguments"), grant)
        if decision.action == DENY:
            # Listed (some call to it could pass) but not with these arguments, the default
            # included: say so; not listed: what a target that does not exist gets.
            visible = self.rules.visible(principal, method, name, uri, grant=grant)
            raise self._deny(
                method, target, decision.label, uid, visible=visible, message=decision.message
            )

        responses = params.get("inputResponses")
        if flow.gateway_asked:
            # The retry answers the gateway's own question (or the question is moot now).
            if self.spend_approval is not None and flow.state_id is not None:
                await self.spend_approval(flow.state_id, flow.expires)
            if decision.action == APPROVE:
                outcome = ap.read_answer(responses)
                if outcome == ap.MISSING:
                    return Verdict(question=self._ask(method, target, params, decision))
                if outcome != ap.APPROVED:
                    self._count(method, f"approval_{outcome}")
                    event(
                        logging.INFO,
                        "approval not given",
                        route=self.route,
                        method=method,
                        target=target,
                        outcome=outcome,
                        rule=decision.label,
                        request_uid=uid,
                    )
                    raise ap.approval_refused(method, target, outcome)
                flow.grant_approval()
                self._count(method, "approved")
                event(
                    logging.INFO,
                    "approval given",
                    route=self.route,
                    method=method,
                    target=target,
                    rule=decision.label,
                    request_uid=uid,
                )
            else:
                self._count(method, ALLOW)
            return _REWRITTEN if self._without_approval_answer(params, force=True) else GO_ON

        if decision.action == APPROVE and not flow.approved:
            if flow.round > 0:
                # A round of the upstream's, in a flow that was never approved: rules or claims
                # changed since it started. It cannot be asked for in the middle.
                self._count(method, "approval_restart")
                raise ap.approval_restart(method, target)
            if not ap.can_ask(flow.declared):
                self._count(method, "approval_needs_capability")
                raise ap.approval_needs_form(method, target)
            return Verdict(question=self._ask(method, target, params, decision))

        if flow.approved and self.spend_approval is not None and flow.state_id is not None:
            await self.spend_approval(
                flow.state_id, flow.expires
            )  # an approved call's rounds run once each
        self._count(method, ALLOW if decision.action == ALLOW else "approved_round")
        if (
            isinstance(responses, dict)
            and ap.APPROVAL_KEY in responses
            and ap.APPROVAL_KEY not in flow.issued
        ):
            return _REWRITTEN if self._without_approval_answer(params, force=False) else GO_ON
        return GO_ON

    async def _grant(self, principal: Any, method: str, target: str | None) -> bool | None:
        """Whether the caller holds its grant for the member serving the call, when a rule
        reads ``grant`` (False otherwise; None when the store cannot tell)."""
        if not self.rules.reads_grant or self.grant_lookup is None or principal is None:
            return False
        member, _ = self.rules.member_of(method, target or "")
        return await self.grant_lookup(principal.id, member)

    async def grants_for(
        self, principal: Any, list_method: str, result: dict[str, Any]
    ) -> dict[str, bool | None] | None:
        """The caller's grants for each member a list's entries come from (rules reading
        ``grant``), looked up once per member."""
        if not self.rules.reads_grant or self.grant_lookup is None or principal is None:
            return None
        field, call_method, key = LIST_METHODS[list_method]
        members = set()
        for entry in result.get(field) or ():
            target = entry.get(key) if isinstance(entry, dict) else None
            if isinstance(target, str):
                members.add(self.rules.member_of(call_method, target)[0])
        return {member: await self.grant_lookup(principal.id, member) for member in members}

    def _ask(
        self, method: str, target: str | None, params: dict[str, Any], decision: Decision
    ) -> dict[str, Any]:
        settings = self.config.approval
        try:
            question = ap.approval_question(
                method,
                target,
                params.get("arguments"),
                decision.message,
                max_chars=settings.max_message_chars,
                too_long=settings.too_long,
            )
        except RpcError:
            self._count(method, "approval_too_long")
            event(
                logging.INFO,
                "approval not asked: the call is too long to show",
                route=self.route,
                method=method,
                target=target,
                rule=decision.label,
            )
            raise
        self._count(method, "approval_asked")
        return question

    @staticmethod
    def _without_approval_answer(params: dict[str, Any], *, force: bool) -> bool:
        """Remove the gateway's answer from the request (the upstream never sees it); True when
        the params changed."""
        responses = params.get("inputResponses")
        if isinstance(responses, dict) and ap.APPROVAL_KEY in responses:
            del responses[ap.APPROVAL_KEY]
            if not responses:
                del params["inputResponses"]
            return True
        if force and "inputResponses" in params and not responses:
            del params["inputResponses"]
            return True
        return False

    async def _pin_blocked(self, tool: str) -> bool:
        assert self.pins is not None
        try:
            return await self.pins.blocked(tool)
        except PinStoreUnavailable:
            self.metrics.store_unavailable.labels(self.route).inc()
            return False


__all__ = ["ALLOW", "APPROVE", "DENY", "RoutePolicy"]
