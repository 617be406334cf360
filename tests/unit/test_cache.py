"""The edge cache without a network: key rules, which answers may be kept, the cached answer's
shape, the byte-bounded LRU, and the layer behind a guard's context (retries bypass it, a hit
never reaches the inner app, the remaining ttlMs counts down)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.auth.base import ANONYMOUS, Principal
from gateway.cache.layer import CacheMetrics, EdgeCacheLayer
from gateway.cache.rules import (
    CACHEABLE_METHODS,
    cache_key,
    judge_response,
    private_partition,
    render_hit,
    request_fingerprint,
)
from gateway.cache.store import Entry, MemoryCache
from gateway.config import ConfigError, load_config
from gateway.edge.context import get_context
from gateway.observability.metrics import Metrics

V = "io.modelcontextprotocol/protocolVersion"
C = "io.modelcontextprotocol/clientCapabilities"


def meta(caps: dict | None = None, **more: Any) -> dict[str, Any]:
    return {V: "2026-07-28", C: caps or {}, **more}


# ---------------------------------------------------------------- keys


def test_fingerprint_ignores_meta_other_than_version_and_capabilities():
    base = request_fingerprint("tools/list", {"_meta": meta()})
    assert base == request_fingerprint("tools/list", {"_meta": meta(
        progressToken=5, traceparent="00-abc", **{"io.modelcontextprotocol/clientInfo": {"name": "x"}})})  # fmt: skip
    assert base != request_fingerprint("tools/list", {"_meta": meta({"elicitation": {}})})
    assert base != request_fingerprint("tools/list", {"_meta": meta({"extensions": {"io.x/ui": {}}})})
    assert base != request_fingerprint("tools/list", {"cursor": "2", "_meta": meta()})
    assert base != request_fingerprint("prompts/list", {"_meta": meta()})
    # key order does not matter
    a = request_fingerprint("resources/read", {"uri": "x://1", "_meta": meta({"a": {"x": 1, "y": 2}, "b": {}})})
    b = request_fingerprint("resources/read", {"_meta": {C: {"b": {}, "a": {"y": 2, "x": 1}}, V: "2026-07-28"},
                                               "uri": "x://1"})  # fmt: skip
    assert a == b


@pytest.mark.parametrize("field", ["inputResponses", "requestState"])
def test_retries_never_use_the_cache(field):
    assert request_fingerprint("resources/read", {"uri": "x://1", field: {}, "_meta": meta()}) is None


def test_keys_separate_routes_scopes_and_callers():
    fp = request_fingerprint("tools/list", {"_meta": meta()})
    assert fp is not None
    keys = {
        cache_key("gw", "a", "public", "", fp),
        cache_key("gw", "b", "public", "", fp),
        cache_key("gw2", "a", "public", "", fp),
        cache_key("gw", "a", "private", private_partition("alice", None), fp),
        cache_key("gw", "a", "private", private_partition("bob", None), fp),
        cache_key("gw", "a", "private", private_partition("alice", "Bearer t2"), fp),
    }
    assert len(keys) == 6
    assert cache_key("gw", "a", "public", "", fp) == cache_key("gw", "a", "public", "", fp)
    assert CACHEABLE_METHODS == {"server/discover", "tools/list", "prompts/list", "resources/list",
                                 "resources/templates/list", "resources/read"}  # fmt: skip


# ---------------------------------------------------------------- what may be kept


def answer(result: Any, rid: Any = 1, **top: Any) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "result": result, **top})


def complete(**hints: Any) -> dict[str, Any]:
    return {"tools": [{"name": "t"}], "resultType": "complete", **hints}


@pytest.mark.parametrize("body,reason", [
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
    (answer({"resultType": "input_required", "requestState": "s", "ttlMs": 1000, "cacheScope": "public"}),
     "not_complete"),
    (answer({"tools": [], "ttlMs": 1000, "cacheScope": "public"}), "not_complete"),
    (orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}}), "error"),
    (answer(complete(ttlMs=1000, cacheScope="public"), rid=2), "not_ours"),
    (b"{not json", "not_json"),
])  # fmt: skip
def test_which_answers_are_kept(body, reason):
    entry, why = judge_response(body, 1, allow_private=False, max_ttl_ms=3_600_000)
    assert why == reason
    assert (entry is not None) == (reason == "stored")


def test_private_kept_when_allowed_and_ttl_capped():
    entry, _ = judge_response(answer(complete(ttlMs=10**9, cacheScope="private")), 1, allow_private=True,
                              max_ttl_ms=5000)  # fmt: skip
    assert entry is not None and entry.scope == "private" and entry.ttl_ms == 5000


@pytest.mark.parametrize("rid", [7, "req-7"])
def test_a_hit_carries_the_requests_id_and_the_time_left(rid):
    result = complete(ttlMs=1000, cacheScope="public", _meta={"io.modelcontextprotocol/serverInfo": {"name": "u"}})
    entry, _ = judge_response(answer(result, rid=1), 1, allow_private=False, max_ttl_ms=10**7)
    doc = orjson.loads(render_hit(rid, 420, entry.tail))
    assert doc == {"jsonrpc": "2.0", "id": rid, "result": {**result, "ttlMs": 420}}
    empty, _ = judge_response(answer({"resultType": "complete", "ttlMs": 5, "cacheScope": "public"}), 1,
                              allow_private=False, max_ttl_ms=10)  # fmt: skip
    assert orjson.loads(render_hit(1, 3, empty.tail))["result"] == {"resultType": "complete", "cacheScope": "public",
                                                                   "ttlMs": 3}  # fmt: skip


# ---------------------------------------------------------------- the LRU


def test_lru_is_bounded_in_bytes_and_evicts_least_recently_used():
    evicted: list[tuple[str, str]] = []
    cache = MemoryCache(3 * (1000 + 200 + 1), on_evict=lambda route, reason: evicted.append((route, reason)))
    body = b"x" * 1000
    for key in "abc":
        cache.store(key, Entry(10_000, "public", "r", body), now_ms=0)
    assert len(cache) == 3 and cache.bytes <= cache.max_bytes
    assert cache.lookup("a", 1) is not None  # a is now the most recently used
    cache.store("d", Entry(10_000, "public", "r", body), now_ms=1)
    assert cache.lookup("b", 1) is None and cache.lookup("a", 1) is not None
    assert evicted == [("r", "size")]
    assert cache.lookup("c", 10_000) is None  # expired
    assert evicted[-1] == ("r", "expired")
    cache.store("huge", Entry(10_000, "public", "r", b"x" * 10_000), now_ms=1)  # larger than the cache
    assert cache.lookup("huge", 1) is None and len(cache) == 2


def test_entry_round_trips_through_its_redis_encoding():
    entry = Entry(1234567, "private", "route-1", b',"a":"\n"}')
    assert Entry.decode(entry.encode()) == entry
    assert Entry.decode(b"garbage") is None


def test_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("auth: {mode: anonymous}\nroutes: [{upstream: 'http://x/mcp', cache: {enabled: true, private: true}}]\n")
    with pytest.raises(ConfigError, match="cache.private needs authenticated callers"):
        load_config(str(cfg), env={})
    cfg.write_text("cache: {backend: redis}\nroutes: [{upstream: 'http://x/mcp', cache: {enabled: true}}]\n")
    with pytest.raises(ConfigError, match="cache.backend: redis uses the store's Redis"):
        load_config(str(cfg), env={})


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
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make(upstream: Upstream, *, private=False, clock=None) -> tuple[EdgeCacheLayer, CacheMetrics]:
    metrics = CacheMetrics(Metrics().registry)
    layer = EdgeCacheLayer(upstream, gateway_id="gw", route="r", backend=MemoryCache(1 << 20), metrics=metrics,
                           allow_private=private, clock=clock or Clock())  # fmt: skip
    return layer, metrics


async def ask(layer, rid: Any, method="tools/list", principal: Principal = ANONYMOUS, retry=False,
              extra: dict | None = None, authorization: bytes | None = None) -> tuple[dict, dict]:  # fmt: skip
    params = {"_meta": meta(), **(extra or {})}
    body = orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    headers = [(b"authorization", authorization)] if authorization else []
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    ctx = get_context(scope)
    ctx.modern, ctx.rpc_method, ctx.request_id, ctx.principal, ctx.retry_fields = True, method, rid, principal, retry
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
    lookups = {s.labels["result"]: s.value for m in metrics.lookups.collect() for s in m.samples
               if s.name.endswith("_total")}  # fmt: skip
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
