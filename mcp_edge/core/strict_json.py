"""Refusing JSON texts whose meaning depends on the parser that reads them.

The edge reads a body with orjson; the upstream reads the bytes the edge forwards with a parser of
its own (the Python SDK: the standard library's ``json`` on the 2026-07-28 leg, ``pydantic_core``
on the legacy leg; other SDKs bring Go's, JavaScript's, ...). Where two parsers that both follow
RFC 8259 may read one text differently, what the edge checked and bound a sealed state to would
not be what the upstream acts on. Such a text is refused with ``-32700``:

* **a member name twice in one object**, at any depth, however spelled (``"\\u006eame"`` is
  ``"name"``). RFC 8259 leaves the meaning open: orjson, ``json`` and ``pydantic_core`` keep the
  last value, other parsers the first, some fail;
* **an integer orjson cannot hold exactly** (outside -2^63 .. 2^64-1). orjson reads it as a
  float, ``json`` as the exact integer: two different numbers would share one digest;
* **nesting deeper than** ``max_depth``. orjson reads 1024 levels but writes only 254 (the edge
  re-encodes retries), ``pydantic_core`` stops near 254, ``json`` near 1000 less the stack
  already in use.

What orjson refuses by itself (NaN and Infinity, lone surrogates, invalid UTF-8, a byte order
mark, anything after the value, numbers beyond a double) never gets here: ``parse_json`` already
answers ``-32700``, although ``json`` would read most of those.

Cost: two byte counts on every body, then one encode when the body is compact JSON as orjson
writes it (what SDK clients send: nothing left to check), else a walk over the parsed containers
and a third byte count; the exact (slower) pass with the standard library runs only when that
cheap test cannot rule a duplicate out (a ``:`` inside a string) or a suspicious float turned
up. See ``bench/micro.py``.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from mcp_edge.core.errors import PARSE_ERROR, RpcError

#: Nesting the edge accepts by default (objects and arrays; ``{"a": [1]}`` is 2 levels).
DEFAULT_MAX_DEPTH = 64
#: Above this no parser involved agrees (orjson writes at most 254 levels).
MAX_DEPTH_LIMIT = 200

_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
#: A float at least this large may be an integer literal orjson could not hold.
_SUSPICIOUS = 9.2e18
_NAME_SHOWN = 64


class _OutOfRange(Exception):
    pass


def check(body: bytes, doc: Any, *, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
    """Raise a ``-32700`` :class:`RpcError` when ``body`` (which orjson parsed into ``doc``) has a
    meaning that depends on the parser; return None otherwise."""
    if body.count(b"{") + body.count(b"[") <= max_depth:  # too few containers to be too deep
        if _canonical(body, doc):
            return
        members, suspicious = _count(doc)
    else:
        members, suspicious = _walk(doc, max_depth)
    # Every member of every object has exactly one ':' outside strings, and a ':' inside a string
    # adds one more: when the count equals the members orjson kept, no member was dropped, so no
    # name came twice. Otherwise (a ':' in a string, say a URI) the exact pass decides.
    need_pairs = body.count(b":") != members
    if need_pairs or suspicious:
        _exact(body, pairs=need_pairs, integers=suspicious, root_object=type(doc) is dict)


def _canonical(body: bytes, doc: Any) -> bool:
    """Whether ``body`` is exactly what orjson writes for ``doc``. Then no member was dropped
    (orjson never writes a name twice) and every integer was held exactly (one read as a float
    is written back as a float, not as the digits sent), so nothing is left to check. Compact
    JSON, as the SDK clients send it, mostly is: one encode and one comparison instead of a walk
    over the document."""
    try:
        return orjson.dumps(doc) == body
    except orjson.JSONEncodeError:  # nested deeper than orjson writes
        return False


def id_is_ambiguous(error: RpcError) -> bool:
    """Whether ``error`` was raised because the request's own ``id`` came twice (then no id can
    be echoed)."""
    return (
        isinstance(error.data, dict)
        and error.data.get("reason") == "duplicate_key"
        and (error.data.get("key") == "id" and bool(error.data.get("topLevel")))
    )


def _count(doc: Any) -> tuple[int, bool]:
    """:func:`_walk` without the depth bound (the caller knows it cannot be passed)."""
    t = type(doc)
    if t is not dict and t is not list:
        return 0, t is float and not -_SUSPICIOUS < doc < _SUSPICIOUS
    members = 0
    suspicious = False
    stack: list[Any] = [doc]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if type(node) is dict:
            members += len(node)
            node = node.values()
        for value in node:
            t = type(value)
            if t is dict or t is list:
                if value:
                    push(value)
            elif t is float and not -_SUSPICIOUS < value < _SUSPICIOUS:
                suspicious = True
    return members, suspicious


def _walk(doc: Any, max_depth: int) -> tuple[int, bool]:
    """Members kept in all objects, and whether a float that may come from an over-long integer
    literal is present. Raises the too-deep error."""
    t = type(doc)
    if t is not dict and t is not list:
        return 0, t is float and not -_SUSPICIOUS < doc < _SUSPICIOUS
    members = 0
    suspicious = False
    stack: list[tuple[Any, int]] = [(doc, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > max_depth:
            raise too_deep(max_depth)
        if type(node) is dict:
            members += len(node)
            node = node.values()
        for value in node:
            t = type(value)
            if t is dict or t is list:
                push((value, depth + 1))
            elif t is float and not -_SUSPICIOUS < value < _SUSPICIOUS:
                suspicious = True
    return members, suspicious


def _exact(body: bytes, *, pairs: bool, integers: bool, root_object: bool) -> None:
    """The standard library's parser over the same bytes, seeing every object's members in order
    and every integer literal as written."""
    repeated: list[str] = []
    outermost: list[str] = []  # the repeats of the object parsed last: the root, if an object

    def pairs_hook(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(items)
        outermost.clear()
        if len(out) != len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    outermost.append(key)
                seen.add(key)
            repeated.extend(outermost)
        return out

    def int_hook(text: str) -> int:
        value = int(text)
        if not _I64_MIN <= value <= _U64_MAX:
            raise _OutOfRange
        return value

    try:
        json.loads(
            body,
            object_pairs_hook=pairs_hook if pairs else None,
            parse_int=int_hook if integers else None,
        )
    except _OutOfRange:
        raise RpcError(
            PARSE_ERROR,
            "Parse error: an integer outside -2^63..2^64-1 (parsers disagree on its value)",
            {"reason": "number_out_of_range"},
        ) from None
    except RecursionError:
        raise too_deep(MAX_DEPTH_LIMIT) from None
    except ValueError:  # int() past its digit limit
        raise RpcError(
            PARSE_ERROR,
            "Parse error: a number too long to read the same everywhere",
            {"reason": "number_out_of_range"},
        ) from None
    if not repeated:
        return
    top = root_object and bool(outermost)
    key = ("id" if "id" in outermost else outermost[0]) if top else repeated[0]
    shown = key if len(key) <= _NAME_SHOWN else key[:_NAME_SHOWN] + "..."
    data: dict[str, Any] = {"reason": "duplicate_key", "key": shown}
    if top:
        data["topLevel"] = True
    raise RpcError(
        PARSE_ERROR, f"Parse error: the member name {shown!r} appears twice in one object", data
    )


def too_deep(max_depth: int) -> RpcError:
    return RpcError(
        PARSE_ERROR,
        f"Parse error: JSON nested deeper than {max_depth} levels",
        {"reason": "too_deep", "maxDepth": max_depth},
    )
