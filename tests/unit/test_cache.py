"""The edge cache without a network: key rules, which answers may be kept, the cached answer's
shape, the byte-bounded LRU, and the layer behind a guard's context (retries bypass it, a hit
never reaches the inner app, the remaining ttlMs counts down)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from mcp_edge.auth.base import ANONYMOUS, Principal
from mcp_edge.cache.layer import CacheMetrics, EdgeCacheLayer
from mcp_edge.cache.rules import (
    CACHEABLE_METHODS,
    KEY_PARTS,
    PER_REQUEST_HEADERS,
    PER_REQUEST_META,
    cache_key,
    judge_response,
    key_headers,
    private_partition,
    render_hit,
    request_fingerprint,
)
from mcp_edge.cache.store import Entry, MemoryCache
from mcp_edge.core.forwarded import Forwarded, describe
from mcp_edge.core.jsonrpc import Message
from mcp_edge.edge.context import get_context
from mcp_edge.edge.forwarding import Forwarding
from mcp_edge.observability.metrics import Metrics
from mcp_edge.server.config import ConfigError, load_config

V = "io.modelcontextprotocol/protocolVersion"
C = "io.modelcontextprotocol/clientCapabilities"


def meta(caps: dict | None = None, **more: Any) -> dict[str, Any]:
    return {V: "2026-07-28", C: caps or {}, **more}


# ---------------------------------------------------------------- keys


def forwarded(
    method: str = "tools/list",
    params: dict[str, Any] | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    query: bytes = b"",
    rid: Any = 1,
    **top: Any,
) -> Forwarded:
    """The upstream request the proxy would send for one client request (no endpoint chosen)."""
    message = {"jsonrpc": "2.0", "id": rid, "method": method, **top}
    if params is not None:
        message["params"] = params
    return describe("POST", query, headers or [], orjson.dumps(message), message, modern=True)


def fp(*args: Any, leave_out: Any = (), **kwargs: Any) -> bytes | None:
    return request_fingerprint(forwarded(*args, **kwargs), leave_out)


def test_fingerprint_covers_meta_but_what_names_one_request():
    base = fp("tools/list", {"_meta": meta()})
    # progress token and trace context name this request, not what it asks; so does the id
    assert base == fp(
        "tools/list", {"_meta": meta(progressToken=5, traceparent="00-abc", tracestate="x=1")}
    )
    assert base == fp("tools/list", {"_meta": meta()}, rid="another")
    # everything else of _meta reaches the upstream and can change its answer
    assert base != fp(
        "tools/list", {"_meta": meta(**{"io.modelcontextprotocol/clientInfo": {"name": "x"}})}
    )
    assert base != fp("tools/list", {"_meta": meta(**{"com.example/tenant": "a"})})
    assert base != fp("tools/list", {"_meta": meta({"elicitation": {}})})
    assert base != fp("tools/list", {"_meta": meta({"extensions": {"io.x/ui": {}}})})
    assert base != fp("tools/list", {"cursor": "2", "_meta": meta()})
    assert base != fp("prompts/list", {"_meta": meta()})
    # key order does not matter
    a = fp("resources/read", {"uri": "x://1", "_meta": meta({"a": {"x": 1, "y": 2}, "b": {}})})
    b = fp(
        "resources/read",
        {"_meta": {C: {"b": {}, "a": {"y": 2, "x": 1}}, V: "2026-07-28"}, "uri": "x://1"},
    )
    assert a == b


def test_fingerprint_covers_the_headers_the_upstream_gets():
    client = [
        (b"accept", b"application/json, text/event-stream"),
        (b"mcp-method", b"tools/list"),
        (b"x-tenant", b"a"),
        (b"host", b"gateway:1"),
        (b"traceparent", b"00-1"),
        (b"x-request-id", b"r1"),
    ]
    params = {"_meta": meta()}
    base = fp("tools/list", params, client)
    assert key_headers(forwarded("tools/list", params, client).headers) == [
        ["accept", "application/json, text/event-stream"],
        ["accept-encoding", "identity"],
        ["mcp-method", "tools/list"],
        ["x-tenant", "a"],
    ]
    other_request = [
        (k, b"other") if k in (b"traceparent", b"x-request-id", b"host") else (k, v)
        for k, v in client
    ]
    assert fp("tools/list", params, other_request) == base
    other_tenant = [(k, b"b") if k == b"x-tenant" else (k, v) for k, v in client]
    assert fp("tools/list", params, other_tenant) != base
    assert fp("tools/list", params, other_tenant, leave_out={b"x-tenant"}) == fp(
        "tools/list", params, client, leave_out={b"x-tenant"}
    )
    assert fp("tools/list", params, [*client, (b"accept", b"*/*")]) != base
    assert fp("tools/list", params, list(reversed(client))) == base
    # What the gateway does not forward is not part of what the upstream is asked.
    assert fp("tools/list", params, [*client, (b"authorization", b"Bearer x")]) == base
    assert fp("tools/list", params, [*client, (b"mcp-session-id", b"s")]) == base


def test_the_query_string_the_upstream_gets_is_part_of_the_key():
    params = {"uri": "x://1", "_meta": meta()}
    base = fp("resources/read", params)
    assert fp("resources/read", params, query=b"tenant=X") not in (base, None)
    assert fp("resources/read", params, query=b"tenant=X") != fp(
        "resources/read", params, query=b"tenant=Y"
    )
    # An access_token never reaches the upstream (mcp_edge.core.forwarded): not a part of it.
    assert fp("resources/read", params, query=b"tenant=X&access_token=t") == fp(
        "resources/read", params, query=b"tenant=X"
    )


#: One change to each part of an upstream request (a ``Forwarded`` field), made to the
#: ``forwarded()`` above. A part of the description without a variant here fails the test
#: below, and so does one whose change is not counted as :data:`KEY_PARTS` says.
VARIANTS: dict[str, Any] = {
    "method": lambda f: Forwarded("GET", f.query, f.headers, f.body, f.message),
    "query": lambda f: Forwarded(f.method, "tenant=X", f.headers, f.body, f.message),
    "headers": lambda f: Forwarded(
        f.method, f.query, [*f.headers, (b"x-tenant", b"X")], f.body, f.message
    ),
    "message": lambda f: Forwarded(
        f.method, f.query, f.headers, f.body, {**f.message, "params": {"uri": "x://2"}}
    ),
    "body": lambda f: Forwarded(f.method, f.query, f.headers, f.body + b"\n", f.message),
}


def test_every_part_of_the_upstream_request_counts_in_the_key_or_is_left_out_on_purpose():
    parts = set(Forwarded.__slots__)
    assert parts == set(KEY_PARTS), "a part of the upstream request without a key decision"
    assert parts == set(VARIANTS), "a part of the upstream request this test does not change"
    base = forwarded("resources/read", {"uri": "x://1", "_meta": meta()}, [(b"accept", b"*/*")])
    key = request_fingerprint(base)
    assert key is not None
    for part in sorted(parts):
        keyed, why = KEY_PARTS[part]
        assert why
        changed = request_fingerprint(VARIANTS[part](base))
        assert (changed != key) is keyed, part


def test_every_member_of_the_message_counts_but_its_id_and_per_request_meta():
    params = {"uri": "x://1", "_meta": meta(), "extra": 1}
    base = forwarded("resources/read", params, unknown="u")
    key = request_fingerprint(base)
    for member in base.message:
        changed = {**base.message, member: "changed"}
        other = request_fingerprint(
            Forwarded(base.method, base.query, base.headers, base.body, changed)
        )
        assert (other != key) is (member != "id"), member
    for member in params:
        changed = {**base.message, "params": {**params, member: "changed"}}
        other = request_fingerprint(
            Forwarded(base.method, base.query, base.headers, base.body, changed)
        )
        assert other != key, member
    for name in [*PER_REQUEST_META, "com.example/other"]:
        changed = {**base.message, "params": {**params, "_meta": {**meta(), name: "x"}}}
        other = request_fingerprint(
            Forwarded(base.method, base.query, base.headers, base.body, changed)
        )
        assert (other == key) is (name in PER_REQUEST_META), name


def test_every_header_counts_but_those_naming_one_request():
    base = forwarded("tools/list", {"_meta": meta()})
    key = request_fingerprint(base)
    for name in [*PER_REQUEST_HEADERS, b"x-anything", b"accept-language"]:
        other = request_fingerprint(
            Forwarded(
                base.method, base.query, [*base.headers, (name, b"x")], base.body, base.message
            )
        )
        assert (other == key) is (name in PER_REQUEST_HEADERS), name


def test_keys_separate_routes_scopes_and_callers():
    one = fp("tools/list", {"_meta": meta()})
    assert one is not None
    keys = {
        cache_key("gw", "a", "public", "", one),
        cache_key("gw", "b", "public", "", one),
        cache_key("gw2", "a", "public", "", one),
        cache_key("gw", "a", "private", private_partition("alice", None), one),
        cache_key("gw", "a", "private", private_partition("bob", None), one),
        cache_key("gw", "a", "private", private_partition("alice", "Bearer t2"), one),
    }
    assert len(keys) == 6
    assert cache_key("gw", "a", "public", "", one) == cache_key("gw", "a", "public", "", one)
    assert {
        "server/discover",
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "resources/read",
    } == CACHEABLE_METHODS


# ---------------------------------------------------------------- what may be kept


def answer(result: Any, rid: Any = 1, **top: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result, **top})


def complete(**hints: Any) -> dict[str, Any]:
    return {"tools": [{"name": "t"}], "resultType": "complete", **hints}


@pytest.mark.parametrize(
    "body,reason",
    [
        (answer(complete(ttlMs=1000, cacheScope="public")), "stored"),
        (answer(complete(ttlMs=1000.7, cacheScope="public")), "stored"),
        (answer(complete(ttlMs=0, cacheScope="public")), "ttl_zero"),
        (answer(complete(ttlMs=-5, cacheScope="public")), "ttl_zero"),
        (answer(complete(cacheScope="public")), "no_hint"),
        (answer(complete(ttlMs=1000)), "no_hint"),
        (answer(complete(ttlMs=True, cacheScope="public")), "no_hint"),
        (answer(complete(ttlMs="1000", cacheScope="public")), "no_hint"),
        (answer(complete(ttlMs=1000, cacheScope="shared")), "no_hint"),
        (answer(complete(ttlMs=1000, cacheScope="private")), "private"),
        (
            answer(
                {
                    "resultType": "input_required",
                    "requestState": "s",
                    "ttlMs": 1000,
                    "cacheScope": "public",
                }
            ),
            "not_complete",
        ),
        (answer({"tools": [], "ttlMs": 1000, "cacheScope": "public"}), "not_complete"),
        (
            orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}}),
            "error",
        ),
        (answer(complete(ttlMs=1000, cacheScope="public"), rid=2), "not_ours"),
        (b"{not json", "not_json"),
    ],
)
def test_which_answers_are_kept(body, reason):
    entry, why = judge_response(body, 1, allow_private=False, max_ttl_ms=3_600_000)
    assert why == reason
    assert (entry is not None) == (reason == "stored")


def test_private_kept_when_allowed_and_ttl_capped():
    entry, _ = judge_response(
        answer(complete(ttlMs=10**9, cacheScope="private")), 1, allow_private=True, max_ttl_ms=5000
    )
    assert entry is not None and entry.scope == "private" and entry.ttl_ms == 5000


@pytest.mark.parametrize("rid", [7, "req-7"])
def test_a_hit_carries_the_requests_id_and_the_time_left(rid):
    result = complete(
        ttlMs=1000, cacheScope="public", _meta={"io.modelcontextprotocol/serverInfo": {"name": "u"}}
    )
    entry, _ = judge_response(answer(result, rid=1), 1, allow_private=False, max_ttl_ms=10**7)
    doc = orjson.loads(render_hit(rid, 420, entry.tail))
    assert doc == {"jsonrpc": "2.0", "id": rid, "result": {**result, "ttlMs": 420}}
    empty, _ = judge_response(
        answer({"resultType": "complete", "ttlMs": 5, "cacheScope": "public"}),
        1,
        allow_private=False,
        max_ttl_ms=10,
    )
    assert orjson.loads(render_hit(1, 3, empty.tail))["result"] == {
        "resultType": "complete",
        "cacheScope": "public",
        "ttlMs": 3,
    }


# ---------------------------------------------------------------- the LRU


def test_lru_is_bounded_in_bytes_and_evicts_least_recently_used():
    evicted: list[tuple[str, str]] = []
    cache = MemoryCache(
        3 * (1000 + 200 + 1), on_evict=lambda route, reason: evicted.append((route, reason))
    )
    body = b"x" * 1000
    for key in "abc":
        cache.store(key, Entry(10_000, "public", "r", body), now_ms=0)
    assert len(cache) == 3 and cache.bytes <= cache.max_bytes
    assert cache.lookup("a", 1) == Entry(
        10_000, "public", "r", body
    )  # a is now the most recently used
    cache.store("d", Entry(10_000, "public", "r", body), now_ms=1)
    assert cache.lookup("b", 1) is None and cache.lookup("a", 1) == Entry(
        10_000, "public", "r", body
    )
    assert evicted == [("r", "size")]
    assert cache.lookup("c", 10_000) is None  # expired
    assert evicted[-1] == ("r", "expired")
    cache.store(
        "huge", Entry(10_000, "public", "r", b"x" * 10_000), now_ms=1
    )  # larger than the cache
    assert cache.lookup("huge", 1) is None and len(cache) == 2


def test_entry_round_trips_through_its_redis_encoding():
    entry = Entry(1234567, "private", "route-1", b',"a":"\n"}')
    assert Entry.decode(entry.encode()) == entry
    assert Entry.decode(b"garbage") is None


def test_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes: [{upstream: 'http://x/mcp', cache: {enabled: true, private: true}}]\n"
    )
    with pytest.raises(ConfigError, match="cache.private needs authenticated callers"):
        load_config(str(cfg), env={})
    cfg.write_text(
        "cache: {backend: redis}\nroutes: [{upstream: 'http://x/mcp', cache: {enabled: true}}]\n"
    )
    with pytest.raises(ConfigError, match="cache.backend: redis uses the store's Redis"):
        load_config(str(cfg), env={})
    route = (
        "{upstream: 'http://x/mcp', upstream_auth: {principal_header: X-MCP-Principal}, cache: %s}"
    )
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes: ["
        + route % "{enabled: true, ignore_headers: [x-mcp-principal]}"
        + "]\n"
    )
    with pytest.raises(ConfigError, match="cannot leave out the caller's identity"):
        load_config(str(cfg), env={})
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes: ["
        + route % "{enabled: true, ignore_headers: [Authorization]}"
        + "]\n"
    )
    with pytest.raises(ConfigError, match="a credential is always part of the key"):
        load_config(str(cfg), env={})
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes: ["
        + route % "{enabled: true, ignore_headers: ['bad name']}"
        + "]\n"
    )
    with pytest.raises(ConfigError, match="is not a header name"):
        load_config(str(cfg), env={})
    cfg.write_text(
        "auth: {mode: anonymous}\nroutes: ["
        + route % "{enabled: true, ignore_headers: [X-Forwarded-For]}"
        + "]\n"
    )
    cache = load_config(str(cfg), env={}).routes[0].cache
    assert (cache.trust_public, cache.ignore_headers) == (False, ["x-forwarded-for"])


# ---------------------------------------------------------------- the layer


class Upstream:
    """An inner app answering each request with a complete result carrying the given hints."""

    def __init__(self, **hints: Any) -> None:
        self.hints = hints
        self.seen = 0

    async def __call__(self, scope, receive, send) -> None:
        rid = orjson.loads((await receive())["body"])["id"]
        self.seen += 1
        body = answer({"n": self.seen, "resultType": "complete", **self.hints}, rid=rid)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(
    upstream: Upstream, *, private=False, clock=None, **options: Any
) -> tuple[EdgeCacheLayer, CacheMetrics]:
    metrics = CacheMetrics(Metrics().registry)
    layer = EdgeCacheLayer(
        upstream,
        gateway_id="gw",
        route="r",
        backend=MemoryCache(1 << 20),
        metrics=metrics,
        allow_private=private,
        clock=clock or Clock(),
        **options,
    )
    return layer, metrics


async def ask(
    layer,
    rid: Any,
    method="tools/list",
    principal: Principal = ANONYMOUS,
    retry=False,
    extra: dict | None = None,
    authorization: bytes | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    query: bytes = b"",
) -> tuple[dict, dict]:
    params = {"_meta": meta(), **(extra or {})}
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    headers = [*(headers or []), *([(b"authorization", authorization)] if authorization else [])]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "query_string": query,
        "headers": headers,
    }
    ctx = get_context(scope)
    ctx.modern, ctx.rpc_method, ctx.request_id, ctx.principal, ctx.retry_fields = (
        True,
        method,
        rid,
        principal,
        retry,
    )
    ctx.body, ctx.message, ctx.parsed = body, orjson.loads(body), True  # as the edge leaves it
    ctx.rpc = Message(ctx.message)
    out: dict[str, Any] = {}

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["headers"] = dict(message["headers"])
        else:
            out["doc"] = orjson.loads(message["body"])

    await layer(scope, receive, send)
    return out["headers"], out["doc"]


async def test_hit_does_not_reach_the_inner_app_and_counts_down():
    clock = Clock()
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, _ = make(upstream, clock=clock)
    h1, d1 = await ask(layer, 1)
    clock.now += 0.25
    h2, d2 = await ask(layer, "two")
    assert (h1[b"x-mcp-edge-cache"], h2[b"x-mcp-edge-cache"]) == (b"miss", b"hit")
    assert upstream.seen == 1 and d2["id"] == "two" and d2["result"]["n"] == 1
    assert d2["result"]["ttlMs"] == 750
    clock.now += 0.75  # expired
    _, d3 = await ask(layer, 3)
    assert upstream.seen == 2 and d3["result"]["n"] == 2


async def test_methods_other_than_the_six_and_retries_pass_by():
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, metrics = make(upstream)
    for rid in range(2):
        headers, _ = await ask(layer, rid, method="tools/call")
        assert b"x-mcp-edge-cache" not in headers
    for rid in range(2):
        await ask(layer, rid, method="resources/read", retry=True, extra={"uri": "x://a"})
    assert upstream.seen == 4
    lookups = {
        s.labels["result"]: s.value
        for m in metrics.lookups.collect()
        for s in m.samples
        if s.name.endswith("_total")
    }
    assert lookups == {"hit": 0, "miss": 0, "bypass": 2}


async def test_private_entries_belong_to_one_caller_and_one_credential():
    upstream = Upstream(ttlMs=1000, cacheScope="private")
    layer, _ = make(upstream, private=True)
    alice, bob = Principal("alice"), Principal("bob")
    await ask(layer, 1, principal=alice, authorization=b"Bearer a1")
    _, hit = await ask(layer, 2, principal=alice, authorization=b"Bearer a1")
    assert upstream.seen == 1 and hit["result"]["n"] == 1
    _, other = await ask(layer, 3, principal=bob, authorization=b"Bearer a1")
    assert upstream.seen == 2 and other["result"]["n"] == 2
    await ask(layer, 4, principal=alice, authorization=b"Bearer a2")  # a new token of alice's
    assert upstream.seen == 3
    await ask(layer, 5, principal=ANONYMOUS)
    await ask(layer, 6, principal=ANONYMOUS)  # anonymous callers never share private entries
    assert upstream.seen == 5


async def test_private_results_are_not_kept_unless_the_route_says_so():
    upstream = Upstream(ttlMs=1000, cacheScope="private")
    layer, _ = make(upstream, private=False)
    for rid in range(3):
        await ask(layer, rid, principal=Principal("alice"))
    assert upstream.seen == 3


def identity_header(ctx: Any) -> list[tuple[str, str]]:
    """What a route with ``upstream_auth.principal_header`` adds for each caller."""
    return [("x-api-key", "route-secret"), ("x-mcp-principal", ctx.principal.id)]


async def test_a_public_result_stays_with_the_caller_whose_identity_reached_the_upstream():
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, _ = make(
        upstream,
        forwarding=Forwarding(header_hook=identity_header),
        identity_headers=["X-MCP-Principal"],
    )
    alice, bob = Principal("alice"), Principal("bob")
    _, a1 = await ask(layer, 1, principal=alice)
    _, b1 = await ask(layer, 2, principal=bob)
    assert upstream.seen == 2 and (a1["result"]["n"], b1["result"]["n"]) == (1, 2)
    headers, a2 = await ask(layer, 3, principal=alice)
    assert headers[b"x-mcp-edge-cache"] == b"hit" and a2["result"]["n"] == 1 and upstream.seen == 2


async def test_trust_public_shares_public_results_across_callers_and_nothing_else():
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, _ = make(
        upstream,
        forwarding=Forwarding(header_hook=identity_header),
        identity_headers=["X-MCP-Principal"],
        trust_public=True,
    )
    await ask(layer, 1, principal=Principal("alice"))
    _, hit = await ask(layer, 2, principal=Principal("bob"))
    assert upstream.seen == 1 and hit["result"]["n"] == 1
    await ask(
        layer, 3, principal=Principal("bob"), headers=[(b"x-tenant", b"b")]
    )  # still another request
    assert upstream.seen == 2


async def test_forwarded_headers_and_meta_outside_the_old_key_are_other_entries():
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, _ = make(
        upstream,
        forwarding=Forwarding(drop_headers=["x-forwarded-user"]),
        ignore_headers=["X-Forwarded-For"],
    )
    await ask(layer, 1, headers=[(b"x-tenant", b"a")])
    await ask(layer, 2, headers=[(b"x-tenant", b"b")])
    await ask(layer, 3, headers=[(b"x-tenant", b"a"), (b"accept-language", b"fr")])
    await ask(
        layer,
        4,
        extra={"_meta": meta(**{"com.example/tenant": "b"})},
        headers=[(b"x-tenant", b"a")],
    )
    assert upstream.seen == 4
    # Not forwarded (the route drops it), ignored by the operator, or naming one request: a hit.
    for rid, headers in enumerate(
        [
            [(b"x-tenant", b"a"), (b"x-forwarded-user", b"mallory")],
            [(b"x-tenant", b"a"), (b"x-forwarded-for", b"10.0.0.9")],
            [(b"x-tenant", b"a"), (b"traceparent", b"00-1"), (b"x-request-id", b"r9")],
            [(b"x-tenant", b"a"), (b"connection", b"keep-alive")],
        ]
    ):
        h, doc = await ask(layer, 10 + rid, headers=headers)
        assert h[b"x-mcp-edge-cache"] == b"hit" and doc["result"]["n"] == 1, headers
    assert upstream.seen == 4


async def test_a_query_string_the_upstream_gets_is_another_entry():
    """``POST /mcp?tenant=X`` reaches the upstream with its query: its answer is never given to
    a request without it, nor to one with another."""
    upstream = Upstream(ttlMs=1000, cacheScope="public")
    layer, _ = make(upstream)
    _, tenant = await ask(
        layer, 1, method="resources/read", extra={"uri": "x://a"}, query=b"tenant=X"
    )
    headers, plain = await ask(layer, 2, method="resources/read", extra={"uri": "x://a"})
    assert headers[b"x-mcp-edge-cache"] == b"miss" and plain["result"]["n"] == 2
    headers, other = await ask(
        layer, 3, method="resources/read", extra={"uri": "x://a"}, query=b"tenant=Y"
    )
    assert headers[b"x-mcp-edge-cache"] == b"miss" and other["result"]["n"] == 3
    headers, again = await ask(
        layer, 4, method="resources/read", extra={"uri": "x://a"}, query=b"tenant=X"
    )
    assert headers[b"x-mcp-edge-cache"] == b"hit" and again["result"]["n"] == tenant["result"]["n"]
    assert upstream.seen == 3
