"""mcp_edge.core.flow: the MRTR flow of one request, as pure functions of dicts, keys and a clock."""

from __future__ import annotations

import copy

import pytest

from mcp_edge.core.errors import RpcError
from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS, Flow, FlowRules
from mcp_edge.core.seal import KeyRing, StateKey, StateRejected, open_state

RING = KeyRing([StateKey.from_secret(b"f" * 32)])
RULES = FlowRules(ring=RING, audience="gw/route", ttl_seconds=60, leeway_seconds=5, max_rounds=3)
ALICE, BOB = '["jwt-sub","iss","alice"]', '["jwt-sub","iss","bob"]'
ELICIT = {"elicitation": {"form": {}}}
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": ELICIT,
}
QUESTION = {
    "resultType": "input_required",
    "inputRequests": {
        "size": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "How many?",
                "requestedSchema": {"type": "object"},
            },
        }
    },
}


def call(**extra) -> dict:
    return {"name": "book", "arguments": {"date": "2026-12-24"}, "_meta": dict(META), **extra}


def first_round(
    now: float = 1000.0, *, upstream_state: str | None = "upstream-s", principal: str = ALICE
) -> str:
    """The sealed state the client gets for the first round of a call."""
    flow = Flow.open(RULES, principal_id=principal, method="tools/call", params=call(), now=now)
    result = dict(
        QUESTION, **({"requestState": upstream_state} if upstream_state is not None else {})
    )
    return flow.seal(result, endpoint="http://up-1/mcp", now=now)["requestState"]


def test_a_first_request_is_round_zero_and_its_params_stay_as_they_are():
    params = call()
    before = copy.deepcopy(params)
    flow = Flow.open(RULES, principal_id=ALICE, method="tools/call", params=params, now=1000)
    assert (flow.round, flow.state_id, flow.retry, flow.approved, flow.gateway_asked) == (
        0,
        None,
        False,
        False,
        False,
    )
    assert flow.declared == ELICIT and params == before


def test_a_sealed_round_opens_on_the_retry_with_the_upstreams_state_in_place_of_the_gateways():
    token = first_round()
    assert token.startswith("mcpe1.") and "upstream-s" not in token
    params = call(
        inputResponses={"size": {"action": "accept", "content": {"n": 2}}}, requestState=token
    )
    flow = Flow.open(RULES, principal_id=ALICE, method="tools/call", params=params, now=1010)
    assert flow.retry and flow.round == 1 and flow.pinned_endpoint == "http://up-1/mcp"
    assert flow.state_id is not None and flow.expires == 1060
    assert params["requestState"] == "upstream-s" and "inputResponses" in params


def test_a_round_without_upstream_state_leaves_none_on_the_retry():
    params = call(inputResponses={}, requestState=first_round(upstream_state=None))
    Flow.open(RULES, principal_id=ALICE, method="tools/call", params=params, now=1010)
    assert "requestState" not in params


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"principal": BOB}, "principal"),
        ({"arguments": {"date": "2026-12-31"}}, "binding"),
        ({"method": "prompts/get"}, "binding"),
        ({"now": 1000 + 60 + 6}, "expired"),
        ({"token": "mcpe1.x.AAAA"}, "integrity"),
        ({"token": "not-a-state"}, "malformed"),
    ],
)
def test_a_retry_that_does_not_match_its_state_is_rejected(change, reason):
    params = call(requestState=change.get("token", first_round()))
    if "arguments" in change:
        params["arguments"] = change["arguments"]
    with pytest.raises(StateRejected) as info:
        Flow.open(
            RULES,
            principal_id=change.get("principal", ALICE),
            method=change.get("method", "tools/call"),
            params=params,
            now=change.get("now", 1010),
        )
    assert info.value.reason == reason


def test_an_audience_of_another_route_is_a_binding_failure():
    other = FlowRules(ring=RING, audience="gw/other", ttl_seconds=60, max_rounds=3)
    with pytest.raises(StateRejected) as info:
        Flow.open(
            other,
            principal_id=ALICE,
            method="tools/call",
            params=call(requestState=first_round()),
            now=1010,
        )
    assert info.value.reason == "binding"


def test_strict_rules_refuse_answers_without_a_state():
    strict = FlowRules(ring=RING, audience="gw/route", strict=True)
    with pytest.raises(StateRejected) as info:
        Flow.open(
            strict,
            principal_id=ALICE,
            method="tools/call",
            params=call(inputResponses={"a": {}}),
            now=1000,
        )
    assert info.value.reason == "missing"
    Flow.open(
        RULES,
        principal_id=ALICE,
        method="tools/call",
        params=call(inputResponses={"a": {}}),
        now=1000,
    )


def test_sealing_checks_the_mrtr_rules_and_the_declared_capabilities():
    flow = Flow.open(
        RULES,
        principal_id=ALICE,
        method="tools/call",
        params=call(_meta={**META, "io.modelcontextprotocol/clientCapabilities": {}}),
        now=1000,
    )
    with pytest.raises(RpcError) as info:
        flow.seal(dict(QUESTION), endpoint=None, now=1000)
    assert info.value.code == -32021 and info.value.data == {"requiredCapabilities": ELICIT}
    with pytest.raises(RpcError) as info:
        flow.seal({"resultType": "input_required"}, endpoint=None, now=1000)
    assert info.value.code == -32603 and info.value.data == {"violation": "empty"}


def test_rounds_are_bounded_and_an_oversized_upstream_state_is_refused():
    token = first_round()
    for n in (2, 3):
        flow = Flow.open(
            RULES,
            principal_id=ALICE,
            method="tools/call",
            params=call(requestState=token),
            now=1000 + n,
        )
        assert flow.round == n - 1
        token = flow.seal(dict(QUESTION), endpoint=None, now=1000 + n)["requestState"]
    flow = Flow.open(
        RULES, principal_id=ALICE, method="tools/call", params=call(requestState=token), now=1005
    )
    assert flow.round == 3
    with pytest.raises(RpcError) as info:
        flow.seal(dict(QUESTION), endpoint=None, now=1005)
    assert info.value.data == {"reason": "rounds"}
    fresh = Flow.open(RULES, principal_id=ALICE, method="tools/call", params=call(), now=1000)
    with pytest.raises(RpcError) as info:
        fresh.seal(
            {**QUESTION, "requestState": "s" * (MAX_UPSTREAM_STATE_CHARS + 1)},
            endpoint=None,
            now=1000,
        )
    assert info.value.data == {"violation": "state_too_large"}


def test_the_gateways_own_question_is_a_round_marked_as_its_own_and_approval_carries_on():
    flow = Flow.open(RULES, principal_id=ALICE, method="tools/call", params=call(), now=1000)
    asked = flow.ask(
        {"resultType": "input_required", "inputRequests": {"mcp-edge/approval": {}}}, now=1000
    )
    claims, _ = open_state(RING, asked["requestState"], now=1000)
    assert (
        claims.g
        and not claims.a
        and claims.s is None
        and claims.e is None
        and claims.k == ["mcp-edge/approval"]
    )
    retry = Flow.open(
        RULES,
        principal_id=ALICE,
        method="tools/call",
        params=call(requestState=asked["requestState"]),
        now=1001,
    )
    assert retry.gateway_asked and retry.issued == ["mcp-edge/approval"] and not retry.approved
    retry.grant_approval()
    upstream_round = retry.seal(dict(QUESTION), endpoint="http://up-2/mcp", now=1001)
    claims, _ = open_state(RING, upstream_round["requestState"], now=1001)
    assert claims.a and not claims.g and claims.r == 2 and claims.e == "http://up-2/mcp"
    last = Flow.open(
        RULES,
        principal_id=ALICE,
        method="tools/call",
        params=call(requestState=upstream_round["requestState"]),
        now=1002,
    )
    assert last.approved and not last.gateway_asked


def test_the_gateways_question_is_bounded_by_the_rounds_too():
    token = first_round()
    for n in (2, 3):
        flow = Flow.open(
            RULES,
            principal_id=ALICE,
            method="tools/call",
            params=call(requestState=token),
            now=1000 + n,
        )
        token = flow.seal(dict(QUESTION), endpoint=None, now=1000 + n)["requestState"]
    flow = Flow.open(
        RULES, principal_id=ALICE, method="tools/call", params=call(requestState=token), now=1005
    )
    with pytest.raises(RpcError) as info:
        flow.ask(dict(QUESTION), now=1005)
    assert info.value.data == {"reason": "rounds"}
