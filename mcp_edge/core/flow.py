"""The MRTR flow of one request, as the gateway runs it: open a retry, seal an answer, ask a
question of its own. Sans-I/O: a :class:`Flow` is built from the request's params and works on
dicts; the key ring and the settings come in :class:`FlowRules` (built once per route), the time
as ``now`` arguments.

A request of an MRTR method (``tools/call``, ``resources/read``, ``prompts/get``) has a flow:

* :meth:`Flow.open` reads its ``requestState``, if any: a state the gateway sealed, unexpired,
  for this audience, principal, method, target and arguments, within the round limit (else
  :class:`~mcp_edge.core.seal.StateRejected`). The params then carry the upstream's own state in
  its place (or none), and the flow knows the round, the state's id and expiry (single-use
  stores and rate limits key on them), the endpoint that answered it (affinity), and whether
  the round was the gateway's own question and the call was approved;
* :meth:`Flow.seal` turns an upstream InputRequiredResult into what the client gets: checked
  against the MRTR rules and this request's declared capabilities, sealed as the next round;
* :meth:`Flow.ask` seals the gateway's own question (a policy's approval) as a round of the flow;
* :meth:`Flow.grant_approval` records that the policy's approval was given: every later round of
  the flow carries it (claim ``a``), so it is not asked again.

The seal's format and claims: ``mcp_edge/core/README.md`` and :mod:`mcp_edge.core.seal`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_edge.core import envelope, mrtr
from mcp_edge.core.digest import request_digest
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.seal import (
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

#: Largest upstream ``requestState`` the gateway will carry inside its own (the sealed envelope
#: grows by a third in base64 and must stay under the size ``open_state`` accepts).
MAX_UPSTREAM_STATE_CHARS = 128 * 1024


@dataclass(frozen=True, slots=True)
class FlowRules:
    """A route's MRTR settings, built once at start."""

    ring: KeyRing
    #: What states are bound to: this gateway's id and the route (``<gateway id>/<route>``).
    audience: str
    ttl_seconds: int = 600
    leeway_seconds: int = 5
    max_rounds: int = 16
    #: Refuse ``inputResponses`` that come without a ``requestState``.
    strict: bool = False


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a policy decided for a request that may go on: whether it changed the request's params
    (it removed the gateway's own answer, which the upstream never sees), and the question the
    gateway asks instead of forwarding, if any."""

    rewritten: bool = False
    question: dict[str, Any] | None = None


#: The request goes on as it is.
GO_ON = Verdict()


class Flow:
    """One MRTR-method request's flow (see the module docstring). Its binding (the digest costs a
    canonical JSON encoding) is computed only when a state is opened or sealed."""

    __slots__ = (
        "_binding",
        "approved",
        "declared",
        "expires",
        "gateway_asked",
        "issued",
        "method",
        "params",
        "pinned_endpoint",
        "principal_id",
        "round",
        "rules",
        "state_id",
    )

    def __init__(
        self, rules: FlowRules, *, principal_id: str, method: str, params: dict[str, Any]
    ) -> None:
        self.rules = rules
        self.principal_id = principal_id
        self.method = method
        self.params = params
        #: The client capabilities this request declared (what its rounds may ask for).
        self.declared: dict[str, Any] = envelope.client_capabilities(params)
        #: The round the verified state closed (0: a first request).
        self.round = 0
        #: The verified state's random id and expiry (None / 0: a first request).
        self.state_id: str | None = None
        self.expires = 0
        #: The upstream endpoint that answered the round before (sealed; affinity).
        self.pinned_endpoint: str | None = None
        #: The policy's approval was granted in this flow.
        self.approved = False
        #: The verified round was the gateway's own question, and the inputRequests keys it issued.
        self.gateway_asked = False
        self.issued: list[str] = []
        self._binding: Binding | None = None

    @classmethod
    def open(
        cls, rules: FlowRules, *, principal_id: str, method: str, params: dict[str, Any], now: float
    ) -> Flow:
        """The flow of a request of an MRTR method. A retry's ``requestState`` is verified and, in
        ``params``, replaced by the upstream's own state (or removed when it sent none). Raises
        :class:`StateRejected`."""
        flow = cls(rules, principal_id=principal_id, method=method, params=params)
        if "requestState" in params:
            claims, key = open_state(
                rules.ring, params["requestState"], now=now, leeway=rules.leeway_seconds
            )
            verify_binding(claims, key, flow.binding, max_rounds=rules.max_rounds)
            flow.round, flow.state_id, flow.expires = claims.r, claims.j, claims.exp
            flow.approved, flow.gateway_asked, flow.issued = claims.a, claims.g, claims.k
            flow.pinned_endpoint = claims.e
            if claims.s is None:
                del params["requestState"]
            else:
                params["requestState"] = claims.s
        elif "inputResponses" in params and rules.strict:
            raise StateRejected("missing")
        return flow

    @property
    def retry(self) -> bool:
        """The request carried a state that verified (its params were rewritten)."""
        return self.state_id is not None

    @property
    def binding(self) -> Binding:
        if self._binding is None:
            self._binding = Binding(
                audience=self.rules.audience,
                principal_id=self.principal_id,
                method=self.method,
                target=envelope.target_of(self.method, self.params),
                digest=b64u_encode(request_digest(self.method, self.params)),
            )
        return self._binding

    def grant_approval(self) -> None:
        """The policy's approval was given in this flow: its later rounds carry it."""
        self.approved = True

    def seal(self, result: dict[str, Any], *, endpoint: str | None, now: float) -> dict[str, Any]:
        """The client's copy of an upstream InputRequiredResult: checked against the MRTR rules and
        the declared capabilities, its ``requestState`` the gateway's sealed state (carrying the
        upstream's). Raises :class:`RpcError` (``-32603`` violations, ``-32021``)."""
        mrtr.check_input_required(result, self.declared)
        upstream_state = result.get("requestState")
        if upstream_state is not None and len(upstream_state) > MAX_UPSTREAM_STATE_CHARS:
            raise state_too_large()
        round_number = self.round + 1
        if round_number > self.rules.max_rounds:
            # The retry was valid and the upstream ran it; it is the new round it asks for that
            # the route does not allow.
            raise RpcError(
                INTERNAL_ERROR,
                f"The upstream asked for more input rounds than this route allows ({self.rules.max_rounds})",
                {"reason": "rounds"},
            )
        requests = result.get("inputRequests") or {}
        claims = new_claims(
            self.rules.ring,
            self.binding,
            now=now,
            ttl=self.rules.ttl_seconds,
            input_keys=list(requests.keys()),
            round_number=round_number,
            upstream_state=upstream_state,
            endpoint=endpoint,
            approved=self.approved,
        )
        token = seal(self.rules.ring, claims)
        if len(token) > MAX_TOKEN_CHARS:  # it would not be accepted back on the retry
            raise state_too_large()
        sealed = dict(result)
        sealed["requestState"] = token
        return sealed

    def ask(self, question: dict[str, Any], *, now: float) -> dict[str, Any]:
        """The gateway's own InputRequiredResult (a policy's approval question), sealed like any round
        but marked as the gateway's: its retry never carries upstream state, and goes to any
        endpoint. Raises :class:`RpcError` past the round limit."""
        round_number = self.round + 1
        if round_number > self.rules.max_rounds:
            raise RpcError(
                INTERNAL_ERROR,
                f"More input rounds than this route allows ({self.rules.max_rounds})",
                {"reason": "rounds"},
            )
        claims = new_claims(
            self.rules.ring,
            self.binding,
            now=now,
            ttl=self.rules.ttl_seconds,
            input_keys=list(question.get("inputRequests") or {}),
            round_number=round_number,
            upstream_state=None,
            gateway_round=True,
        )
        return {**question, "requestState": seal(self.rules.ring, claims)}


def state_too_large() -> RpcError:
    return RpcError(
        INTERNAL_ERROR,
        f"Upstream requestState is too large to carry (limit {MAX_UPSTREAM_STATE_CHARS} characters)",
        {"violation": "state_too_large"},
    )
