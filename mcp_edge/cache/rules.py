"""Edge-cache rules without I/O: which requests may be answered from the cache, what the key is
made of, which upstream answers may be kept and for how long, and how a cached answer is written.

From the 2026-07-28 caching rules (``server/utilities/caching.mdx``): the complete results of
``server/discover``, ``tools/list``, ``prompts/list``, ``resources/list``,
``resources/templates/list`` and ``resources/read`` carry ``ttlMs`` (absent or negative: 0) and
``cacheScope``. A ``public`` result may be shared across callers, a ``private`` one only within
the authorization context it was fetched in. Retries carrying ``inputResponses`` /
``requestState`` and ``input_required`` results are never cached.

The key is made of the upstream request itself, as the upstream adapter sends it
(``mcp_edge.core.forwarded``: one description for both), because the gateway cannot know what a
given upstream looks at: the HTTP method, the query string, every header the upstream gets (the
client's that are forwarded, ``Accept``, ``Mcp-*`` and any other, and the ones the route adds:
its credential, the caller's identity header, a forwarded token), and the whole message but its
id (the params, all of ``_meta``: protocol version, the whole ``clientCapabilities``, client
info, extensions' fields). :data:`KEY_PARTS` says for each part of the description how it
counts. Left out are only what names one request rather than what it asks (the id, the progress
token, trace context, ``X-Request-Id``: kept in, no two requests would share an entry), the
endpoint (one of the route's, all serving one upstream: an HTTP upstream gets its ``Host``, an
app in this process the client's, which counts) and headers an operator lists as not changing
answers. A caller's identity that reaches the upstream is therefore part of the key, so
even a ``public`` result stays with the caller it was fetched for, unless the route trusts the
upstream's ``public`` (the identity is then left out of the key of public entries).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_edge.core.forwarded import Forwarded
from mcp_edge.core.mrtr import RETRY_FIELDS

CACHEABLE_METHODS = frozenset(
    {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    }
)

PUBLIC = "public"
PRIVATE = "private"


#: ``_meta`` members and request headers that name one request, not what it asks.
PER_REQUEST_META = frozenset({"progressToken", "traceparent", "tracestate"})
PER_REQUEST_HEADERS = frozenset({b"traceparent", b"tracestate", b"x-request-id"})

#: How each part of an upstream request (:class:`~mcp_edge.core.forwarded.Forwarded`) counts in
#: the key: ``(True, how)`` in it, ``(False, why)`` left out. Every part has its entry (a test
#: fails for a part added without one).
KEY_PARTS: dict[str, tuple[bool, str]] = {
    "method": (True, "as sent"),
    "query": (True, "as sent (the endpoint's URL is the route's, which is in the key)"),
    "headers": (
        True,
        "ordered by name, less those naming one request (PER_REQUEST_HEADERS) and the route's "
        "cache.ignore_headers (with cache.trust_public, the caller's identity too, in public "
        "entries only); Host as the upstream gets it: the client's for an app in this process, "
        "none for an HTTP upstream (it gets its chosen endpoint's, of one upstream)",
    ),
    "message": (True, "less its id and, in params._meta, PER_REQUEST_META"),
    "body": (
        False,
        "counted as its parse, message: the edge lets through only bodies that every parser "
        "reads the same, so bytes that parse the same ask the same",
    ),
}


def key_headers(
    forwarded: Iterable[tuple[bytes, bytes]], leave_out: Collection[bytes] = ()
) -> list[list[str]]:
    """The upstream request's headers as they count in the key: per-request ones and
    ``leave_out`` (lower-case names) removed, ordered by name (values of one name keep their
    order)."""
    kept = [
        [k.decode("latin-1"), v.decode("latin-1")]
        for k, v in forwarded
        if k not in PER_REQUEST_HEADERS and k not in leave_out
    ]
    kept.sort(key=lambda kv: kv[0])
    return kept


def key_message(message: Any) -> Any:
    """The message as it counts in the key: without its id and the ``_meta`` members that name
    one request."""
    if not isinstance(message, dict):
        return message
    rest = {k: v for k, v in message.items() if k != "id"}
    params = rest.get("params")
    if isinstance(params, dict):
        meta = params.get("_meta")
        if isinstance(meta, dict):
            kept = {k: v for k, v in meta.items() if k not in PER_REQUEST_META}
            rest["params"] = {**params, "_meta": kept}
    return rest


def request_fingerprint(forwarded: Forwarded, leave_out: Collection[bytes] = ()) -> bytes | None:
    """Canonical bytes of everything in the upstream request that can change its result (see
    :data:`KEY_PARTS`), or None when the request must neither be answered from nor fill the
    cache (an MRTR retry, a request that is not one JSON-RPC message)."""
    message = forwarded.message
    if not isinstance(message, dict):
        return None
    params = message.get("params")
    if isinstance(params, dict) and any(name in params for name in RETRY_FIELDS):
        return None
    parts = [
        forwarded.method,
        forwarded.query,
        key_message(message),
        key_headers(forwarded.headers, leave_out),
    ]
    try:
        return orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None


def private_partition(principal_id: str, authorization: str | None) -> str:
    """The authorization context of a private entry: the principal and the credential presented
    (another token of the same caller is another context, as the spec puts it)."""
    material = principal_id.encode() + b"\0" + (authorization or "").encode("latin-1")
    return hashlib.sha256(material).hexdigest()


def cache_key(gateway_id: str, route: str, scope: str, partition: str, fingerprint: bytes) -> str:
    digest = hashlib.sha256()
    for part in (
        b"mcp-edge/cache/v1",
        gateway_id.encode(),
        route.encode(),
        scope.encode(),
        partition.encode(),
    ):
        digest.update(part)
        digest.update(b"\0")
    digest.update(fingerprint)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class Cacheable:
    """An upstream result to keep: its scope and lifetime, and the result object without
    ``ttlMs`` as the bytes that follow ``{"ttlMs":N`` in a cached answer."""

    scope: str
    ttl_ms: int
    tail: bytes


def judge_response(
    body: bytes, request_id: Any, *, allow_private: bool, max_ttl_ms: int
) -> tuple[Cacheable | None, str]:
    """Whether an upstream's JSON answer (HTTP 200) may be cached: ``(entry, "stored")`` or
    ``(None, reason)`` with reason one of ``not_json``, ``not_ours``, ``error``,
    ``not_complete``, ``no_hint``, ``ttl_zero``, ``private``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, "not_json"
    return judge_result(doc, request_id, allow_private=allow_private, max_ttl_ms=max_ttl_ms)


def judge_result(
    doc: Any, request_id: Any, *, allow_private: bool, max_ttl_ms: int
) -> tuple[Cacheable | None, str]:
    """:func:`judge_response` for the answer's message already parsed."""
    if not isinstance(doc, dict) or doc.get("id") != request_id or doc.get("jsonrpc") != "2.0":
        return None, "not_ours"
    result = doc.get("result")
    if not isinstance(result, dict):
        return None, "error"
    if result.get("resultType") != "complete":
        return None, "not_complete"  # input_required, an extension's type, or no type at all
    scope = result.get("cacheScope")
    ttl = result.get("ttlMs")
    if scope not in (PUBLIC, PRIVATE) or isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        return None, "no_hint"
    ttl_ms = min(int(ttl), max_ttl_ms)
    if ttl_ms <= 0:
        return None, "ttl_zero"
    if scope == PRIVATE and not allow_private:
        return None, "private"
    rest = orjson.dumps({k: v for k, v in result.items() if k != "ttlMs"})
    tail = b"}" if rest == b"{}" else b"," + rest[1:]
    return Cacheable(scope, ttl_ms, tail), "stored"


def render_hit(request_id: Any, remaining_ms: int, tail: bytes) -> bytes:
    """A cached answer: the request's own id, and ``ttlMs`` counting down what is left."""
    return b'{"jsonrpc":"2.0","id":%b,"result":{"ttlMs":%d%b}' % (
        orjson.dumps(request_id),
        remaining_ms,
        tail,
    )
