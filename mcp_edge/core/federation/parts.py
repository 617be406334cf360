"""A member's part of a fan-out, the cache hints of a merged answer, and the report of what a
merge left out.

A fan-out (``server/discover``, the four list methods) asks every member (or, for a later page,
the members still to page) and gets, per member in configuration order, either its parsed result
(a dict) or :class:`Missing` with a reason:

- ``timeout``: no answer within the member's deadline;
- ``unavailable``: the member is down or could not be reached;
- ``error``: it answered a JSON-RPC error (or an HTTP error);
- ``invalid``: it answered something that is not a result of the method (the merge itself also
  calls a part invalid when its shape is wrong: see :mod:`.lists` and :mod:`.discover`);
- ``too_large``: its answer was over ``limits.max_inspect_bytes``, or its part did not fit in
  what is left of the merged answer's own bound (:func:`.lists.fit_parts`).

Cache hints of a merged answer (2026-07-28 caching rules: a result carries ``ttlMs``, absent or
negative meaning 0, and ``cacheScope``, ``public`` or ``private``; every page of a list uses the
same scope):

- ``ttlMs`` is the least of the present parts' ``ttlMs`` (absent, negative, not a number: 0),
  and 0 when any member is missing (the answer is incomplete: nobody should keep it);
- ``cacheScope`` is ``public`` only when every present part says ``public`` and no member is
  missing and no earlier page of the same listing was ``private``; else ``private``. A part
  whose scope is absent or unknown counts as ``private`` (fail closed: what it shows may depend
  on the caller). A missing member makes the answer ``private`` too: why it failed (an expired
  credential, a rate limit) may be the caller's own.

Missing members are told to the client in ``result._meta["io.mcp-edge/federation"] =
{"missing": [{"member": "docs", "reason": "timeout"}, ...]}``, only when some are missing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcp_edge.core.federation.names import DropReason

MissingReason = Literal["timeout", "unavailable", "error", "invalid", "too_large"]
MISSING_REASONS: Final[frozenset[str]] = frozenset(
    {"timeout", "unavailable", "error", "invalid", "too_large"}
)
#: What a dropped item is: the metric's ``kind`` label.
ItemKind = Literal["tool", "prompt", "resource", "template"]

META_KEY: Final = "io.mcp-edge/federation"
PUBLIC: Final = "public"
PRIVATE: Final = "private"
#: Longest name kept in a drop report (the rest is cut: a report is for logs and metrics).
MAX_REPORTED_NAME: Final = 256


@dataclass(frozen=True, slots=True)
class Missing:
    """A member that gave no usable part."""

    reason: MissingReason

    def __post_init__(self) -> None:
        if self.reason not in MISSING_REASONS:
            raise ValueError(f"unknown missing reason {self.reason!r}")


#: Per member, in configuration order: its parsed result, or why it has none.
Part = dict[str, Any] | Missing
Parts = Sequence[tuple[str, Part]]


@dataclass(frozen=True, slots=True)
class MissingMember:
    member: str
    reason: MissingReason


@dataclass(frozen=True, slots=True)
class Dropped:
    """An item a member listed (or named in an answer) that the merge left out, for logs and
    ``mcp_edge_federation_collisions_total``. ``name`` is the member's own name or URI, cut to
    :data:`MAX_REPORTED_NAME` characters, or None when it was not a string."""

    member: str
    kind: ItemKind
    name: str | None
    reason: DropReason


def reported_name(original: object) -> str | None:
    return original[:MAX_REPORTED_NAME] if type(original) is str else None


def ttl_ms(part: dict[str, Any]) -> int:
    """A part's ``ttlMs`` as the caching rules read it: absent, negative or not a number is 0."""
    value = part.get("ttlMs")
    if type(value) is int:
        return value if value > 0 else 0
    if type(value) is float and math.isfinite(value) and value > 0:
        return int(value)
    return 0


@dataclass(slots=True)
class CacheHints:
    """Accumulates the cache hints of the parts of one merged answer (see the module's rules)."""

    private: bool = False
    ttl: int | None = None
    missing: list[MissingMember] | None = None

    def present(self, part: dict[str, Any]) -> None:
        ttl = ttl_ms(part)
        self.ttl = ttl if self.ttl is None else min(self.ttl, ttl)
        if part.get("cacheScope") != PUBLIC:
            self.private = True

    def absent(self, member: str, reason: MissingReason) -> None:
        if self.missing is None:
            self.missing = []
        self.missing.append(MissingMember(member, reason))

    def stamp(self, result: dict[str, Any]) -> dict[str, Any]:
        """Put ``ttlMs``, ``cacheScope``, ``resultType`` and the missing members on a result."""
        result["ttlMs"] = 0 if self.missing or self.ttl is None else self.ttl
        result["cacheScope"] = PRIVATE if self.private or self.missing else PUBLIC
        result["resultType"] = "complete"
        if self.missing:
            meta = result.get("_meta")
            if type(meta) is not dict:
                meta = result["_meta"] = {}
            meta[META_KEY] = {
                "missing": [{"member": m.member, "reason": m.reason} for m in self.missing]
            }
        return result
