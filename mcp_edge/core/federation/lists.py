"""Merging the members' pages of a list into the federated page.

| method | items | the field renamed |
|---|---|---|
| `tools/list` | `tools` | `name` |
| `prompts/list` | `prompts` | `name` |
| `resources/list` | `resources` | `uri` |
| `resources/templates/list` | `resourceTemplates` | `uriTemplate` |

The merged page holds the members in configuration order, each member's items in its own order,
each item under its federated name (:mod:`.names`); items the collision rule drops, and a second
item of one federated name (the first is kept), are left out and reported (:class:`Dropped`, for
logs and metrics). Items keep every other field as the member sent it (an item whose name does
not change is the member's own object, not a copy). The page's other fields are the gateway's:
``ttlMs``, ``cacheScope``, ``resultType: "complete"`` and, when some member is missing,
``_meta["io.mcp-edge/federation"]`` (the rules are in :mod:`.parts`); a member's own ``_meta``
and any other field of its page are not carried.

A member's page counts as missing (reason ``invalid``), its items left out, when it is not a
complete result of the method: a ``resultType`` other than ``complete``, the items not a list or
more than ``max_items`` of them, a ``nextCursor`` that is not a string the gateway carries
(:func:`.cursor.member_cursor_ok`; an empty string means no more pages, as clients read it).

A member's page too large for the merged answer is missing, reason ``too_large`` (:func:`fit_parts`):
the merged page has a bound of its own (the caller's: ``limits.max_inspect_bytes``, what the edge
reads of any answer), the members' pages are given room in configuration order, and a page that
does not fit in what is left is left out, so one member's large page never takes the others'
down.

Members with a next page, each with its own cursor, are :attr:`MergedList.pending`, in
configuration order: the caller seals them into the gateway's ``nextCursor``
(:func:`.cursor.seal_cursor`). A member missing on a later page is not carried further (the
listing ends for it; the page says it is missing), so paging always ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from mcp_edge.core.federation.cursor import member_cursor_ok
from mcp_edge.core.federation.names import INVALID_NAME, Kind, Namespace, Refused
from mcp_edge.core.federation.parts import (
    CacheHints,
    Dropped,
    ItemKind,
    Missing,
    MissingMember,
    Part,
    Parts,
    reported_name,
)

#: Most items one member's page may hold.
MAX_ITEMS: Final = 10_000
#: Bytes of a merged answer that are the gateway's own (envelope, cache hints, the missing
#: members), kept free of the members' pages by :func:`fit_parts`.
MERGE_OVERHEAD: Final = 8 * 1024

#: method -> (items key, renamed field, report kind, namespace kind)
LIST_METHODS: Final[dict[str, tuple[str, str, ItemKind, Kind]]] = {
    "tools/list": ("tools", "name", "tool", "tool"),
    "prompts/list": ("prompts", "name", "prompt", "prompt"),
    "resources/list": ("resources", "uri", "resource", "resource"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate", "template", "resource"),
}


@dataclass(slots=True)
class MergedList:
    result: dict[str, Any]
    dropped: list[Dropped]
    missing: list[MissingMember]
    #: (member, its own cursor) for each member with a next page, in configuration order.
    pending: list[tuple[str, str]]

    @property
    def private(self) -> bool:
        return bool(self.result["cacheScope"] == "private")


def _page(part: dict[str, Any], key: str, max_items: int) -> tuple[list[Any], str | None] | None:
    """A member's items and next cursor, or None if its page is not a complete list result."""
    if part.get("resultType", "complete") != "complete":
        return None
    items = part.get(key)
    if type(items) is not list or len(items) > max_items:
        return None
    cursor = part.get("nextCursor")
    if cursor is None or cursor == "":
        return items, None
    if not member_cursor_ok(cursor):
        return None
    return items, cursor


def fit_parts(parts: Parts, sizes: Sequence[int], bound: int) -> list[tuple[str, Part]]:
    """``parts`` with each page that does not fit in the merged answer's ``bound`` missing
    (``too_large``): pages get room in configuration order (``sizes``: each page's bytes as
    its member sent them), less :data:`MERGE_OVERHEAD`."""
    room = bound - MERGE_OVERHEAD
    out: list[tuple[str, Part]] = []
    for (member, part), size in zip(parts, sizes, strict=True):
        if not isinstance(part, Missing):
            if size > room:
                part = TOO_LARGE
            else:
                room -= size
        out.append((member, part))
    return out


TOO_LARGE: Final = Missing("too_large")


def merge_list(
    namespace: Namespace,
    method: str,
    parts: Parts,
    *,
    private: bool = False,
    max_items: int = MAX_ITEMS,
) -> MergedList:
    """Merge one page of ``method`` from ``parts`` (per member, configuration order: its parsed
    result or :class:`Missing`). ``private``: an earlier page of this listing was private (from
    the opened cursor). An unknown method is a ``ValueError``, an unknown member a ``KeyError``."""
    try:
        key, field, item_kind, kind = LIST_METHODS[method]
    except KeyError:
        raise ValueError(f"not a list method: {method!r}") from None
    hints = CacheHints(private=private)
    items: list[Any] = []
    dropped: list[Dropped] = []
    pending: list[tuple[str, str]] = []
    seen: set[str] = set()
    admit = namespace.admit
    for member, part in parts:
        namespace.prefix(member)  # an unknown member is the caller's bug: KeyError
        if isinstance(part, Missing):
            hints.absent(member, part.reason)
            continue
        page = _page(part, key, max_items) if type(part) is dict else None
        if page is None:
            hints.absent(member, "invalid")
            continue
        listed, cursor = page
        hints.present(part)
        for item in listed:
            original = item.get(field) if type(item) is dict else None
            federated = admit(kind, member, original) if original is not None else INVALID_NAME
            if isinstance(federated, Refused):
                dropped.append(
                    Dropped(member, item_kind, reported_name(original), federated.reason)
                )
                continue
            if federated in seen:
                dropped.append(Dropped(member, item_kind, reported_name(original), "collision"))
                continue
            seen.add(federated)
            items.append(item if federated == original else {**item, field: federated})
        if cursor is not None:
            pending.append((member, cursor))
    result = hints.stamp({key: items})
    return MergedList(result, dropped, hints.missing or [], pending)
