"""Policy sees whether the caller holds its own grant (CEL ``grant``): looked up only when a
rule reads it, for the member serving the call (or each member a list's entries come from),
``false`` for members without consent, and unknown (the rule fails closed) when the grant
store cannot tell. Policy never imports the identity package: the wiring hands it the lookup."""

from __future__ import annotations

import time
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Principal
from mcp_edge.core.errors import RpcError
from mcp_edge.core.flow import Flow, FlowRules
from mcp_edge.core.jsonrpc import Message
from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.edge.context import RequestContext
from mcp_edge.identity.consent_wiring import ConsentWiring
from mcp_edge.identity.grants import Grant
from mcp_edge.identity.vault import MemoryBackend, SecretVault, VaultUnavailable
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.hook import RoutePolicy
from mcp_edge.policy.metrics import PolicyMetrics
from mcp_edge.policy.rules import RouteRules
from mcp_edge.server.config import GatewayConfig

RING = KeyRing([StateKey.from_secret(b"\x09" * 32)])
ALICE = Principal(id='["jwt-sub","https://idp.example","alice"]', display="alice")
ISSUER = "https://idp.example"


def gateway(tmp_path: Any) -> GatewayConfig:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    oauth = {
        "oauth": {
            "issuer": "https://as.example",
            "client": {"client_id": "gw", "secret_file": str(secret)},
        }
    }
    return GatewayConfig.model_validate(
        {
            "gateway": {"public_url": "https://edge.example"},
            "auth": {"mode": "jwt", "jwt": {"issuer": ISSUER, "jwks_url": f"{ISSUER}/jwks"}},
            "consent": {
                "sign_in": {"issuer": ISSUER, "client": {"client_id": "s", "secret_file": str(secret)}}
            },
            "routes": [
                {
                    "name": "fed",
                    "path": "/fed",
                    "legacy_clients": "deny",
                    "members": [
                        {"name": "drive", "upstream": "https://drive.example/mcp", "era": "modern",
                         "upstream_auth": oauth},
                        {"name": "wiki", "upstream": "https://wiki.example/mcp", "era": "modern"},
                    ],
                    "policy": {
                        "rules": [
                            {"when": 'member == "drive" && !grant', "action": "deny",
                             "message": "grant the drive first"},
                        ]
                    },
                }
            ],
        }
    )  # fmt: skip


class DownVault(SecretVault):
    async def get(self, slot: Any) -> bytes | None:
        raise VaultUnavailable("down")


def wiring(config: GatewayConfig, vault: SecretVault) -> ConsentWiring:
    consent = ConsentWiring(config, RING, CollectorRegistry(), vault)
    route = config.routes[0]
    assert route.members is not None
    consent.member("fed/drive", "drive", route.members[0].upstream_auth.oauth)  # type: ignore[arg-type]
    return consent


def policy(config: GatewayConfig, consent: ConsentWiring) -> RoutePolicy:
    route = config.routes[0]
    p = RoutePolicy(route="fed", config=route.policy, metrics=PolicyMetrics(CollectorRegistry()))
    p.rules.resolve = lambda method, target: tuple(target.split("__", 1))  # type: ignore[assignment]
    p.grant_lookup = consent.grant_lookup("fed", federated=True)
    return p


def call(name: str) -> tuple[RequestContext, Flow]:
    params = {"name": name, "arguments": {}}
    raw = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    ctx = RequestContext(principal=ALICE, rpc=Message(raw), rpc_method="tools/call", modern=True)
    flow = Flow(
        FlowRules(ring=RING, audience="e/fed"),
        principal_id=ALICE.id,
        method="tools/call",
        params=params,
    )
    return ctx, flow


async def test_a_rule_reads_whether_the_caller_holds_the_members_grant(tmp_path):
    config = gateway(tmp_path)
    vault = SecretVault(RING, MemoryBackend())
    consent = wiring(config, vault)
    p = policy(config, consent)
    ctx, flow = call("drive__open")
    with pytest.raises(RpcError) as denied:
        await p.decide(ctx, flow)
    # Denied whatever the arguments: the tool is hidden from this caller, and a call to it gets
    # what an unknown tool gets (a denial reveals nothing a list hides).
    assert denied.value.code == -32602 and denied.value.message == "Unknown tool: drive__open"
    # A member without consent: no grant to have, the rule does not name it anyway.
    await p.decide(*call("wiki__read"))
    now = time.time()
    await consent.grants.put(ALICE.id, Grant("fed/drive", "t", None, now + 600, "", now, now))
    await p.decide(*call("drive__open"))  # allowed now
    await consent.aclose()


async def test_a_list_hides_what_the_rule_denies_without_the_grant(tmp_path):
    config = gateway(tmp_path)
    vault = SecretVault(RING, MemoryBackend())
    consent = wiring(config, vault)
    p = policy(config, consent)
    result = {"tools": [{"name": "drive__open"}, {"name": "wiki__read"}]}
    grants = await p.grants_for(ALICE, "tools/list", result)
    assert grants == {"drive": False, "wiki": False}
    assert p.rules.filter_result(ALICE, "tools/list", result, grants) == 1
    assert [t["name"] for t in result["tools"]] == ["wiki__read"]
    await consent.aclose()


async def test_an_unknown_grant_fails_the_rule_closed(tmp_path):
    config = gateway(tmp_path)
    consent = wiring(config, DownVault(RING, MemoryBackend()))
    lookup = consent.grant_lookup("fed", federated=True)
    assert await lookup(ALICE.id, "drive") is None
    assert await lookup(ALICE.id, "wiki") is False  # no consent there: nothing to look up
    await consent.aclose()
    rules = RouteRules(RoutePolicyConfig.model_validate(config.routes[0].policy.model_dump()))
    rules.resolve = lambda method, target: tuple(target.split("__", 1))  # type: ignore[assignment]
    assert rules.decide(ALICE, "tools/call", "drive__open", None, {}, None).action == "deny"
    assert rules.decide(ALICE, "tools/call", "drive__open", None, {}, True).action == "allow"


def test_a_route_whose_rules_do_not_read_it_never_looks(tmp_path):
    rules = RouteRules(
        RoutePolicyConfig.model_validate({"rules": [{"when": "true", "action": "allow"}]})
    )
    assert rules.reads_grant is False
    rules = RouteRules(
        RoutePolicyConfig.model_validate({"rules": [{"when": "grant", "action": "allow"}]})
    )
    assert rules.reads_grant is True
