"""Generated federated namespaces, hostile names and URIs, and arbitrary JSON, for the property
tests of ``mcp_edge.core.federation`` (``tests/unit/test_federation_*.py``).

Names are drawn to hit the edges on purpose: members' prefixes and the separator in every
position, ``+`` and scheme-like text, control, line-separator and bidirectional characters,
lengths around the 128-character limit, and values that are not strings at all.
"""

from __future__ import annotations

from typing import Any

from hypothesis import assume
from hypothesis import strategies as st

from mcp_edge.core.federation.names import (
    ItemRules,
    Kind,
    MemberNames,
    Namespace,
    check_namespace,
)
from mcp_edge.core.uri import canonical_uri

SEPARATORS = ("__", "_", ".", "-", "::", "/", "..", "~", "--")
PREFIX_POOL = ("docs", "a", "ab", "Docs2", "a.b", "a-b", "x1", "b", "docs-api", "z.")
GLOBS = ("*", "a*", "*b", "?", "[ab]*", "docs*", "*_*", "[!a]*", "*://*", "t*")
ODD = ("\x00", "\n", "\x7f", "\x85", "\u2028", "\u202e", "\u2066", "é", "😀", " ", "{", "}")
CLEAN = "abZ0_.-+:/~é😀 {}"
ALPHABET = CLEAN + "".join(ODD)

MEMBER_NAMES = ("docs", "a", "b-2", "everything", "m", "zz")
#: Rename targets: plain ones, one shaped like a prefixed name, an unprefixed-looking one.
RENAME_TARGETS = ("find", "new", "q", "x", "search_docs", "docs__y", "a.b", "ab~c", "p")

RENAME_ORIGINALS = st.text(alphabet="abZ0_.-:/~+", min_size=1, max_size=4)

KINDS: tuple[Kind, ...] = ("tool", "prompt", "resource")

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats()
    | st.text(max_size=12)
)
#: Any JSON-like value (and floats orjson would not produce: NaN, infinities).
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def _texts(max_size: int = 10, alphabet: str = CLEAN) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, max_size=max_size)


# Strategies are built once: building them inside a composite on every draw costs more than
# the draws themselves.
TEXTS = _texts()
ODD_TEXTS = _texts(10, ALPHABET)
SHAPES = st.integers(0, 5)
ANY_SEPARATOR = st.sampled_from(SEPARATORS)
POOL_PREFIXES = st.sampled_from(PREFIX_POOL)
LONG_NAME = st.integers(110, 140).map(lambda n: "t" * n)
SCHEMES = st.sampled_from(("file", "test", "docs", "a+b.c-d", "X", ""))
SCHEME_ENDS = st.sampled_from(("://", ":", ":/", "//", ""))
TEMPLATE_ENDS = st.sampled_from(("", "{id}", "/{+path}"))
LONG_URI = st.integers(8170, 8200).map(lambda n: "file://" + "u" * n)


@st.composite
def tool_names(draw: st.DrawFn, namespace: Namespace | None = None) -> str:
    """A name a member or a client might send: plain, shaped like a prefixed name (of a real
    prefix or not), long, or full of characters that must not pass."""
    separator = namespace.separator if namespace else draw(ANY_SEPARATOR)
    shape = draw(SHAPES)
    if shape == 0:
        return draw(ODD_TEXTS)
    if shape in (1, 2):
        return draw(_a_prefix(namespace)) + separator + draw(TEXTS)
    if shape == 3:
        return draw(POOL_PREFIXES) + draw(ANY_SEPARATOR) + draw(TEXTS)
    if shape == 4:
        return draw(LONG_NAME)
    if namespace:  # a rename target, or a renamed original, bare or under its member's prefix
        renamed = [
            (m.prefix, original, target)
            for m in namespace.members
            for kind in ("tool", "prompt")
            for original, target in m.rules(kind).rename.items()
        ]
        if renamed:
            prefix, original, target = renamed[draw(st.integers(0, len(renamed) - 1))]
            return draw(st.sampled_from((target, original, prefix + separator + original)))
    return draw(TEXTS)


def _a_prefix(namespace: Namespace | None) -> st.SearchStrategy[str]:
    """Mostly one of the namespace's own (non-empty) prefixes, else one from the pool."""
    own = [m.prefix for m in namespace.members if m.prefix] if namespace else []
    if not own:
        return POOL_PREFIXES
    return st.sampled_from((*own, *own, *PREFIX_POOL[:3]))


@st.composite
def uris(draw: st.DrawFn, namespace: Namespace | None = None) -> str:
    """A URI or template a member or client might send: plain, prefixed (by a real prefix or
    not, with or without a scheme after the ``+``), nested, long, or odd."""
    base = draw(SCHEMES) + draw(SCHEME_ENDS) + draw(TEXTS) + draw(TEMPLATE_ENDS)
    shape = draw(SHAPES)
    if shape in (0, 5):
        return base
    if shape in (1, 2):
        return draw(_a_prefix(namespace)) + "+" + base
    if shape == 3:
        return draw(LONG_URI)
    return draw(ODD_TEXTS)


@st.composite
def names_of(draw: st.DrawFn, kind: Kind, namespace: Namespace | None = None) -> Any:
    """What a member lists as a name (or URI) of ``kind``: mostly strings, sometimes not."""
    if draw(SHAPES) == 0:
        return draw(json_scalars)
    return draw(uris(namespace) if kind == "resource" else tool_names(namespace))


GLOB_LISTS = st.lists(st.sampled_from(GLOBS), max_size=2).map(tuple)
RENAMES = st.dictionaries(RENAME_ORIGINALS, st.sampled_from(RENAME_TARGETS), max_size=3)
NO_RULES = ItemRules()


def _rules(
    mode: int, include: tuple[str, ...], exclude: tuple[str, ...], rename: dict[str, str]
) -> ItemRules:
    if mode == 0:
        return NO_RULES
    if mode == 1:
        return ItemRules(include=include, exclude=exclude)
    if mode == 2:
        return ItemRules(rename=rename)
    return ItemRules(include=include, exclude=exclude, rename=rename)


#: Mostly no rules; else filters, renames, or both.
NAME_RULES = st.builds(_rules, st.sampled_from((0, 0, 0, 1, 2, 3)), GLOB_LISTS, GLOB_LISTS, RENAMES)
URI_RULES = st.builds(_rules, st.sampled_from((0, 0, 1)), GLOB_LISTS, GLOB_LISTS, st.just({}))
MEMBER_COUNTS = st.integers(1, 4)


@st.composite
def namespaces(draw: st.DrawFn) -> Namespace:
    """A valid namespace of 1 to 4 members (one of them perhaps unprefixed)."""
    separator = draw(ANY_SEPARATOR)
    fitting = [
        p for p in PREFIX_POOL if separator not in p and (p + separator).find(separator) == len(p)
    ]
    count = draw(MEMBER_COUNTS)
    names = draw(
        st.lists(st.sampled_from(MEMBER_NAMES), min_size=count, max_size=count, unique=True)
    )
    prefixes = draw(
        st.lists(st.sampled_from(fitting), min_size=count, max_size=count, unique_by=str.lower)
    )
    bare = draw(st.none() | st.integers(0, count - 1))
    members = [
        MemberNames(
            name=name,
            prefix="" if i == bare else prefixes[i],
            tools=draw(NAME_RULES),
            prompts=draw(NAME_RULES),
            resources=draw(URI_RULES),
        )
        for i, name in enumerate(names)
    ]
    assume(not check_namespace(members, separator))
    return Namespace(members, separator)


def route(namespace: Namespace, kind: Kind, name: object) -> Any:
    if kind == "tool":
        return namespace.route_tool(name)
    if kind == "prompt":
        return namespace.route_prompt(name)
    return namespace.route_uri(name)


def expected_name(namespace: Namespace, kind: Kind, member: str, original: str) -> str:
    """The federated name by the documented formula, computed apart from the implementation."""
    m = next(m for m in namespace.members if m.name == member)
    if kind == "resource":
        original = canonical_uri(original) or original  # URIs are shown in canonical form
        return f"{m.prefix}+{original}" if m.prefix else original
    renamed = m.rules(kind).rename.get(original)
    if renamed is not None:
        return renamed
    return f"{m.prefix}{namespace.separator}{original}" if m.prefix else original
