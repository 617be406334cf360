"""The namespace of a federated route: federated names, routing, the collision rule, the checks.

A route puts several member servers behind one endpoint. Each member has a configured ``name``
(``[a-z][a-z0-9-]{0,31}``, unique in the route) and a ``prefix`` (by default its name; ``""``
makes it *the unprefixed member*, at most one per route).

Federated names
    A member's tool or prompt ``x`` is called ``<prefix><separator>x`` (the separator is ``__``
    unless the route sets one), ``x`` itself for the unprefixed member, or its ``rename`` target
    when the member renames it (renames are exact names, per kind: a tool rename never touches a
    prompt). A resource URI or URI template ``u`` is called ``<prefix>+u`` (``docs+file:///a``;
    the prefix is a valid start of a URI scheme, so the result is still a URI, and a template
    stays a template), ``u`` itself for the unprefixed member. Resources are not renamed.

Filters
    Per member and kind, ``include`` and ``exclude`` are lists of shell-style globs (``*`` any
    run of characters, ``/`` included; ``?`` one character; ``[abc]`` / ``[!abc]`` a set),
    matched case-sensitively against the member's *original* name (tools, prompts) or URI /
    URI template (resources). An item is shown when it matches some ``include`` (or ``include``
    is empty) and no ``exclude``. What a list does not show cannot be called, read or completed.

Routing a federated tool or prompt name (every ``tools/call``, ``prompts/get``, and
``completion/complete`` with a ``ref/prompt``)
    1. an exact rename target: its (member, original);
    2. else, if the text before the first separator is a member's prefix: (that member, the rest);
    3. else the unprefixed member, if there is one: (it, the name);
    4. else nothing.
    Whichever step found the member, the result is nothing when the original is one the member
    renamed (``docs__search`` no longer reaches a ``search`` renamed ``find``) or one its filter
    hides.

Routing a resource URI (``resources/read``, ``completion/complete`` with a ``ref/resource``)
    if the text before the first ``+`` is exactly a member's prefix and what follows starts with
    a URI scheme (``[A-Za-z][A-Za-z0-9+.-]*:``): (that member, what follows); else the unprefixed
    member, if there is one: (it, the URI); else nothing. Again nothing when the filter hides it,
    and nothing when the member's URI is not in its canonical form (mcp_edge.core.uri: scheme in
    lower case, unreserved escapes decoded, no dot segments, as a URL parser leaves it), since
    servers resolve ``file:///public/../secret/b`` to ``file:///secret/b``: filters and routing
    see one form, the one the member resolves. A member's URIs are shown (listed, in answers,
    in notifications) in that canonical form, so every URI a client is shown can be read.
    Nothing in a URI names an address: only a configured prefix selects a member, and a name or
    URI that carries no member's prefix reaches no member but the unprefixed one.

Valid federated names and URIs (anything else is never listed and routes nowhere)
    A tool or prompt name is a string of 1 to 128 characters (code points) with none of:
    the C0 and C1 control characters (U+0000-U+001F, U+007F-U+009F), the line and paragraph
    separators U+2028 and U+2029, and the bidirectional formatting characters U+200E, U+200F,
    U+202A-U+202E and U+2066-U+2069. The set is fixed (it does not follow the Unicode version of
    the Python in use, so every replica agrees). Every name it admits is one the MCP SDKs accept
    (they warn about names outside ``[A-Za-z0-9_.-]``, but take them). A URI or URI template is
    a string of 1 to 8192 characters with none of those characters, starting with a scheme.

The collision rule
    A member's item is kept in a merged list only if its federated name is valid and routes back
    to that same member and original. Otherwise it is dropped, for a reason: ``filtered`` (the
    member's filter hides it), ``invalid_name`` (not a string, or its federated name is not
    valid), ``collision`` (its federated name routes to something else: the unprefixed member
    listing ``docs__x`` while ``docs`` exists, an item whose name is another's rename target, a
    renamed original listed by the unprefixed member...). The rule depends on the configuration
    only, never on who answered first, so every replica keeps the same items.

Everything routing needs is computed when the :class:`Namespace` is built: a call is a length
check, one scan for forbidden characters, and a dict lookup or two. The verdicts of the collision
rule are remembered (a bounded memo of names up to 256 characters, started over when full), since
members list the same items request after request.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, NamedTuple

import orjson

from mcp_edge.core.memo import BoundedMemo
from mcp_edge.core.uri import canonical_uri, is_canonical

#: The kinds of names a member has. Resource URIs and URI templates share ``resource``.
Kind = Literal["tool", "prompt", "resource"]
#: Why an item a member listed is not in the merged list.
DropReason = Literal["collision", "invalid_name", "filtered"]

DEFAULT_SEPARATOR: Final = "__"
URI_PREFIX_MARK: Final = "+"
MAX_NAME_CHARS: Final = 128
MAX_URI_CHARS: Final = 8192
MAX_MEMBERS: Final = 32
MAX_SEPARATOR_CHARS: Final = 8
MAX_PATTERNS: Final = 256
MAX_PATTERN_CHARS: Final = 512
#: Items whose verdict a namespace remembers (names up to MEMO_MAX_CHARS characters).
ADMIT_MEMO_SIZE: Final = 8192
MEMO_MAX_CHARS: Final = 256

MEMBER_NAME: Final = re.compile(r"[a-z][a-z0-9-]{0,31}")
#: A prefix is a valid start of a URI scheme (so ``<prefix>+<uri>`` is a URI), without ``+``.
PREFIX: Final = re.compile(r"[A-Za-z][A-Za-z0-9.-]{0,31}")
URI_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
#: Characters no federated name or URI may hold (see the module's docstring).
FORBIDDEN: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def valid_name(name: str) -> bool:
    """A valid federated tool or prompt name."""
    return 0 < len(name) <= MAX_NAME_CHARS and FORBIDDEN.search(name) is None


def valid_uri(uri: str) -> bool:
    """A valid federated (or original) resource URI or URI template."""
    return (
        0 < len(uri) <= MAX_URI_CHARS
        and URI_SCHEME.match(uri) is not None
        and FORBIDDEN.search(uri) is None
    )


# ---------------------------------------------------------------- configuration


@dataclass(frozen=True, slots=True)
class ItemRules:
    """Which of a member's items of one kind are shown, and under which names."""

    include: tuple[str, ...] = ()  # globs; empty: everything
    exclude: tuple[str, ...] = ()  # globs
    rename: Mapping[str, str] = field(default_factory=dict)  # original -> federated (exact)


@dataclass(frozen=True, slots=True)
class MemberNames:
    """What the namespace knows of one member."""

    name: str
    prefix: str  # "" for the unprefixed member
    tools: ItemRules = ItemRules()
    prompts: ItemRules = ItemRules()
    resources: ItemRules = ItemRules()  # no renames

    def rules(self, kind: Kind) -> ItemRules:
        if kind == "tool":
            return self.tools
        if kind == "prompt":
            return self.prompts
        return self.resources


class Target(NamedTuple):
    """Where a federated name leads: a member (its configured name) and the member's own name.
    (A named tuple: built on every routed call, and cheaper to build than a dataclass.)"""

    member: str
    original: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Why :meth:`Namespace.admit` leaves an item out."""

    reason: DropReason


FILTERED: Final = Refused("filtered")
INVALID_NAME: Final = Refused("invalid_name")
COLLISION: Final = Refused("collision")


class NamespaceError(ValueError):
    """A route's members do not make a namespace; ``problems`` names each offending field."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


#: Each kind and its configuration key.
_KINDS: Final[tuple[tuple[Kind, str], ...]] = (
    ("tool", "tools"),
    ("prompt", "prompts"),
    ("resource", "resources"),
)


def _q(text: object) -> str:
    """A value quoted for a message (JSON string escapes: no control character gets through)."""
    try:
        return orjson.dumps(text).decode()
    except TypeError:
        return type(text).__name__


def _separator_problem(separator: object) -> str | None:
    if type(separator) is not str:
        return "separator: must be a string"
    if not 0 < len(separator) <= MAX_SEPARATOR_CHARS:
        return f"separator: must be 1 to {MAX_SEPARATOR_CHARS} characters, got {_q(separator)}"
    if FORBIDDEN.search(separator) or any(c.isalnum() or c.isspace() for c in separator):
        return (
            f"separator: {_q(separator)} must be punctuation"
            " (no letters, digits, blanks or control characters)"
        )
    return None


def _rules_problems(where: str, kind: Kind, rules: ItemRules) -> list[str]:
    problems = []
    for key, patterns in (("include", rules.include), ("exclude", rules.exclude)):
        if len(patterns) > MAX_PATTERNS:
            problems.append(f"{where}.{key}: at most {MAX_PATTERNS} patterns")
        for i, pattern in enumerate(patterns):
            if type(pattern) is not str or not 0 < len(pattern) <= MAX_PATTERN_CHARS:
                problems.append(
                    f"{where}.{key}[{i}]: a pattern is a string of 1 to {MAX_PATTERN_CHARS} characters"
                )
    if kind == "resource" and rules.rename:
        problems.append(
            f"{where}.rename: resources are not renamed (a URI keeps its own form behind the"
            " member's prefix)"
        )
    return problems


def check_namespace(
    members: Sequence[MemberNames], separator: str = DEFAULT_SEPARATOR
) -> list[str]:
    """Every problem of a route's namespace, each naming its field (``members[1].prefix: ...``);
    empty when the namespace is good."""
    problems: list[str] = []
    sep_problem = _separator_problem(separator)
    if sep_problem:
        problems.append(sep_problem)
    if not members:
        problems.append("members: a federated route needs at least one member")
    if len(members) > MAX_MEMBERS:
        problems.append(f"members: at most {MAX_MEMBERS} members, got {len(members)}")

    names: dict[str, int] = {}
    prefixes: dict[str, int] = {}  # case-folded prefix -> index of its member
    unprefixed: int | None = None
    for i, m in enumerate(members):
        where = f"members[{i}]"
        if type(m.name) is not str or not MEMBER_NAME.fullmatch(m.name):
            problems.append(f"{where}.name: {_q(m.name)} must match [a-z][a-z0-9-]{{0,31}}")
        elif m.name in names:
            problems.append(f"{where}.name: {_q(m.name)} is also members[{names[m.name]}]'s name")
        else:
            names[m.name] = i
        if type(m.prefix) is not str:
            problems.append(f"{where}.prefix: must be a string")
        elif m.prefix == "":
            if unprefixed is not None:
                problems.append(
                    f'{where}.prefix: members[{unprefixed}] is already unprefixed (prefix "");'
                    " a route has at most one unprefixed member"
                )
            else:
                unprefixed = i
        elif "+" in m.prefix:
            problems.append(f"{where}.prefix: {_q(m.prefix)} holds '+' (it ends a prefix in URIs)")
        elif not PREFIX.fullmatch(m.prefix):
            problems.append(
                f"{where}.prefix: {_q(m.prefix)} must match [A-Za-z][A-Za-z0-9.-]{{0,31}}"
                " (it starts resource URI schemes)"
            )
        else:
            if sep_problem is None:
                if separator in m.prefix:
                    problems.append(
                        f"{where}.prefix: {_q(m.prefix)} holds the separator {_q(separator)}"
                    )
                elif (m.prefix + separator).find(separator) != len(m.prefix):
                    problems.append(
                        f"{where}.prefix: {_q(m.prefix)} ends with the start of the separator"
                        f" {_q(separator)} (a name would split before the separator)"
                    )
            folded = m.prefix.lower()
            if folded in prefixes:
                problems.append(
                    f"{where}.prefix: {_q(m.prefix)} is also members[{prefixes[folded]}]'s"
                    " prefix (prefixes are compared without case)"
                )
            else:
                prefixes[folded] = i
        for kind, key in _KINDS:
            problems += _rules_problems(f"{where}.{key}", kind, m.rules(kind))

    if sep_problem is None:
        for kind, key in _KINDS[:2]:
            problems += _rename_problems(members, separator, kind, key)
    return problems


def _rename_problems(
    members: Sequence[MemberNames], separator: str, kind: Kind, key: str
) -> list[str]:
    problems: list[str] = []
    owner: dict[str, str] = {}  # rename target -> the field that claimed it first
    exact_prefixes = {m.prefix: i for i, m in enumerate(members) if type(m.prefix) is str}
    for i, m in enumerate(members):
        rename = m.rules(kind).rename
        for original, target in rename.items():
            where = f"members[{i}].{key}.rename[{_q(original)}]"
            if type(original) is not str or not valid_name(original):
                problems.append(
                    f"{where}: the original must be a valid name (1 to {MAX_NAME_CHARS}"
                    " characters, no control characters)"
                )
                continue
            if type(target) is not str or not valid_name(target):
                problems.append(
                    f"{where}: {_q(target)} is not a valid name (1 to {MAX_NAME_CHARS}"
                    " characters, no control characters)"
                )
                continue
            if target in owner:
                problems.append(
                    f"{where}: {_q(target)} is already the name given by {owner[target]}"
                )
                continue
            owner[target] = where
            cut = target.find(separator)
            other = exact_prefixes.get(target[:cut]) if cut > 0 else None
            if other is not None and other != i:
                problems.append(
                    f"{where}: {_q(target)} looks prefixed by members[{other}]"
                    f" ({_q(members[other].prefix)}{separator}...); pick a name that does not"
                )
    return problems


# ---------------------------------------------------------------- the namespace


class _Filter:
    """A member's include/exclude globs for one kind, compiled once."""

    __slots__ = ("_exclude", "_include")

    def __init__(self, rules: ItemRules) -> None:
        self._include = _compile(rules.include)
        self._exclude = _compile(rules.exclude)

    def shows(self, original: str) -> bool:
        if self._include is not None and self._include.match(original) is None:
            return False
        return self._exclude is None or self._exclude.match(original) is None


def _compile(patterns: Sequence[str]) -> re.Pattern[str] | None:
    if not patterns:
        return None
    # fnmatch.translate gives ``(?s:...)\Z`` per pattern (no catastrophic backtracking on ``*``).
    return re.compile("|".join(fnmatch.translate(p) for p in patterns))


#: A rename target whose original the filter hides: reserved, routes nowhere.
_HIDDEN: Final = Target("", "")


class _KindTable:
    """Everything routing one kind of name needs, per member."""

    __slots__ = ("filters", "renamed", "targets")

    def __init__(self, members: Sequence[MemberNames], kind: Kind) -> None:
        self.filters: dict[str, _Filter | None] = {}
        self.renamed: dict[str, Mapping[str, str]] = {}  # member -> original -> target
        self.targets: dict[str, Target] = {}  # rename target -> item (or _HIDDEN)
        for m in members:
            rules = m.rules(kind)
            shown = _Filter(rules) if (rules.include or rules.exclude) else None
            self.filters[m.name] = shown
            self.renamed[m.name] = dict(rules.rename)
            for original, target in rules.rename.items():
                visible = shown is None or shown.shows(original)
                self.targets[target] = Target(m.name, original) if visible else _HIDDEN


class Namespace:
    """A route's namespace, built once from its configuration (raises :class:`NamespaceError`).

    ``member`` arguments are configured member names; an unknown one is a ``KeyError`` (a bug
    of the caller, never an input's doing). Names and URIs from clients and members may be any
    value: they are refused (``None`` or :class:`Refused`), never raised on.
    """

    __slots__ = (
        "_admitted",
        "_by_prefix",
        "_prefix",
        "_tables",
        "_unprefixed",
        "members",
        "separator",
    )

    def __init__(self, members: Sequence[MemberNames], separator: str = DEFAULT_SEPARATOR) -> None:
        problems = check_namespace(members, separator)
        if problems:
            raise NamespaceError(problems)
        self.members: tuple[MemberNames, ...] = tuple(members)
        self.separator = separator
        self._prefix = {m.name: m.prefix for m in members}
        self._by_prefix = {m.prefix: m.name for m in members if m.prefix}
        self._unprefixed = next((m.name for m in members if not m.prefix), None)
        self._tables: dict[Kind, _KindTable] = {
            kind: _KindTable(members, kind) for kind in ("tool", "prompt", "resource")
        }
        self._admitted: BoundedMemo[tuple[str, str, str], str | Refused] = BoundedMemo(
            ADMIT_MEMO_SIZE
        )

    @property
    def unprefixed(self) -> str | None:
        """The unprefixed member's name, if the route has one."""
        return self._unprefixed

    def prefix(self, member: str) -> str:
        return self._prefix[member]

    # ------------------------------------------------------------ federated names

    def admit(self, kind: Kind, member: str, original: object) -> str | Refused:
        """The collision rule: the federated name (or URI) of a member's item if it is kept,
        else why it is dropped."""
        if type(original) is str and len(original) <= MEMO_MAX_CHARS:
            # Lists come back with the same names request after request: one lookup each.
            key = (kind, member, original)
            known = self._admitted.get(key)
            if known is not None:
                return known
            return self._admitted.put(key, self._admit(kind, member, original))
        return self._admit(kind, member, original)

    def _admit(self, kind: Kind, member: str, original: object) -> str | Refused:
        table = self._tables[kind]
        prefix = self._prefix[member]
        if type(original) is not str:
            return INVALID_NAME
        if kind == "resource":
            if not valid_uri(original):
                return INVALID_NAME
            # Shown, filtered and routed back in its canonical form (mcp_edge.core.uri).
            canonical = canonical_uri(original)
            if canonical is None or not valid_uri(canonical):
                return INVALID_NAME
            original = canonical
            shown = table.filters[member]
            if shown is not None and not shown.shows(original):
                return FILTERED
            federated = f"{prefix}{URI_PREFIX_MARK}{original}" if prefix else original
            if len(federated) > MAX_URI_CHARS:
                return INVALID_NAME
            back = self._route_uri(federated)
        else:
            if len(original) > MAX_NAME_CHARS:
                # Its federated name could only be longer (renamed originals are valid names):
                # refused before any pattern reads it.
                return INVALID_NAME
            shown = table.filters[member]
            if shown is not None and not shown.shows(original):
                return FILTERED
            renamed = table.renamed[member].get(original)
            if renamed is not None:
                federated = renamed
            elif prefix:
                federated = f"{prefix}{self.separator}{original}"
            else:
                federated = original
            if not valid_name(federated):
                return INVALID_NAME
            back = self._route_name(table, federated)
        if back is None or back.member != member or back.original != original:
            return COLLISION
        return federated

    def federate(self, kind: Kind, member: str, original: object) -> str | None:
        """The federated name (or URI) of a member's item; None when the collision rule drops
        it (see :meth:`admit` for why)."""
        admitted = self.admit(kind, member, original)
        return admitted if type(admitted) is str else None

    # ------------------------------------------------------------ routing

    def route_tool(self, name: object) -> Target | None:
        """The member and original of a federated tool name; None: no such tool."""
        if type(name) is not str or not valid_name(name):
            return None
        return self._route_name(self._tables["tool"], name)

    def route_prompt(self, name: object) -> Target | None:
        """The member and original of a federated prompt name; None: no such prompt."""
        if type(name) is not str or not valid_name(name):
            return None
        return self._route_name(self._tables["prompt"], name)

    def route_uri(self, uri: object) -> Target | None:
        """The member and original of a federated resource URI (or URI template); None: no
        such resource."""
        if type(uri) is not str or not valid_uri(uri):
            return None
        return self._route_uri(uri)

    def _route_name(self, table: _KindTable, name: str) -> Target | None:
        hit = table.targets.get(name)
        if hit is not None:
            return None if hit is _HIDDEN else hit
        separator = self.separator
        cut = name.find(separator)
        member = self._by_prefix.get(name[:cut]) if cut > 0 else None
        if member is not None:
            original = name[cut + len(separator) :]
        else:
            member = self._unprefixed
            if member is None:
                return None
            original = name
        if original in table.renamed[member]:
            return None  # renamed: only its new name reaches it
        shown = table.filters[member]
        if shown is not None and not shown.shows(original):
            return None
        return Target(member, original)

    def canonical_form(self, uri: object) -> str | None:
        """The canonical spelling of a federated URI (its member's prefix as it is, the URI
        after it in canonical form: mcp_edge.core.uri), or None when it has none."""
        if type(uri) is not str or not valid_uri(uri):
            return None
        member, original = self._split_uri(uri)
        canonical = canonical_uri(original)
        if canonical is None:
            return None
        return uri[: len(uri) - len(original)] + canonical if member is not None else canonical

    def _split_uri(self, uri: str) -> tuple[str | None, str]:
        """(the member a prefix names, the rest), or (None, the URI) when it has no prefix."""
        cut = uri.find(URI_PREFIX_MARK)
        member = self._by_prefix.get(uri[:cut]) if cut > 0 else None
        if member is not None and URI_SCHEME.match(uri, cut + 1) is not None:
            return member, uri[cut + 1 :]
        return None, uri

    def _route_uri(self, uri: str) -> Target | None:
        member, original = self._split_uri(uri)
        if member is None:
            member = self._unprefixed
            if member is None:
                return None
        if not is_canonical(original):
            return None  # a spelling a server would resolve elsewhere: refused
        shown = self._tables["resource"].filters[member]
        if shown is not None and not shown.shows(original):
            return None
        return Target(member, original)
