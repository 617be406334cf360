"""What a policy rule sees: a call's CEL context holds what the former builder put in it for every
variable some rule reads, and a reused context never carries another caller's or call's values."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import cel
import pytest

from mcp_edge.auth.base import ANONYMOUS, Principal
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.rules import VARIABLES, RouteRules

ALICE = Principal(
    id="iss alice",
    scopes=frozenset({"mcp:write", "mcp:tools"}),
    display="alice",
    claims=MappingProxyType(
        {
            "sub": "alice",
            "groups": ("readers", "staff"),
            "n": 2**63,
            "nested": MappingProxyType({"a": [1, {"b": (2, 3)}]}),
        }
    ),
)
BOB = Principal(
    id="iss bob", display="bob", claims=MappingProxyType({"sub": "bob", "groups": ["admins"]})
)
PRINCIPALS = [ALICE, BOB, ANONYMOUS, None]
CALLS = [
    (
        "tools/call",
        "get_weather",
        None,
        {"city": "Paris", "days": 3, "deep": {"x": [1, (2, {"y": None})]}},
    ),
    ("tools/call", "small", None, {}),
    ("tools/call", None, None, None),
    ("prompts/get", "greet", None, ["not", "a", "mapping"]),
    ("resources/read", None, "file:///a", {"k": 1.5}),
]


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def former_context(
    principal: Principal | None, method: str, name: str | None, uri: str | None, arguments: Any
) -> dict[str, Any]:
    """Every variable, built as the gateway built them for every call before."""
    view = (
        {"id": "", "subject": "", "scopes": []}
        if principal is None
        else {"id": principal.id, "subject": principal.display, "scopes": sorted(principal.scopes)}
    )
    return {
        "claims": _plain(principal.claims) if principal is not None else {},
        "principal": view,
        "method": method,
        "name": name or "",
        "uri": uri or "",
        "arguments": _plain(arguments) if isinstance(arguments, Mapping) else {},
    }


def rules(*whens: str) -> RouteRules:
    return RouteRules(
        RoutePolicyConfig.model_validate({"rules": [{"when": w, "action": "deny"} for w in whens]})
    )


READS_ALL = (
    'claims.sub == "x"',
    'principal.id == "x"',
    'method == "x"',
    'name == "x"',
    'uri == "x"',
    "has(arguments.x)",
)


@pytest.mark.parametrize(
    "whens, reads",
    [
        (READS_ALL, set(VARIABLES)),
        (('name == "tool1" && principal.id == "nobody"',), {"name", "principal"}),
        (
            ('"readers" in claims.groups && method == "tools/call"', 'uri.startsWith("file:")'),
            {"claims", "method", "uri"},
        ),
        (('principal.scopes.exists(s, s == "mcp:write")',), {"principal"}),
    ],
)
def test_the_context_holds_what_the_former_builder_did_for_every_variable_read(whens, reads):
    r = rules(*whens)
    for _ in range(2):  # built, then reused
        for principal in PRINCIPALS:
            for call in CALLS:
                expected = {k: v for k, v in former_context(principal, *call).items() if k in reads}
                assert r.context(principal, *call).variables == expected, (principal, call)


def test_every_rule_decides_as_with_the_former_context():
    whens = [
        '"readers" in claims.groups',
        'principal.scopes.exists(s, s == "mcp:write")',
        'name == "small"',
        "claims.n > 5",
        'uri == "file:///a" && method == "resources/read"',
        "has(arguments.days)",
    ]
    for reads_arguments in (False, True):
        r = rules(*(whens if reads_arguments else whens[:-1]))
        for _ in range(2):
            for principal in PRINCIPALS:
                for call in CALLS:
                    ctx, former = (
                        r.context(principal, *call),
                        cel.Context(former_context(principal, *call)),
                    )
                    for rule in r.rules:
                        assert _outcome(rule.program, ctx) == _outcome(rule.program, former)


def _outcome(program: Any, ctx: cel.Context) -> Any:
    try:
        return program.execute(ctx)
    except Exception as exc:  # noqa: BLE001 - a missing claim: the same error both ways
        return type(exc)


def test_a_reused_context_is_one_of_the_same_caller_and_call():
    r = rules('"admins" in claims.groups', 'name == "small"')
    assert r.context(BOB, "tools/call", "small", None, {"a": 1}) is r.context(
        BOB, "tools/call", "small", None, {}
    )
    assert r.context(BOB, "tools/call", "small", None, {}) is not r.context(
        BOB, "tools/call", "big", None, {}
    )
    assert r.context(BOB, "tools/call", "small", None, {}) is not r.context(
        ALICE, "tools/call", "small", None, {}
    )
    # The same caller with other claims (a new token): its own context, its own decision.
    demoted = Principal(
        id=BOB.id, display=BOB.display, claims=MappingProxyType({"sub": "bob", "groups": []})
    )
    assert demoted == BOB  # claims are no part of a principal's equality
    assert r.decide(BOB, "tools/call", "get", None, {}).action == "deny"
    assert r.decide(demoted, "tools/call", "get", None, {}).action == "allow"
    assert r.decide(BOB, "tools/call", "get", None, {}).action == "deny"


def test_the_same_caller_with_other_scopes_gets_its_own_context():
    r = rules('principal.scopes.exists(s, s == "mcp:write")')
    reader = Principal(id=ALICE.id, display="alice", scopes=frozenset({"mcp:tools"}))
    writer = Principal(id=ALICE.id, display="alice", scopes=frozenset({"mcp:tools", "mcp:write"}))
    assert r.decide(reader, "tools/call", "t", None, {}).action == "allow"
    assert r.decide(writer, "tools/call", "t", None, {}).action == "deny"
    assert r.decide(reader, "tools/call", "t", None, {}).action == "allow"


def test_rules_reading_arguments_get_each_calls_own():
    r = rules("arguments.days > 2")
    assert r.decide(ALICE, "tools/call", "w", None, {"days": 3}).action == "deny"
    assert r.decide(ALICE, "tools/call", "w", None, {"days": 1}).action == "allow"
    assert r.context(ALICE, "tools/call", "w", None, {"days": 1}).variables == {
        "arguments": {"days": 1}
    }


def test_the_kept_contexts_are_bounded(monkeypatch):
    import mcp_edge.policy.rules as module

    monkeypatch.setattr(module, "MAX_CACHED_CONTEXTS", 8)
    r = rules('name == "x"')
    for i in range(100):
        assert r.context(BOB, "tools/call", f"t{i}", None, {}).variables == {"name": f"t{i}"}
        assert len(r._contexts) <= 8
