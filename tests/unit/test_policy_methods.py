"""A route's policy and the methods it does not know (``policy.unknown_methods``), no I/O."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Principal
from mcp_edge.core.errors import RpcError
from mcp_edge.core.flow import Flow, FlowRules
from mcp_edge.core.jsonrpc import Message, dumps
from mcp_edge.core.methods import MODERN_REQUESTS
from mcp_edge.core.mrtr import MRTR_METHODS
from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.edge.context import RequestContext
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.hook import RoutePolicy
from mcp_edge.policy.metrics import PolicyMetrics

ALICE = Principal(id='["jwt-sub","iss","alice"]', display="alice")
RULES = {"default": "deny", "rules": [{"when": 'name == "get_weather"', "action": "allow"}]}


def hook(doc: dict) -> RoutePolicy:
    return RoutePolicy(
        route="r",
        config=RoutePolicyConfig.model_validate(doc),
        metrics=PolicyMetrics(CollectorRegistry()),
    )


RULES_OF_FLOWS = FlowRules(ring=KeyRing([StateKey.from_secret(b"k" * 32)]), audience="gw/r")


async def decide(policy: RoutePolicy, method: str, **params) -> tuple[bytes, object]:
    """The policy's decision on a first request, as (the body that goes on, the gateway's question)."""
    ctx = RequestContext(request_uid="u", principal=ALICE, body=b"body")
    ctx.rpc = Message({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    flow = (
        Flow(RULES_OF_FLOWS, principal_id=ALICE.id, method=method, params=ctx.rpc.params)
        if method in MRTR_METHODS
        else None
    )
    verdict = await policy.decide(ctx, flow)
    return (dumps(ctx.rpc.raw) if verdict.rewritten else ctx.body), verdict.question


@pytest.mark.parametrize("method", ["vendor/export", "initialize", "logging/setLevel", "ping", "x"])
async def test_methods_the_policy_does_not_know_are_denied_by_default(method):
    policy = hook(RULES)
    with pytest.raises(RpcError) as info:
        await decide(policy, method)
    err = info.value
    assert (err.code, err.http_status, err.data) == (
        -32601,
        404,
        {"reason": "policy_unknown_method"},
    )
    assert policy.metrics.denied.labels("r", "unknown_methods")._value.get() == 1


@pytest.mark.parametrize("method", ["vendor/export", "initialize"])
async def test_unknown_methods_allow_forwards_them_undecided(method):
    assert await decide(hook({**RULES, "unknown_methods": "allow"}), method) == (b"body", None)


@pytest.mark.parametrize(
    "method", sorted(MODERN_REQUESTS - {"tools/call", "prompts/get", "resources/read"})
)
async def test_known_requests_pass_as_before(method):
    assert await decide(hook(RULES), method) == (b"body", None)


async def test_calls_are_still_decided_by_the_rules():
    policy = hook(RULES)
    assert await decide(policy, "tools/call", name="get_weather") == (b"body", None)
    with pytest.raises(RpcError):
        await decide(policy, "tools/call", name="delete_repo")


def test_setting_is_validated_and_an_explicit_deny_enables_the_policy():
    assert RoutePolicyConfig().unknown_methods == "deny" and not RoutePolicyConfig().enabled
    assert RoutePolicyConfig.model_validate({"unknown_methods": "deny"}).enabled
    assert not RoutePolicyConfig.model_validate({"unknown_methods": "allow"}).enabled
    with pytest.raises(ValueError, match="unknown_methods"):
        RoutePolicyConfig.model_validate({"unknown_methods": "maybe"})
