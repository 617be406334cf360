"""The federated namespace: names and URIs of members' items, routing them back, the collision
rule, the checks of a configuration, and properties over generated namespaces and hostile
names (every kept item routes back to exactly itself; whatever routes somewhere is exactly a
kept item's name; nothing reaches a member whose prefix it does not carry, the unprefixed
member and rename targets aside)."""

from __future__ import annotations

import fnmatch
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.federation.names import (
    ADMIT_MEMO_SIZE,
    MAX_MEMBERS,
    MAX_NAME_CHARS,
    MAX_URI_CHARS,
    MEMO_MAX_CHARS,
    ItemRules,
    MemberNames,
    Namespace,
    NamespaceError,
    Refused,
    Target,
    check_namespace,
    valid_name,
    valid_uri,
)
from mcp_edge.core.uri import canonical_uri
from tests.support.federation import (
    KINDS,
    expected_name,
    names_of,
    namespaces,
    route,
    tool_names,
    uris,
)
from tests.support.fuzz import fuzz_settings

DOCS = MemberNames(
    "docs",
    "docs",
    tools=ItemRules(rename={"search": "find_docs"}, exclude=("secret*",)),
    prompts=ItemRules(include=("greet*",)),
    resources=ItemRules(exclude=("secret://*",)),
)
EVERYTHING = MemberNames("everything", "", tools=ItemRules(rename={"old": "new"}))
MAIL = MemberNames("mail", "mail")
NS = Namespace([DOCS, EVERYTHING, MAIL])


def reason(result: object) -> str:
    assert isinstance(result, Refused), result
    return result.reason


# ---------------------------------------------------------------- names of items


def test_federated_names_follow_prefix_separator_and_renames() -> None:
    assert NS.admit("tool", "docs", "x") == "docs__x"
    assert NS.admit("tool", "docs", "search") == "find_docs"
    assert NS.admit("tool", "everything", "echo") == "echo"
    assert NS.admit("tool", "everything", "old") == "new"
    assert NS.admit("prompt", "docs", "greeting") == "docs__greeting"
    assert NS.admit("resource", "docs", "file:///a") == "docs+file:///a"
    assert NS.admit("resource", "docs", "test://t/{id}") == "docs+test://t/{id}"  # still a template
    assert NS.admit("resource", "everything", "test://static/1") == "test://static/1"
    assert NS.federate("tool", "mail", "send") == "mail__send"
    assert NS.federate("tool", "docs", "secret-key") is None


def test_a_custom_separator() -> None:
    ns = Namespace([MemberNames("docs", "docs"), MemberNames("git", "")], separator=".")
    assert ns.admit("tool", "docs", "a.b") == "docs.a.b"
    assert ns.route_tool("docs.a.b") == Target("docs", "a.b")  # split at the FIRST separator
    assert ns.route_tool("docs__a") == Target("git", "docs__a")


def test_renames_are_per_kind() -> None:
    assert NS.admit("prompt", "docs", "search") == Refused("filtered")  # prompts include greet*
    assert NS.route_tool("find_docs") == Target("docs", "search")
    assert NS.route_prompt("find_docs") == Target("everything", "find_docs")


# ---------------------------------------------------------------- routing


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("find_docs", Target("docs", "search")),  # 1. an exact rename target
        ("docs__x", Target("docs", "x")),  # 2. the text before the first separator is a prefix
        ("docs__a__b", Target("docs", "a__b")),
        ("docs___x", Target("docs", "_x")),
        ("mail__send", Target("mail", "send")),
        ("echo", Target("everything", "echo")),  # 3. else the unprefixed member
        ("nope__x", Target("everything", "nope__x")),
        ("Docs__x", Target("everything", "Docs__x")),  # prefixes match exactly
        ("__x", Target("everything", "__x")),
        ("new", Target("everything", "old")),
        ("docs__search", None),  # a renamed item's prefixed original no longer reaches it
        ("old", None),  # nor the unprefixed member's renamed original
        ("docs__secret-key", None),  # hidden by the filter: what the list does not show
        ("docs__", Target("docs", "")),
        ("", None),
        ("a" * (MAX_NAME_CHARS + 1), None),
        ("echo\n", None),
        ("ec\u202eho", None),
        (None, None),
        (7, None),
        (["echo"], None),
    ],
)
def test_routing_a_tool_name(name: object, expected: Target | None) -> None:
    assert NS.route_tool(name) == expected


def test_without_an_unprefixed_member_unknown_names_route_nowhere() -> None:
    ns = Namespace([DOCS, MAIL])
    assert ns.route_tool("echo") is None
    assert ns.route_tool("nope__x") is None
    assert ns.route_uri("file:///a") is None
    assert ns.route_tool("docs__x") == Target("docs", "x")


def test_a_filtered_original_keeps_its_rename_target_reserved() -> None:
    ns = Namespace(
        [
            MemberNames("docs", "docs", tools=ItemRules(rename={"hidden": "h"}, exclude=("hid*",))),
            MemberNames("all", ""),
        ]
    )
    assert ns.route_tool("h") is None  # not the unprefixed member's "h" either
    assert reason(ns.admit("tool", "all", "h")) == "collision"
    assert reason(ns.admit("tool", "docs", "hidden")) == "filtered"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("docs+file:///a", Target("docs", "file:///a")),
        ("docs+test://t/{id}", Target("docs", "test://t/{id}")),
        ("docs+docs+file:///a", Target("docs", "docs+file:///a")),
        ("mail+imap://x", Target("mail", "imap://x")),
        ("file:///etc/passwd", Target("everything", "file:///etc/passwd")),
        ("docs+nope", None),  # not a URI at all
        ("docs+/relative:x", None),  # not a URI
        ("docs+1x:y", Target("everything", "docs+1x:y")),  # no scheme after the +
        # (the unprefixed member's URI, not in canonical form: the scheme is docs+file)
        ("DOCS+file:///a", None),
        ("docs+FILE:///a", None),
        ("docs+file:///x/../a", None),
        ("docs+file:///x/%2e%2E/a", None),
        ("docs+file://localhost/a", None),
        ("docs-api+file:///a", Target("everything", "docs-api+file:///a")),
        ("docs+secret://k", None),  # hidden by the filter
        ("docs+file:///a\x00", None),
        ("docs+file:///\u2028", None),
        ("", None),
        ("file://" + "u" * MAX_URI_CHARS, None),
        ({"uri": "file:///a"}, None),
    ],
)
def test_routing_a_uri(uri: object, expected: Target | None) -> None:
    assert NS.route_uri(uri) == expected


# ---------------------------------------------------------------- the collision rule


@pytest.mark.parametrize(
    ("kind", "member", "original", "why"),
    [
        ("tool", "everything", "docs__x", "collision"),  # routes to docs
        ("tool", "everything", "find_docs", "collision"),  # docs' rename target
        ("tool", "everything", "mail__", "collision"),
        ("tool", "docs", "secret-key", "filtered"),
        ("prompt", "docs", "other", "filtered"),
        ("tool", "everything", "", "invalid_name"),  # empty
        ("tool", "docs", "x" * (MAX_NAME_CHARS - 5), "invalid_name"),  # docs__ + 123 > 128
        ("tool", "everything", "a\x00b", "invalid_name"),
        ("tool", "everything", "a\u2066b", "invalid_name"),
        ("tool", "everything", 5, "invalid_name"),
        ("tool", "everything", None, "invalid_name"),
        ("resource", "everything", "docs+file:///a", "collision"),
        ("resource", "docs", "secret://k", "filtered"),
        ("resource", "docs", "no-scheme", "invalid_name"),
        ("resource", "docs", "{scheme}://x", "invalid_name"),
        ("resource", "docs", "file://" + "u" * (MAX_URI_CHARS - 9), "invalid_name"),
        ("resource", "docs", ["file:///a"], "invalid_name"),
    ],
)
def test_the_collision_rule_drops_with_a_reason(
    kind: str, member: str, original: object, why: str
) -> None:
    assert reason(NS.admit(kind, member, original)) == why  # type: ignore[arg-type]


def test_the_longest_names_that_fit_are_kept() -> None:
    assert NS.admit("tool", "docs", "x" * (MAX_NAME_CHARS - 6)) == "docs__" + "x" * 122
    assert NS.admit("tool", "everything", "é" * MAX_NAME_CHARS) == "é" * MAX_NAME_CHARS
    uri = "file:///" + "u" * (MAX_URI_CHARS - 13)
    assert NS.admit("resource", "docs", uri) == "docs+" + uri


def test_two_renames_meeting_within_a_member_keep_the_rename() -> None:
    ns = Namespace([MemberNames("docs", "docs", tools=ItemRules(rename={"a": "docs__b"}))])
    assert ns.admit("tool", "docs", "a") == "docs__b"
    assert reason(ns.admit("tool", "docs", "b")) == "collision"


def test_an_unknown_member_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        NS.admit("tool", "ghost", "x")


def test_valid_name_rule() -> None:
    assert valid_name("a") and valid_name("x" * 128) and valid_name("user-profile/update")
    assert valid_name("ünïcode ok") and valid_name("emoji😀")
    for bad in ("", "x" * 129, "a\tb", "a\x7fb", "a\x9fb", "a\u2029b", "a\u200fb", "a\u202ab"):
        assert not valid_name(bad), bad


# ---------------------------------------------------------------- checks of the configuration


def problems(members: list[MemberNames], separator: str = "__") -> list[str]:
    found = check_namespace(members, separator)
    if found:
        with pytest.raises(NamespaceError) as info:
            Namespace(members, separator)
        assert info.value.problems == tuple(found)
    return found


def test_a_good_namespace_has_no_problems() -> None:
    assert problems([DOCS, EVERYTHING, MAIL]) == []


@pytest.mark.parametrize(
    ("members", "separator", "field", "words"),
    [
        ([MemberNames("Docs", "d")], "__", "members[0].name", "must match"),
        ([MemberNames("1docs", "d")], "__", "members[0].name", "must match"),
        ([MemberNames("d" * 33, "d")], "__", "members[0].name", "must match"),
        ([MemberNames("docs", "a"), MemberNames("docs", "b")], "__", "members[1].name", "also"),
        ([MemberNames("a", ""), MemberNames("b", "")], "__", "members[1].prefix", "unprefixed"),
        ([MemberNames("a", "x"), MemberNames("b", "X")], "__", "members[1].prefix", "without case"),
        ([MemberNames("a", "x+y")], "__", "members[0].prefix", "'+'"),
        ([MemberNames("a", "x_y")], "__", "members[0].prefix", "must match"),
        ([MemberNames("a", "9x")], "__", "members[0].prefix", "must match"),
        ([MemberNames("a", "x.y")], ".", "members[0].prefix", "holds the separator"),
        ([MemberNames("a", "x.")], "..", "members[0].prefix", "start of the separator"),
        ([MemberNames("a", "x-")], "--", "members[0].prefix", "start of the separator"),
        ([MemberNames("a", "a")], "", "separator", "1 to 8"),
        ([MemberNames("a", "a")], "x", "separator", "punctuation"),
        ([MemberNames("a", "a")], "_ _", "separator", "punctuation"),
        ([MemberNames("a", "a")], "\x00", "separator", "punctuation"),
        ([], "__", "members", "at least one"),
        (
            [MemberNames(f"m{i}", f"m{i}") for i in range(MAX_MEMBERS + 1)],
            "__",
            "members",
            f"at most {MAX_MEMBERS}",
        ),
        (
            [MemberNames("a", "a", resources=ItemRules(rename={"x://a": "x://b"}))],
            "__",
            "members[0].resources.rename",
            "not renamed",
        ),
        (
            [MemberNames("a", "a", tools=ItemRules(include=("",)))],
            "__",
            "members[0].tools.include[0]",
            "pattern",
        ),
        (
            [MemberNames("a", "a", prompts=ItemRules(exclude=("*" * 513,)))],
            "__",
            "members[0].prompts.exclude[0]",
            "pattern",
        ),
        (
            [MemberNames("a", "a", tools=ItemRules(include=("*",) * 257))],
            "__",
            "members[0].tools.include",
            "at most 256",
        ),
        (
            [
                MemberNames("a", "a", tools=ItemRules(rename={"x": "same"})),
                MemberNames("b", "b", tools=ItemRules(rename={"y": "same"})),
            ],
            "__",
            'members[1].tools.rename["y"]',
            'already the name given by members[0].tools.rename["x"]',
        ),
        (
            [MemberNames("a", "a", prompts=ItemRules(rename={"x": "same", "y": "same"}))],
            "__",
            'members[0].prompts.rename["y"]',
            "already the name",
        ),
        (
            [
                MemberNames("a", "a", tools=ItemRules(rename={"x": "b__x"})),
                MemberNames("b", "b"),
            ],
            "__",
            'members[0].tools.rename["x"]',
            "looks prefixed by members[1]",
        ),
        (
            [MemberNames("a", "", tools=ItemRules(rename={"x": "b__x"})), MemberNames("b", "b")],
            "__",
            'members[0].tools.rename["x"]',
            "looks prefixed by members[1]",
        ),
        (
            [MemberNames("a", "a", tools=ItemRules(rename={"x": "bad\nname"}))],
            "__",
            'members[0].tools.rename["x"]',
            "not a valid name",
        ),
        (
            [MemberNames("a", "a", tools=ItemRules(rename={"x": "y" * 129}))],
            "__",
            'members[0].tools.rename["x"]',
            "not a valid name",
        ),
        (
            [MemberNames("a", "a", tools=ItemRules(rename={"": "y"}))],
            "__",
            'members[0].tools.rename[""]',
            "original must be a valid name",
        ),
    ],
)
def test_each_problem_names_its_field(
    members: list[MemberNames], separator: str, field: str, words: str
) -> None:
    found = problems(members, separator)
    assert any(p.startswith(f"{field}: ") and words in p for p in found), found


def test_renames_that_are_fine() -> None:
    ns = Namespace(
        [
            # a target that looks prefixed by its own member; swapping two names
            MemberNames("a", "a", tools=ItemRules(rename={"x": "a__y", "y": "x"})),
            MemberNames("b", "", tools=ItemRules(rename={"p": "q", "q": "p"})),
        ]
    )
    assert ns.route_tool("a__y") == Target("a", "x")
    assert ns.route_tool("x") == Target("a", "y")
    assert ns.route_tool("q") == Target("b", "p")
    assert ns.route_tool("p") == Target("b", "q")


def test_problem_messages_quote_hostile_values_safely() -> None:
    found = problems([MemberNames("a\n\x1b[31m", "a")])
    assert found and "\n" not in found[0] and "\x1b" not in found[0]


# ---------------------------------------------------------------- no regex compiled per call


def test_routing_and_admitting_compile_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = Namespace(
        [
            MemberNames("docs", "docs", tools=ItemRules(include=("a*", "b?"), exclude=("*x",))),
            MemberNames("all", "", resources=ItemRules(exclude=("secret://*",))),
        ]
    )

    def compiled(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pattern compiled on the request path")

    monkeypatch.setattr(re, "compile", compiled)
    monkeypatch.setattr(re, "_compile", compiled)
    monkeypatch.setattr(fnmatch, "translate", compiled)
    monkeypatch.setattr(fnmatch, "_compile_pattern", compiled)
    for name in ("docs__ab", "docs__ax", "docs__zz", "echo", "docs__b1"):
        ns.route_tool(name)
        ns.admit("tool", "docs", name[6:])
    for uri in ("file:///a", "secret://k", "docs+file:///a"):
        ns.route_uri(uri)
        ns.admit("resource", "all", uri)
    assert ns.route_tool("docs__ab") == Target("docs", "ab")


# ---------------------------------------------------------------- properties


@fuzz_settings(100, 5000)
@given(ns=namespaces(), data=st.data())
def test_a_kept_item_routes_back_to_exactly_itself(ns: Namespace, data: st.DataObject) -> None:
    for kind in KINDS:
        for member in ns.members:
            for original in data.draw(st.lists(names_of(kind, ns), min_size=1, max_size=6)):
                admitted = ns.admit(kind, member.name, original)
                if isinstance(admitted, Refused):
                    continue
                assert admitted == expected_name(ns, kind, member.name, original)
                own = canonical_uri(original) if kind == "resource" else original
                assert route(ns, kind, admitted) == Target(member.name, own)


@fuzz_settings(100, 5000)
@given(ns=namespaces(), data=st.data())
def test_whatever_routes_is_a_kept_items_name_under_its_prefix(
    ns: Namespace, data: st.DataObject
) -> None:
    """Routing is the exact inverse of admitting (no name reaches an item the list would not
    show under that very name), and nothing reaches a member whose prefix it does not carry,
    rename targets and the unprefixed member aside."""
    for kind in KINDS:
        mark = "+" if kind == "resource" else ns.separator
        for name in data.draw(st.lists(names_of(kind, ns), min_size=1, max_size=8)):
            found = route(ns, kind, name)
            if found is None:
                continue
            assert ns.admit(kind, found.member, found.original) == name
            member = next(m for m in ns.members if m.name == found.member)
            renames = {} if kind == "resource" else member.rules(kind).rename  # type: ignore[arg-type]
            if renames.get(found.original) == name:
                continue
            if member.prefix:
                assert name.startswith(member.prefix + mark)
                assert found.original == name[len(member.prefix) + len(mark) :]
                continue
            assert found.original == name
            if kind != "resource":  # a name carrying a prefix and separator is that member's
                assert not any(m.prefix and name.startswith(m.prefix + mark) for m in ns.members)


@fuzz_settings(100, 5000)
@given(ns=namespaces(), data=st.data())
def test_a_prefixed_member_without_filters_or_renames_keeps_every_valid_item(
    ns: Namespace, data: st.DataObject
) -> None:
    """The rule drops no more than it must."""
    plain = [
        m
        for m in ns.members
        if m.prefix and not (m.tools.include or m.tools.exclude or m.tools.rename)
    ]
    for member in plain:
        for original in data.draw(st.lists(tool_names(ns), min_size=1, max_size=6)):
            federated = f"{member.prefix}{ns.separator}{original}"
            if valid_name(federated):
                assert ns.admit("tool", member.name, original) == federated
    for member in [m for m in ns.members if m.prefix and not m.resources.exclude]:
        if member.resources.include:
            continue
        for uri in data.draw(st.lists(uris(ns), min_size=1, max_size=6)):
            own = canonical_uri(uri) if valid_uri(uri) else None
            if (
                own is not None
                and valid_uri(own)
                and len(member.prefix) + 1 + len(own) <= MAX_URI_CHARS
            ):
                assert ns.admit("resource", member.name, uri) == f"{member.prefix}+{own}"


@fuzz_settings(300, 5000)
@given(name=st.one_of(tool_names(), uris(), st.text()) | st.binary() | st.integers())
def test_hostile_names_never_raise(name: object) -> None:
    for kind in KINDS:
        route(NS, kind, name)
        for member in NS.members:
            NS.admit(kind, member.name, name)


def test_the_verdicts_memo_is_bounded_and_keeps_no_long_names() -> None:
    ns = Namespace([MemberNames("docs", "docs"), MemberNames("all", "")])
    for i in range(ADMIT_MEMO_SIZE + 10):
        assert ns.admit("tool", "docs", f"t{i}") == f"docs__t{i}"
    assert len(ns._admitted) <= ADMIT_MEMO_SIZE
    ns.admit("resource", "all", "file:///" + "x" * MEMO_MAX_CHARS)
    assert ("resource", "all", "file:///" + "x" * MEMO_MAX_CHARS) not in ns._admitted
    # A remembered verdict is the verdict: asking twice gives the same, for kept and dropped.
    for _ in range(2):
        assert ns.admit("tool", "all", "docs__x") == Refused("collision")
        assert ns.admit("tool", "docs", "x") == "docs__x"
    with pytest.raises(KeyError):
        ns.admit("tool", "ghost", "x")
    assert ("tool", "ghost", "x") not in ns._admitted
