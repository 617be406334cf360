"""Requests rewritten for their member (name, URI, completion refs, the Mcp-Name value) and
URIs in the members' answers rewritten to federated form (read contents, resource links and
embedded resources in tool and prompt results, resource-updated notifications); round trips
over generated namespaces; hostile params and answers never raise."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.federation.names import ItemRules, MemberNames, Namespace, Refused
from mcp_edge.core.federation.parts import Dropped
from mcp_edge.core.federation.rewrite import (
    ROUTED_METHODS,
    NotRouted,
    Routed,
    federate_call_result,
    federate_prompt_result,
    federate_read_result,
    federate_resource_updated,
    route_request,
)
from mcp_edge.core.uri import canonical_uri
from tests.support.federation import json_values, namespaces, uris
from tests.support.fuzz import fuzz_settings

NS = Namespace(
    [
        MemberNames(
            "docs",
            "docs",
            tools=ItemRules(rename={"search": "find"}),
            resources=ItemRules(exclude=("secret://*",)),
        ),
        MemberNames("everything", ""),
    ]
)
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}


# ---------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("method", "params", "member", "sent", "mcp_name"),
    [
        (
            "tools/call",
            {"name": "docs__lookup", "arguments": {"q": 1}, "_meta": META, "requestState": "s"},
            "docs",
            {"name": "lookup", "arguments": {"q": 1}, "_meta": META, "requestState": "s"},
            "lookup",
        ),
        ("tools/call", {"name": "find"}, "docs", {"name": "search"}, "search"),
        ("tools/call", {"name": "echo"}, "everything", {"name": "echo"}, "echo"),
        (
            "prompts/get",
            {"name": "docs__greet", "arguments": {}},
            "docs",
            {"name": "greet", "arguments": {}},
            "greet",
        ),
        ("resources/read", {"uri": "docs+file:///a"}, "docs", {"uri": "file:///a"}, "file:///a"),
        ("resources/read", {"uri": "test://x"}, "everything", {"uri": "test://x"}, "test://x"),
        (
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "docs__greet"},
                "argument": {"name": "a", "value": "b"},
            },
            "docs",
            {
                "ref": {"type": "ref/prompt", "name": "greet"},
                "argument": {"name": "a", "value": "b"},
            },
            None,
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": "docs+file:///{path}"}, "argument": {}},
            "docs",
            {"ref": {"type": "ref/resource", "uri": "file:///{path}"}, "argument": {}},
            None,
        ),
    ],
)
def test_a_request_goes_to_its_member_in_the_members_own_words(
    method: str, params: dict[str, Any], member: str, sent: dict[str, Any], mcp_name: str | None
) -> None:
    before = copy.deepcopy(params)
    routed = route_request(NS, method, params)
    assert isinstance(routed, Routed)
    assert (routed.member, routed.params, routed.mcp_name) == (member, sent, mcp_name)
    # What the client asked for, as the gateway's errors name it: the federated form.
    ref = params.get("ref", params)
    field = "uri" if "uri" in ref else "name"
    assert routed.asked == (field, ref[field])
    assert params == before


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "docs__search"}, NotRouted("unknown", "tool", "docs__search")),
        ("tools/call", {"name": "x" * 300}, NotRouted("unknown", "tool", "x" * 256)),
        ("prompts/get", {"name": "a\x00"}, NotRouted("unknown", "prompt", "a\x00")),
        (
            "resources/read",
            {"uri": "docs+secret://k"},
            NotRouted("unknown", "resource", "docs+secret://k"),
        ),
        ("resources/read", {"uri": "no scheme"}, NotRouted("unknown", "resource", "no scheme")),
        # Not in canonical form: refused, with the spelling to use (the prefix as it is).
        (
            "resources/read",
            {"uri": "docs+file:///a/../secret"},
            NotRouted(
                "not_canonical", "resource", "docs+file:///a/../secret", "docs+file:///secret"
            ),
        ),
        (
            "resources/read",
            {"uri": "FILE:///x"},
            NotRouted("not_canonical", "resource", "FILE:///x", "file:///x"),
        ),
        (
            "resources/read",
            {"uri": "file:///a\\..\\x"},
            NotRouted("not_canonical", "resource", "file:///a\\..\\x", None),
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": "docs+file:///p/../secret/{k}"}},
            NotRouted(
                "not_canonical",
                "resource",
                "docs+file:///p/../secret/{k}",
                "docs+file:///secret/{k}",
            ),
        ),
        ("tools/call", {"name": 5}, NotRouted("invalid_params", "tool", None)),
        ("tools/call", {}, NotRouted("invalid_params", "tool", None)),
        ("resources/read", {"uri": ["x"]}, NotRouted("invalid_params", "resource", None)),
        ("tools/call", None, NotRouted("invalid_params", None, None)),
        ("tools/call", ["name"], NotRouted("invalid_params", None, None)),
        ("completion/complete", {"ref": "docs__greet"}, NotRouted("invalid_params", None, None)),
        (
            "completion/complete",
            {"ref": {"type": "ref/tool", "name": "x"}},
            NotRouted("invalid_params", None, None),
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/prompt"}},
            NotRouted("invalid_params", "prompt", None),
        ),
        (
            "completion/complete",
            {"ref": {"type": "ref/resource", "uri": "docs+secret://{k}"}},
            NotRouted("unknown", "resource", "docs+secret://{k}"),
        ),
    ],
)
def test_what_does_not_route_says_why(method: str, params: Any, expected: NotRouted) -> None:
    assert route_request(Namespace([NS.members[0]]), method, params) == expected


def test_the_unprefixed_member_gets_unknown_names() -> None:
    routed = route_request(NS, "tools/call", {"name": "docs-api__x"})
    assert isinstance(routed, Routed) and routed.member == "everything"


def test_other_methods_are_not_routed_by_name() -> None:
    assert {"tools/call", "prompts/get", "resources/read", "completion/complete"} == ROUTED_METHODS
    with pytest.raises(ValueError):
        route_request(NS, "tools/list", {})


# ---------------------------------------------------------------- answers


def test_read_contents_get_federated_uris() -> None:
    result = {
        "contents": [
            {"uri": "file:///a", "text": "A"},
            {"uri": "secret://k", "text": "hidden"},
            {"uri": "test://b", "blob": "Qg==", "mimeType": "x/y"},
            {"text": "no uri"},
            "odd",
        ],
        "ttlMs": 5,
        "resultType": "complete",
    }
    before = copy.deepcopy(result)
    out, dropped = federate_read_result(NS, "docs", result)
    assert out == {
        "contents": [
            {"uri": "docs+file:///a", "text": "A"},
            {"uri": "docs+test://b", "blob": "Qg==", "mimeType": "x/y"},
            {"text": "no uri"},
            "odd",
        ],
        "ttlMs": 5,
        "resultType": "complete",
    }
    assert dropped == [Dropped("docs", "resource", "secret://k", "filtered")]
    assert result == before


def test_the_unprefixed_members_answers_are_left_as_they_are() -> None:
    result = {"contents": [{"uri": "file:///a", "text": "A"}]}
    out, dropped = federate_read_result(NS, "everything", result)
    assert out is result and dropped == []
    call = {"content": [{"type": "resource_link", "uri": "file:///a", "name": "a"}]}
    assert federate_call_result(NS, "everything", call) == (call, [])


def test_the_unprefixed_member_cannot_hand_out_another_members_uri() -> None:
    result = {
        "contents": [{"uri": "docs+file:///a", "text": "A"}, {"uri": "file:///b", "text": "B"}]
    }
    out, dropped = federate_read_result(NS, "everything", result)
    assert out == {"contents": [{"uri": "file:///b", "text": "B"}]}
    assert dropped == [Dropped("everything", "resource", "docs+file:///a", "collision")]


def test_tool_results_resource_links_and_embedded_resources() -> None:
    result = {
        "content": [
            {"type": "text", "text": "see file:///a"},
            {"type": "resource_link", "uri": "file:///a", "name": "a"},
            {"type": "resource", "resource": {"uri": "test://b", "text": "B"}, "annotations": {}},
            {"type": "resource_link", "uri": "secret://k", "name": "k"},
            {"type": "resource", "resource": {"uri": 5, "text": "bad"}},
            {"type": "resource", "resource": "not an object"},
            {"type": "image", "data": "x", "mimeType": "image/png"},
        ],
        "structuredContent": {"uri": "file:///untouched"},
        "isError": False,
    }
    before = copy.deepcopy(result)
    out, dropped = federate_call_result(NS, "docs", result)
    assert isinstance(out, dict)
    assert out["content"] == [
        {"type": "text", "text": "see file:///a"},
        {"type": "resource_link", "uri": "docs+file:///a", "name": "a"},
        {"type": "resource", "resource": {"uri": "docs+test://b", "text": "B"}, "annotations": {}},
        {"type": "resource", "resource": "not an object"},
        {"type": "image", "data": "x", "mimeType": "image/png"},
    ]
    assert out["structuredContent"] == {"uri": "file:///untouched"}
    assert [(d.name, d.reason) for d in dropped] == [
        ("secret://k", "filtered"),
        (None, "invalid_name"),
    ]
    assert result == before


def test_prompt_messages_single_and_listed_content() -> None:
    result = {
        "description": "d",
        "messages": [
            {"role": "user", "content": {"type": "text", "text": "hi"}},
            {
                "role": "user",
                "content": {"type": "resource", "resource": {"uri": "file:///a", "text": "A"}},
            },
            {
                "role": "user",
                "content": {"type": "resource_link", "uri": "secret://k", "name": "k"},
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "resource_link", "uri": "test://b", "name": "b"},
                    {"type": "resource_link", "uri": "secret://j", "name": "j"},
                ],
            },
            "odd",
        ],
    }
    out, dropped = federate_prompt_result(NS, "docs", result)
    assert isinstance(out, dict)
    assert out["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "hi"}},
        {
            "role": "user",
            "content": {"type": "resource", "resource": {"uri": "docs+file:///a", "text": "A"}},
        },
        {
            "role": "assistant",
            "content": [{"type": "resource_link", "uri": "docs+test://b", "name": "b"}],
        },
        "odd",
    ]
    assert [d.name for d in dropped] == ["secret://k", "secret://j"]


def test_resource_updated_notifications() -> None:
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "file:///a", "_meta": {"io.modelcontextprotocol/subscriptionId": 3}},
    }
    out, dropped = federate_resource_updated(NS, "docs", note)
    assert out == {**note, "params": {**note["params"], "uri": "docs+file:///a"}}
    assert dropped == [] and note["params"]["uri"] == "file:///a"
    hidden = {**note, "params": {"uri": "secret://k"}}
    assert federate_resource_updated(NS, "docs", hidden) == (
        None,
        [Dropped("docs", "resource", "secret://k", "filtered")],
    )
    assert federate_resource_updated(NS, "docs", {**note, "params": None}) == (None, [])
    other = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    assert federate_resource_updated(NS, "docs", other) == (other, [])


def test_shapes_that_are_not_results_pass() -> None:
    for odd in (None, 5, "x", [], {"contents": "x"}, {"content": {"uri": "a:b"}}, {"messages": 3}):
        assert federate_read_result(NS, "docs", odd) == (odd, [])
        assert federate_call_result(NS, "docs", odd) == (odd, [])
        assert federate_prompt_result(NS, "docs", odd) == (odd, [])
    with pytest.raises(KeyError):
        federate_read_result(NS, "ghost", {})


# ---------------------------------------------------------------- properties


@fuzz_settings(100, 5000)
@given(ns=namespaces(), data=st.data())
def test_uris_in_answers_round_trip(ns: Namespace, data: st.DataObject) -> None:
    """Every URI the client is shown routes back to the member that sent it, as the member wrote
    it; every URI left out is one the collision rule refuses; nothing else changes."""
    member = data.draw(st.sampled_from(ns.members)).name
    sent = data.draw(st.lists(uris(ns) | json_values, min_size=1, max_size=6))
    result = {"content": [{"type": "resource_link", "uri": u, "name": "n"} for u in sent]}
    out, dropped = federate_call_result(ns, member, result)
    assert isinstance(out, dict)
    kept = [u for u in sent if not isinstance(ns.admit("resource", member, u), Refused)]
    assert len(out["content"]) == len(kept) and len(dropped) == len(sent) - len(kept)
    for shown, original in zip(out["content"], kept, strict=True):
        found = ns.route_uri(shown["uri"])
        own = canonical_uri(original)  # shown, and routed, in its canonical form
        assert found is not None and (found.member, found.original) == (member, own)
        assert shown["name"] == "n"

    read, _ = federate_read_result(ns, member, {"contents": [{"uri": u} for u in sent]})
    assert isinstance(read, dict)
    assert [ns.route_uri(c["uri"]).original for c in read["contents"]] == [  # type: ignore[union-attr]
        canonical_uri(u) for u in kept
    ]


@fuzz_settings(100, 5000)
@given(ns=namespaces(), data=st.data())
def test_a_routed_request_carries_the_members_own_name(ns: Namespace, data: st.DataObject) -> None:
    member = data.draw(st.sampled_from(ns.members))
    original = data.draw(st.text(max_size=8))
    for method, kind, field in (("tools/call", "tool", "name"), ("prompts/get", "prompt", "name")):
        federated = ns.federate(kind, member.name, original)  # type: ignore[arg-type]
        if federated is None:
            continue
        routed = route_request(ns, method, {field: federated, "arguments": {"a": 1}})
        assert routed == Routed(
            member.name,
            original,
            {field: original, "arguments": {"a": 1}},
            original,
            (field, federated),
        )


@fuzz_settings(150, 5000)
@given(
    method=st.sampled_from(sorted(ROUTED_METHODS)),
    params=json_values | st.dictionaries(st.sampled_from(("name", "uri", "ref")), json_values),
    answer=json_values,
)
def test_hostile_params_and_answers_never_raise(method: str, params: Any, answer: Any) -> None:
    routed = route_request(NS, method, params)
    assert isinstance(routed, (Routed, NotRouted))
    for rewrite in (
        federate_read_result,
        federate_call_result,
        federate_prompt_result,
        federate_resource_updated,
    ):
        rewrite(NS, "docs", answer)
        rewrite(
            NS,
            "docs",
            {"contents": [answer], "content": [answer], "messages": [{"content": answer}]},
        )
