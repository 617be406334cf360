"""Merging the members' list pages: order, renaming, the collision rule's report, missing
members, cache hints, next pages; and properties over generated namespaces and arbitrary
(hostile) pages: nothing raises, every item shown routes back to the member that listed it,
no name is shown twice."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.federation.cursor import MAX_MEMBER_CURSOR_BYTES
from mcp_edge.core.federation.lists import LIST_METHODS, merge_list
from mcp_edge.core.federation.names import ItemRules, MemberNames, Namespace, Target
from mcp_edge.core.federation.parts import META_KEY, Dropped, Missing, MissingMember
from mcp_edge.core.uri import canonical_uri
from tests.support.federation import json_values, names_of, namespaces, route
from tests.support.fuzz import fuzz_settings

NS = Namespace(
    [
        MemberNames("docs", "docs", tools=ItemRules(rename={"search": "find"}, exclude=("x*",))),
        MemberNames("everything", ""),
        MemberNames("mail", "mail"),
    ]
)


def page(
    key: str, *names: Any, ttl: Any = 60_000, scope: Any = "public", **extra: Any
) -> dict[str, Any]:
    field = {
        "tools": "name",
        "prompts": "name",
        "resources": "uri",
        "resourceTemplates": "uriTemplate",
    }[key]
    return {
        key: [{field: n, "description": f"d-{n}"} for n in names],
        "ttlMs": ttl,
        "cacheScope": scope,
        "resultType": "complete",
        **extra,
    }


def names(result: dict[str, Any], key: str = "tools", field: str = "name") -> list[str]:
    return [item[field] for item in result[key]]


def test_members_in_configuration_order_each_in_its_own_order() -> None:
    merged = merge_list(
        NS,
        "tools/list",
        [
            ("docs", page("tools", "b", "search", "a", "xhidden")),
            ("everything", page("tools", "echo", "docs__a", "find", "add")),
            ("mail", page("tools", "send")),
        ],
    )
    assert names(merged.result) == ["docs__b", "find", "docs__a", "echo", "add", "mail__send"]
    assert merged.result["tools"][1] == {"name": "find", "description": "d-search"}
    assert merged.dropped == [
        Dropped("docs", "tool", "xhidden", "filtered"),
        Dropped("everything", "tool", "docs__a", "collision"),
        Dropped("everything", "tool", "find", "collision"),
    ]
    assert merged.missing == [] and merged.pending == []
    assert merged.result["resultType"] == "complete"
    assert "_meta" not in merged.result


def test_the_page_is_the_gateways_own() -> None:
    part = page("tools", "a", nextCursor="c1", _meta={"io.modelcontextprotocol/serverInfo": {}})
    part["extra"] = 1
    merged = merge_list(NS, "tools/list", [("docs", part)])
    assert set(merged.result) == {"tools", "ttlMs", "cacheScope", "resultType"}


def test_the_members_pages_are_not_changed_and_unchanged_items_are_shared() -> None:
    docs, everything = page("tools", "a", "search"), page("tools", "echo")
    before = copy.deepcopy((docs, everything))
    merged = merge_list(NS, "tools/list", [("docs", docs), ("everything", everything)])
    assert (docs, everything) == before
    assert merged.result["tools"][2] is everything["tools"][0]


def test_a_second_item_of_one_name_is_dropped() -> None:
    merged = merge_list(NS, "tools/list", [("mail", page("tools", "send", "send", "other"))])
    assert names(merged.result) == ["mail__send", "mail__other"]
    assert merged.dropped == [Dropped("mail", "tool", "send", "collision")]


@pytest.mark.parametrize(
    ("method", "key", "field", "listed", "shown"),
    [
        ("prompts/list", "prompts", "name", "greet", "docs__greet"),
        ("resources/list", "resources", "uri", "file:///a", "docs+file:///a"),
        (
            "resources/templates/list",
            "resourceTemplates",
            "uriTemplate",
            "t://x/{id}",
            "docs+t://x/{id}",
        ),
    ],
)
def test_each_list_method_renames_its_own_field(
    method: str, key: str, field: str, listed: str, shown: str
) -> None:
    merged = merge_list(
        NS, method, [("docs", page(key, listed)), ("everything", page(key, listed))]
    )
    assert names(merged.result, key, field) == [shown, listed]


def test_hostile_items_are_dropped_as_invalid_names() -> None:
    part = page("tools", "ok")
    part["tools"] += [
        "not an item",
        5,
        None,
        {"description": "no name"},
        {"name": 7},
        {"name": "a\x00"},
    ]
    merged = merge_list(NS, "tools/list", [("everything", part)])
    assert names(merged.result) == ["ok"]
    assert [d.reason for d in merged.dropped] == ["invalid_name"] * 6
    assert [d.name for d in merged.dropped] == [None, None, None, None, None, "a\x00"]


def test_a_reported_name_is_cut() -> None:
    merged = merge_list(NS, "tools/list", [("everything", page("tools", "n" * 100_000))])
    assert merged.dropped[0].name == "n" * 256


# ---------------------------------------------------------------- missing members


def test_missing_members_are_told_and_the_others_still_answer() -> None:
    merged = merge_list(
        NS,
        "tools/list",
        [
            ("docs", Missing("timeout")),
            ("everything", page("tools", "echo")),
            ("mail", Missing("error")),
        ],
    )
    assert names(merged.result) == ["echo"]
    assert merged.missing == [MissingMember("docs", "timeout"), MissingMember("mail", "error")]
    assert merged.result["_meta"] == {
        META_KEY: {
            "missing": [
                {"member": "docs", "reason": "timeout"},
                {"member": "mail", "reason": "error"},
            ]
        }
    }
    assert merged.result["ttlMs"] == 0
    assert merged.result["cacheScope"] == "private"


def test_every_member_missing_is_an_empty_page_saying_so() -> None:
    merged = merge_list(NS, "prompts/list", [("docs", Missing("unavailable"))])
    assert merged.result["prompts"] == [] and merged.result["ttlMs"] == 0
    assert merged.missing == [MissingMember("docs", "unavailable")]


@pytest.mark.parametrize(
    "bad",
    [
        {"tools": "nope"},
        {"nothing": []},
        {"tools": [], "resultType": "input_required"},
        {"tools": [], "resultType": "task"},
        {"tools": [{"name": "a"}] * 11},
        {"tools": [], "nextCursor": 5},
        {"tools": [], "nextCursor": "c" * (MAX_MEMBER_CURSOR_BYTES + 1)},
        {"tools": [], "nextCursor": "é" * (MAX_MEMBER_CURSOR_BYTES // 2 + 1)},  # bytes, not chars
        {"tools": [], "nextCursor": "a\nb"},
        {"tools": [], "nextCursor": "\ud800"},
        ["not", "a", "dict"],
        None,
    ],
)
def test_a_page_that_is_no_list_result_is_missing_as_invalid(bad: Any) -> None:
    merged = merge_list(
        NS, "tools/list", [("docs", bad), ("mail", page("tools", "send"))], max_items=10
    )
    assert merged.missing == [MissingMember("docs", "invalid")]
    assert names(merged.result) == ["mail__send"] and merged.pending == []


def test_missing_reasons_are_checked() -> None:
    with pytest.raises(ValueError):
        Missing("bored")  # type: ignore[arg-type]


def test_caller_mistakes_are_errors() -> None:
    with pytest.raises(ValueError):
        merge_list(NS, "tools/call", [])
    with pytest.raises(KeyError):
        merge_list(NS, "tools/list", [("ghost", page("tools"))])
    with pytest.raises(KeyError):
        merge_list(NS, "tools/list", [("ghost", Missing("timeout"))])


# ---------------------------------------------------------------- cache hints


@pytest.mark.parametrize(
    ("hints", "ttl", "scope"),
    [
        ([(60_000, "public"), (30_000, "public")], 30_000, "public"),
        ([(60_000, "public"), (30_000, "private")], 30_000, "private"),
        ([(60_000, "public"), (None, "public")], 0, "public"),  # absent ttl counts as 0
        ([(60_000, "public"), (-5, "public")], 0, "public"),
        ([(60_000, "public"), ("60000", "public")], 0, "public"),
        ([(60_000, "public"), (True, "public")], 0, "public"),
        ([(60_000, "public"), (1500.7, "public")], 1500, "public"),
        ([(60_000, "public"), (float("inf"), "public")], 0, "public"),
        ([(60_000, "public"), (float("nan"), "public")], 0, "public"),
        ([(60_000, "public"), (60_000, None)], 60_000, "private"),  # absent scope: private
        ([(60_000, "public"), (60_000, "PUBLIC")], 60_000, "private"),
        ([(60_000, "public"), (60_000, ["public"])], 60_000, "private"),
    ],
)
def test_ttl_is_the_least_and_scope_private_if_any(
    hints: list[tuple[Any, Any]], ttl: int, scope: str
) -> None:
    parts: list[tuple[str, Any]] = []
    for member, (t, s) in zip(("docs", "mail"), hints, strict=True):
        part = page("tools", "a", ttl=t, scope=s)
        for key, value in (("ttlMs", t), ("cacheScope", s)):
            if value is None:
                del part[key]
        parts.append((member, part))
    merged = merge_list(NS, "tools/list", parts)
    assert (merged.result["ttlMs"], merged.result["cacheScope"]) == (ttl, scope)
    assert merged.private is (scope == "private")


def test_an_earlier_private_page_keeps_the_listing_private() -> None:
    merged = merge_list(NS, "tools/list", [("docs", page("tools", "a"))], private=True)
    assert merged.result["cacheScope"] == "private"
    assert merged.result["ttlMs"] == 60_000


# ---------------------------------------------------------------- next pages


def test_members_with_a_next_page_are_pending_in_configuration_order() -> None:
    merged = merge_list(
        NS,
        "tools/list",
        [
            ("docs", page("tools", "a", nextCursor="d1")),
            ("everything", page("tools", "echo", nextCursor="")),  # empty: no more pages
            ("mail", page("tools", "send", nextCursor="m1")),
        ],
    )
    assert merged.pending == [("docs", "d1"), ("mail", "m1")]
    assert "nextCursor" not in merged.result  # the caller seals the gateway's own


def test_a_later_page_asks_only_the_pending_members() -> None:
    merged = merge_list(NS, "tools/list", [("mail", page("tools", "s2"))], private=False)
    assert names(merged.result) == ["mail__s2"] and merged.pending == []


# ---------------------------------------------------------------- properties

parts_of = st.one_of(
    st.builds(Missing, st.sampled_from(("timeout", "unavailable", "error", "invalid"))),
    json_values,
)


@st.composite
def pages(draw: st.DrawFn, ns: Namespace, method: str) -> list[tuple[str, Any]]:
    key, field, _, kind = LIST_METHODS[method]
    parts: list[tuple[str, Any]] = []
    for member in ns.members:
        shape = draw(st.integers(0, 4))
        if shape == 0:
            parts.append((member.name, draw(parts_of)))
            continue
        items = draw(
            st.lists(
                st.one_of(
                    st.builds(lambda n: {field: n, "x": 1}, names_of(kind, ns)),
                    json_values,
                ),
                max_size=8,
            )
        )
        part: dict[str, Any] = {key: items}
        for extra, values in (
            ("ttlMs", st.integers(-5, 10**6) | json_values),
            ("cacheScope", st.sampled_from(("public", "private")) | json_values),
            ("nextCursor", st.text(max_size=6) | json_values),
            ("resultType", st.just("complete") | json_values),
        ):
            if draw(st.booleans()):
                part[extra] = draw(values)
        parts.append((member.name, part))
    return parts


@fuzz_settings(100, 5000)
@given(ns=namespaces(), method=st.sampled_from(sorted(LIST_METHODS)), data=st.data())
def test_any_pages_merge_into_a_page_whose_items_route_back(
    ns: Namespace, method: str, data: st.DataObject
) -> None:
    parts = data.draw(pages(ns, method))
    before = copy.deepcopy(parts)
    merged = merge_list(ns, method, parts)
    key, field, _, kind = LIST_METHODS[method]
    listed = {
        member: [i.get(field) for i in part[key] if type(i) is dict]
        for member, part in parts
        if type(part) is dict and type(part.get(key)) is list
    }
    shown = [item[field] for item in merged.result[key]]
    assert len(shown) == len(set(shown))
    for name in shown:
        found = route(ns, kind, name)
        assert isinstance(found, Target)
        # A member's resource URIs are routed in their canonical form (what it listed, resolved).
        own = listed[found.member]
        if kind == "resource":
            own = [canonical_uri(u) if isinstance(u, str) else u for u in own]
        assert found.original in own
    asked = [m for m, _ in parts]
    missing = [m.member for m in merged.missing]
    assert all(m in missing for m in asked if m not in listed)
    assert all(m in asked for m in missing)
    assert all(m in listed and m not in missing for m, _ in merged.pending)
    assert type(merged.result["ttlMs"]) is int and merged.result["ttlMs"] >= 0
    assert merged.result["cacheScope"] in ("public", "private")
    if merged.missing:
        assert merged.result["ttlMs"] == 0 and merged.private
    assert parts == before  # the members' pages are not changed
