"""Requests rewritten for their member; URIs in the members' answers rewritten to federated form.

Requests routed by name (no list is fetched to route them):

| method | the federated name in | routed with | `Mcp-Name` |
|---|---|---|---|
| `tools/call` | `params.name` | `route_tool` | the original |
| `prompts/get` | `params.name` | `route_prompt` | the original |
| `resources/read` | `params.uri` | `route_uri` | the original |
| `completion/complete` | `params.ref.name` (`ref/prompt`) | `route_prompt` | (none) |
| `completion/complete` | `params.ref.uri` (`ref/resource`) | `route_uri` | (none) |

:func:`route_request` gives the member, the original, the params with the name (or URI) replaced
by the member's own (every other field, ``_meta`` and ``requestState`` included, as sent), the
value for the ``Mcp-Name`` header and what the client asked for (errors name it); or why not:
``invalid_params`` (params not an object, the name or URI not a string, a ``ref`` of no known
type), ``not_canonical`` (a URI not in its canonical form, mcp_edge.core.uri: refused, never
forwarded, whatever member it would reach) or ``unknown`` (no member has it; the spec's
``-32602``, naming what was asked).

Answers: every URI a member puts where a client would use it as a resource URI is rewritten to
its federated form by the collision rule (:meth:`.names.Namespace.admit`, so a URI the member's
filter hides, or that would route to another member, is never shown):

- ``resources/read``: ``contents[].uri``;
- ``tools/call``: ``content[]`` items of type ``resource_link`` (``uri``) and ``resource``
  (``resource.uri``);
- ``prompts/get``: the same content items in ``messages[].content`` (one item or a list);
- ``notifications/resources/updated``: ``params.uri``.

A content item (or a prompt message whose only content it was, or the notification) whose URI is
refused is dropped, and reported. Items without a URI, shapes that are not these (a ``content``
that is not a list...) and other fields (``structuredContent``, text) pass as they are. The
member's answer is never changed in place: a changed answer is a new dict sharing what did not
change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from mcp_edge.core.federation.names import Kind, Namespace, Refused, Target, valid_uri
from mcp_edge.core.federation.parts import Dropped, reported_name

ROUTED_METHODS: Final = frozenset(
    {"tools/call", "prompts/get", "resources/read", "completion/complete"}
)
RESOURCE_UPDATED: Final = "notifications/resources/updated"


@dataclass(frozen=True, slots=True)
class Routed:
    member: str
    original: str  # the member's own name or URI
    params: dict[str, Any]  # the params to send the member
    mcp_name: str | None  # the ``Mcp-Name`` header's value (None: the method has none)
    #: What the client asked for, as errors the gateway makes name it: ``("name", the federated
    #: tool or prompt name)`` or ``("uri", the federated URI)``.
    asked: tuple[str, str]


@dataclass(frozen=True, slots=True)
class NotRouted:
    reason: Literal["invalid_params", "unknown", "not_canonical"]
    kind: Kind | None  # what was asked for, when known
    name: str | None  # the federated name or URI asked for (cut to 256 characters)
    #: ``not_canonical``: the URI's canonical spelling (None when it has none).
    canonical: str | None = None


_INVALID: Final = NotRouted("invalid_params", None, None)


def route_request(namespace: Namespace, method: str, params: object) -> Routed | NotRouted:
    """Route a request of one of :data:`ROUTED_METHODS` (any other method is a ``ValueError``)."""
    if method not in ROUTED_METHODS:
        raise ValueError(f"{method!r} is not routed by name")
    if type(params) is not dict:
        return _INVALID
    if method == "completion/complete":
        ref = params.get("ref")
        if type(ref) is not dict:
            return _INVALID
        kind: Kind
        if ref.get("type") == "ref/prompt":
            field, kind = "name", "prompt"
        elif ref.get("type") == "ref/resource":
            field, kind = "uri", "resource"
        else:
            return _INVALID
        found = _route(namespace, kind, ref.get(field))
        if not isinstance(found, Target):
            return found
        asked = ref[field]
        ref = {**ref, field: found.original}
        return Routed(found.member, found.original, {**params, "ref": ref}, None, (field, asked))
    if method == "resources/read":
        field, kind = "uri", "resource"
    else:
        field, kind = "name", "tool" if method == "tools/call" else "prompt"
    found = _route(namespace, kind, params.get(field))
    if not isinstance(found, Target):
        return found
    return Routed(
        found.member,
        found.original,
        {**params, field: found.original},
        found.original,
        (field, params[field]),
    )


def _route(namespace: Namespace, kind: Kind, name: object) -> Target | NotRouted:
    if type(name) is not str:
        return NotRouted("invalid_params", kind, None)
    if kind == "tool":
        found = namespace.route_tool(name)
    elif kind == "prompt":
        found = namespace.route_prompt(name)
    else:
        found = namespace.route_uri(name)
        if found is None and valid_uri(name):
            canonical = namespace.canonical_form(name)
            if canonical != name:
                return NotRouted("not_canonical", kind, name, canonical)
    return found if found is not None else NotRouted("unknown", kind, reported_name(name))


# ---------------------------------------------------------------- answers


class _Uris:
    """Rewrites one member's URIs, collecting what it drops."""

    __slots__ = ("dropped", "member", "namespace")

    def __init__(self, namespace: Namespace, member: str) -> None:
        namespace.prefix(member)  # an unknown member is the caller's bug: KeyError
        self.namespace = namespace
        self.member = member
        self.dropped: list[Dropped] = []

    def uri(self, uri: object) -> str | None:
        admitted = self.namespace.admit("resource", self.member, uri)
        if isinstance(admitted, Refused):
            self.dropped.append(
                Dropped(self.member, "resource", reported_name(uri), admitted.reason)
            )
            return None
        return admitted

    def holder(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """An object with a ``uri`` rewritten (itself when unchanged); None: drop it."""
        if "uri" not in item:
            return item
        uri = self.uri(item["uri"])
        if uri is None:
            return None
        return item if uri == item["uri"] else {**item, "uri": uri}

    def block(self, block: object) -> object | None:
        """A content block with its URI rewritten; None: drop it."""
        if type(block) is not dict:
            return block
        kind = block.get("type")
        if kind == "resource_link":
            return self.holder(block)
        if kind == "resource":
            inner = block.get("resource")
            if type(inner) is not dict:
                return block
            rewritten = self.holder(inner)
            if rewritten is None:
                return None
            return block if rewritten is inner else {**block, "resource": rewritten}
        return block

    def blocks(self, blocks: list[Any]) -> list[Any]:
        """A list of content blocks rewritten (itself when nothing changed)."""
        out: list[Any] | None = None
        for i, block in enumerate(blocks):
            rewritten = self.block(block)
            if rewritten is not block and out is None:
                out = blocks[:i]
            if out is not None and rewritten is not None:
                out.append(rewritten)
        return blocks if out is None else out


def federate_read_result(
    namespace: Namespace, member: str, result: object
) -> tuple[object, list[Dropped]]:
    """A ``resources/read`` result with ``contents[].uri`` federated."""
    uris = _Uris(namespace, member)
    if type(result) is not dict or type(result.get("contents")) is not list:
        return result, []
    contents: list[Any] = result["contents"]
    out: list[Any] | None = None
    for i, item in enumerate(contents):
        rewritten = uris.holder(item) if type(item) is dict else item
        if rewritten is not item and out is None:
            out = contents[:i]
        if out is not None and rewritten is not None:
            out.append(rewritten)
    if out is None:
        return result, uris.dropped
    return {**result, "contents": out}, uris.dropped


def federate_call_result(
    namespace: Namespace, member: str, result: object
) -> tuple[object, list[Dropped]]:
    """A ``tools/call`` result with its ``resource_link`` and embedded resource URIs federated."""
    uris = _Uris(namespace, member)
    if type(result) is not dict or type(result.get("content")) is not list:
        return result, []
    content = uris.blocks(result["content"])
    if content is result["content"]:
        return result, uris.dropped
    return {**result, "content": content}, uris.dropped


def federate_prompt_result(
    namespace: Namespace, member: str, result: object
) -> tuple[object, list[Dropped]]:
    """A ``prompts/get`` result with the URIs in its messages' content federated (a message
    whose single content block is dropped is dropped)."""
    uris = _Uris(namespace, member)
    if type(result) is not dict or type(result.get("messages")) is not list:
        return result, []
    messages: list[Any] = result["messages"]
    out: list[Any] | None = None
    for i, message in enumerate(messages):
        rewritten: object | None = message
        if type(message) is dict:
            content = message.get("content")
            if type(content) is list:
                new: object | None = uris.blocks(content)
            else:
                new = uris.block(content)
            if new is None:
                rewritten = None
            elif new is not content:
                rewritten = {**message, "content": new}
        if rewritten is not message and out is None:
            out = messages[:i]
        if out is not None and rewritten is not None:
            out.append(rewritten)
    if out is None:
        return result, uris.dropped
    return {**result, "messages": out}, uris.dropped


def federate_resource_updated(
    namespace: Namespace, member: str, message: object
) -> tuple[object | None, list[Dropped]]:
    """A member's ``notifications/resources/updated`` with ``params.uri`` federated; None (and
    the report) when its URI is refused, or it has none. Other messages pass unchanged."""
    uris = _Uris(namespace, member)
    if type(message) is not dict or message.get("method") != RESOURCE_UPDATED:
        return message, []
    params = message.get("params")
    if type(params) is not dict:
        return None, []
    uri = uris.uri(params.get("uri"))
    if uri is None:
        return None, uris.dropped
    if uri == params["uri"]:
        return message, []
    return {**message, "params": {**params, "uri": uri}}, []
