"""Merging the members' ``server/discover`` results into the route's.

- ``supportedVersions``: the versions every present member supports, in the first present
  member's order (empty when they share none, or no member answered: the caller decides what to
  answer then).
- ``capabilities``: ``tools``, ``prompts``, ``resources``, ``completions`` and ``logging`` are
  present if any present member has them; ``listChanged`` (tools, prompts, resources) and
  ``subscribe`` (resources) are ``true`` if any present member's is (and left out otherwise).
  Other sub-fields and other capabilities (``experimental``) are not carried. ``extensions``
  holds an extension only when every member of the route answered and advertises it with the same settings;
  never the tasks extension (``io.modelcontextprotocol/tasks``) on a route of several members:
  a task id names no member, so a task could not be routed.
- ``instructions``: a paragraph per member, in configuration order, naming it, how its names
  and URIs are prefixed, and its own instructions (blank runs and control, line-separator and
  bidirectional formatting characters turned into single spaces, so a member's text stays in its
  own paragraph; cut to :data:`MAX_MEMBER_INSTRUCTIONS` characters, and the whole to
  :data:`MAX_INSTRUCTIONS`). A missing member is named as not answering.
- ``_meta["io.modelcontextprotocol/serverInfo"]``: the gateway's own, as given.
- ``ttlMs``, ``cacheScope``, ``resultType`` and the missing members as for lists (:mod:`.parts`).

A member's result counts as missing (reason ``invalid``) when ``resultType`` is present and not
``complete``, ``capabilities`` is not an object, or ``supportedVersions`` is not a list of at
most 32 strings of at most 64 characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from mcp_edge.core.federation.names import FORBIDDEN, Namespace
from mcp_edge.core.federation.parts import CacheHints, Missing, MissingMember, Parts

TASKS_EXTENSION: Final = "io.modelcontextprotocol/tasks"
SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
MAX_MEMBER_INSTRUCTIONS: Final = 2048
MAX_INSTRUCTIONS: Final = 16 * 1024
MAX_VERSIONS: Final = 32
MAX_VERSION_CHARS: Final = 64

#: Capabilities carried, and the boolean flags of each that are true if any member's is.
CAPABILITY_FLAGS: Final[dict[str, tuple[str, ...]]] = {
    "tools": ("listChanged",),
    "prompts": ("listChanged",),
    "resources": ("listChanged", "subscribe"),
    "completions": (),
    "logging": (),
}


@dataclass(slots=True)
class MergedDiscover:
    result: dict[str, Any]
    missing: list[MissingMember]


def _versions(part: dict[str, Any]) -> list[str] | None:
    versions = part.get("supportedVersions")
    if type(versions) is not list or len(versions) > MAX_VERSIONS:
        return None
    if not all(type(v) is str and len(v) <= MAX_VERSION_CHARS for v in versions):
        return None
    return versions


def _canonical(value: object) -> bytes | None:
    """An extension's settings as comparable bytes; None when they cannot be (too deep)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None


def _clean(text: str) -> str:
    text = " ".join(FORBIDDEN.sub(" ", text[: MAX_MEMBER_INSTRUCTIONS * 4]).split())
    if len(text) > MAX_MEMBER_INSTRUCTIONS:
        text = text[: MAX_MEMBER_INSTRUCTIONS - 1].rstrip() + "…"
    return text


def _paragraph(namespace: Namespace, member: str, own: str | None, answered: bool) -> str:
    prefix = namespace.prefix(member)
    if prefix:
        head = (
            f"{member}: tools and prompts are named {prefix}{namespace.separator}<name>,"
            f" resources {prefix}+<uri>."
        )
    else:
        head = f"{member}: tools, prompts and resources keep their own names."
    if not answered:
        return f"{head} (It did not answer just now.)"
    return f"{head} {own}" if own else head


def merge_discover(
    namespace: Namespace, parts: Parts, *, server_info: Mapping[str, Any]
) -> MergedDiscover:
    """Merge the members' ``server/discover`` results (per member, configuration order: its
    parsed result or :class:`Missing`). An unknown member is a ``KeyError``."""
    hints = CacheHints()
    common: list[str] | None = None
    capabilities: dict[str, dict[str, Any]] = {}
    extensions: list[dict[str, Any]] = []
    paragraphs: list[str] = []
    for member, part in parts:
        namespace.prefix(member)
        versions = caps = None
        if type(part) is dict and part.get("resultType", "complete") == "complete":
            versions, caps = _versions(part), part.get("capabilities")
        if isinstance(part, Missing) or versions is None or type(caps) is not dict:
            hints.absent(member, part.reason if isinstance(part, Missing) else "invalid")
            paragraphs.append(_paragraph(namespace, member, None, answered=False))
            continue
        hints.present(part)
        if common is None:
            common = versions
        else:
            supported = set(versions)  # (at most MAX_VERSIONS each: a lookup per version)
            common = [v for v in common if v in supported]
        for name, flags in CAPABILITY_FLAGS.items():
            theirs = caps.get(name)
            if type(theirs) is not dict:
                continue
            ours = capabilities.setdefault(name, {})
            for flag in flags:
                if theirs.get(flag) is True:
                    ours[flag] = True
        ext = caps.get("extensions")
        extensions.append(ext if type(ext) is dict else {})
        text = part.get("instructions")
        own = _clean(text) if type(text) is str else None
        paragraphs.append(_paragraph(namespace, member, own, answered=True))

    if extensions and len(extensions) == len(namespace.members):
        shared = _shared_extensions(extensions, several=len(namespace.members) > 1)
        if shared:
            capabilities["extensions"] = shared
    instructions = (
        f"This endpoint joins {len(paragraphs)} MCP servers; each one's names carry its prefix"
        " (a renamed tool or prompt has the name it was given):\n\n" + "\n\n".join(paragraphs)
    )
    if len(instructions) > MAX_INSTRUCTIONS:
        instructions = instructions[: MAX_INSTRUCTIONS - 1] + "…"
    result: dict[str, Any] = {
        "supportedVersions": list(dict.fromkeys(common or [])),
        "capabilities": capabilities,
        "instructions": instructions,
        "_meta": {SERVER_INFO: dict(server_info)},
    }
    return MergedDiscover(hints.stamp(result), hints.missing or [])


def _shared_extensions(per_member: list[dict[str, Any]], *, several: bool) -> dict[str, Any]:
    """The extensions every member advertises with the same settings."""
    first, rest = per_member[0], per_member[1:]
    shared: dict[str, Any] = {}
    for name, settings in first.items():
        if several and name == TASKS_EXTENSION:
            continue
        mine = _canonical(settings)
        if mine is None:
            continue
        if all(name in other and _canonical(other[name]) == mine for other in rest):
            shared[name] = settings
    return shared
