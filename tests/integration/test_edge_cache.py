"""The edge cache end to end: a real gateway process in front of a real ``mcp`` 2.x upstream whose
handlers set ``ttlMs`` / ``cacheScope`` (tests/servers/cache_hints.py). The upstream's request
counts (``GET /stats``) prove that a hit never reached it. Callers are told apart by the
trusted-header mode (the upstream sees them as ``X-MCP-Principal``), so private results can be
shown never to cross from one caller to another.

Routes: ``/mcp`` (cache on, public only, the upstream's ``public`` trusted across callers),
``/identity`` (cache on, public only, not trusted: the caller's identity reaches the upstream, so
it is part of every key), ``/private`` (cache on, private entries too), ``/short`` (an upstream
whose results live 600 ms), ``/off`` (no cache).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Running, start_gateway, start_upstream

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
MODERN = "2026-07-28"
SHORT_TTL_MS = 600


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        upstream = start_upstream(stack, "cache_hints.py", module_tmp, "--ttl-ms", "60000")
        short = start_upstream(stack, "cache_hints.py", module_tmp, "--ttl-ms", str(SHORT_TTL_MS))
        principal = {"principal_header": "X-MCP-Principal"}
        config = {
            "auth": {
                "mode": "trusted_header",
                "trusted_header": {"header": "X-Forwarded-User", "trusted_cidrs": ["127.0.0.1/32"]},
            },
            "routes": [
                {
                    "name": "public",
                    "path": "/mcp",
                    "upstream": upstream.url,
                    "cache": {"enabled": True, "trust_public": True},
                    "upstream_auth": principal,
                },
                {
                    "name": "identity",
                    "path": "/identity",
                    "upstream": upstream.url,
                    "cache": {"enabled": True},
                    "upstream_auth": principal,
                },
                {
                    "name": "private",
                    "path": "/private",
                    "upstream": upstream.url,
                    "cache": {"enabled": True, "private": True},
                    "upstream_auth": principal,
                },
                {
                    "name": "short",
                    "path": "/short",
                    "upstream": short.url,
                    "cache": {"enabled": True},
                    "upstream_auth": principal,
                },
                {
                    "name": "off",
                    "path": "/off",
                    "upstream": upstream.url,
                    "upstream_auth": principal,
                },
            ],
        }
        gateway = start_gateway(stack, module_tmp, config=config, keys=state_key, anonymous=False)
        yield {"upstream": upstream, "short": short, "gateway": gateway}


def stats(upstream: Running) -> dict[str, Any]:
    return httpx.get(f"{upstream.base}/stats", timeout=5).json()


def seen(upstream: Running, method: str) -> int:
    return stats(upstream)["methods"].get(method, 0)


def message(rid: Any, method: str, caps: dict | None = None, **params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": caps if caps is not None else {},
            },
        },
    }


async def rpc(
    http: httpx.AsyncClient,
    gateway: Running,
    path: str,
    msg: dict[str, Any],
    user: str = "alice",
    **more_headers: str,
) -> tuple[httpx.Response, dict[str, Any]]:
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": msg["method"],
        "X-Forwarded-User": user,
        **more_headers,
    }
    name = msg["params"].get("uri") or msg["params"].get("name")
    if msg["method"] in ("resources/read", "tools/call"):
        headers["Mcp-Name"] = name
    r = await http.post(gateway.base + path, headers=headers, json=msg)
    assert r.headers["content-type"].startswith("application/json"), r.text
    doc = r.json()
    assert doc["id"] == msg["id"], doc
    return r, doc


def cache_header(r: httpx.Response) -> str | None:
    return r.headers.get("x-mcp-edge-cache")


def descriptions(doc: dict[str, Any]) -> list[str]:
    return [t["description"] for t in doc["result"]["tools"]]


async def test_public_result_is_answered_from_the_cache_until_its_ttl(env):
    gw, up = env["gateway"], env["short"]
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "tools/list")
        r1, d1 = await rpc(http, gw, "/short", message(1, "tools/list"))
        r2, d2 = await rpc(http, gw, "/short", message("second", "tools/list"))
        assert (cache_header(r1), cache_header(r2)) == ("miss", "hit")
        assert seen(up, "tools/list") == before + 1, "the hit reached the upstream"
        assert descriptions(d2) == descriptions(d1)  # the same upstream fetch
        assert d1["result"]["ttlMs"] == SHORT_TTL_MS
        assert 0 < d2["result"]["ttlMs"] <= SHORT_TTL_MS  # counting down
        assert {k: v for k, v in d2["result"].items() if k != "ttlMs"} == {
            k: v for k, v in d1["result"].items() if k != "ttlMs"
        }
        await asyncio.sleep(SHORT_TTL_MS / 1000 + 0.1)
        r3, d3 = await rpc(http, gw, "/short", message(3, "tools/list"))
        assert cache_header(r3) == "miss" and seen(up, "tools/list") == before + 2
        assert descriptions(d3) != descriptions(d1)  # a new fetch


async def test_client_capabilities_are_part_of_the_key(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        await rpc(http, gw, "/mcp", message(1, "tools/list", caps={"roots": {}}))
        before = seen(up, "tools/list")
        r, doc = await rpc(
            http, gw, "/mcp", message(2, "tools/list", caps={"roots": {}, "elicitation": {}})
        )
        assert cache_header(r) == "miss" and seen(up, "tools/list") == before + 1
        assert "ask" in [t["name"] for t in doc["result"]["tools"]]
        r, doc = await rpc(http, gw, "/mcp", message(3, "tools/list", caps={"roots": {}}))
        assert cache_header(r) == "hit" and "ask" not in [t["name"] for t in doc["result"]["tools"]]
        # Another caller gets the same public entry.
        r, doc = await rpc(
            http, gw, "/mcp", message(4, "tools/list", caps={"roots": {}}), user="bob"
        )
        assert cache_header(r) == "hit" and seen(up, "tools/list") == before + 1


async def test_discover_and_public_reads_are_cached(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        for method, params in (
            ("server/discover", {}),
            ("resources/read", {"uri": "cache://public"}),
        ):
            await rpc(http, gw, "/mcp", message(1, method, **params))
            before = seen(up, method)
            r, doc = await rpc(http, gw, "/mcp", message(2, method, **params))
            assert cache_header(r) == "hit" and seen(up, method) == before, method
            assert doc["result"]["cacheScope"] == "public"


async def test_no_hint_or_zero_ttl_is_never_cached(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        for method in ("resources/list", "resources/templates/list"):  # ttlMs 0
            before = seen(up, method)
            for rid in range(3):
                r, _ = await rpc(http, gw, "/mcp", message(rid, method))
                assert cache_header(r) == "miss"
            assert seen(up, method) == before + 3


async def test_input_required_and_retries_are_never_cached(env):
    gw, up = env["gateway"], env["upstream"]
    caps = {"elicitation": {"form": {}}}
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "resources/read")
        _, first = await rpc(
            http, gw, "/mcp", message(1, "resources/read", caps=caps, uri="cache://ask")
        )
        assert first["result"]["resultType"] == "input_required"
        state = first["result"]["requestState"]
        answers = {"colour": {"action": "accept", "content": {"colour": "red"}}}
        for rid in (2, 3):  # the retry's complete answer says public, 60 s: still not kept
            r, done = await rpc(
                http,
                gw,
                "/mcp",
                message(
                    rid,
                    "resources/read",
                    caps=caps,
                    uri="cache://ask",
                    inputResponses=answers,
                    requestState=state,
                ),
            )
            assert cache_header(r) is None and done["result"]["contents"][0]["text"].startswith(
                "colour red"
            )
        r, again = await rpc(
            http, gw, "/mcp", message(4, "resources/read", caps=caps, uri="cache://ask")
        )
        assert cache_header(r) == "miss" and again["result"]["resultType"] == "input_required"
        assert seen(up, "resources/read") == before + 4


async def test_private_results_are_kept_per_caller_and_never_served_to_another(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "prompts/list")
        r, alice = await rpc(http, gw, "/private", message(1, "prompts/list"), user="alice")
        assert cache_header(r) == "miss" and alice["result"]["prompts"][0]["name"] == "for-alice"
        r, bob = await rpc(http, gw, "/private", message(2, "prompts/list"), user="bob")
        assert cache_header(r) == "miss" and bob["result"]["prompts"][0]["name"] == "for-bob"
        for rid, user in ((3, "alice"), (4, "bob"), (5, "alice")):
            r, doc = await rpc(http, gw, "/private", message(rid, "prompts/list"), user=user)
            assert cache_header(r) == "hit"
            assert doc["result"]["prompts"][0]["name"] == f"for-{user}"
        assert seen(up, "prompts/list") == before + 2
        r, carol = await rpc(
            http, gw, "/private", message(6, "resources/read", uri="cache://private"), user="carol"
        )
        assert "for carol" in carol["result"]["contents"][0]["text"]
        r, dave = await rpc(
            http, gw, "/private", message(7, "resources/read", uri="cache://private"), user="dave"
        )
        assert cache_header(r) == "miss" and "for dave" in dave["result"]["contents"][0]["text"]
        # A route that does not enable private entries never keeps them, for anyone.
        for rid in range(2):
            r, doc = await rpc(http, gw, "/mcp", message(10 + rid, "prompts/list"), user="alice")
            assert cache_header(r) == "miss"
        assert seen(up, "prompts/list") == before + 4


def text_of(doc: dict[str, Any]) -> str:
    return doc["result"]["contents"][0]["text"]


async def test_a_per_caller_answer_marked_public_never_reaches_another_caller(env):
    """The upstream marks an answer naming the caller ``public``; the caller's identity reaches it
    (``X-MCP-Principal``), so the gateway keeps that answer for that caller only."""
    gw, up = env["gateway"], env["upstream"]
    read = {"uri": "cache://caller"}
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "resources/read")
        r, alice = await rpc(
            http, gw, "/identity", message(1, "resources/read", **read), user="alice"
        )
        assert cache_header(r) == "miss" and text_of(alice).startswith("public answer for alice ")
        r, bob = await rpc(http, gw, "/identity", message(2, "resources/read", **read), user="bob")
        assert cache_header(r) == "miss" and text_of(bob).startswith("public answer for bob ")
        for rid, user in ((3, "alice"), (4, "bob"), (5, "bob"), (6, "alice")):
            r, doc = await rpc(
                http, gw, "/identity", message(rid, "resources/read", **read), user=user
            )
            assert cache_header(r) == "hit" and text_of(doc) == text_of(
                alice if user == "alice" else bob
            )
        assert seen(up, "resources/read") == before + 2
        # A route that trusts the upstream's public shares it, as its operator said (cache.trust_public).
        _, first = await rpc(http, gw, "/mcp", message(7, "resources/read", **read), user="carol")
        r, other = await rpc(http, gw, "/mcp", message(8, "resources/read", **read), user="dave")
        assert cache_header(r) == "hit" and text_of(other) == text_of(first)


async def test_a_header_or_meta_field_the_upstream_gets_is_part_of_the_key(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "resources/read")

        async def read(
            rid: int, tenant: str, meta_tenant: str | None = None, **headers: str
        ) -> tuple[str | None, str]:
            msg = message(rid, "resources/read", uri="cache://tenant")
            if meta_tenant is not None:
                msg["params"]["_meta"]["com.example/tenant"] = meta_tenant
            r, doc = await rpc(
                http, gw, "/identity", msg, user="erin", **{"X-Tenant": tenant, **headers}
            )
            return cache_header(r), text_of(doc)

        assert (await read(1, "a"))[1].startswith("tenant a / None ")
        how, text = await read(2, "b")
        assert how == "miss" and text.startswith("tenant b / None ")
        how, text = await read(3, "a", meta_tenant="m")
        assert how == "miss" and text.startswith("tenant a / m ")
        how, text = await read(4, "a", **{"Accept-Language": "fr"})
        assert how == "miss" and text.startswith("tenant a / None ")
        assert seen(up, "resources/read") == before + 4
        # What names one request only (trace context, request id, progress token) is not: a hit.
        msg = message(5, "resources/read", uri="cache://tenant")
        msg["params"]["_meta"]["progressToken"] = "p-5"
        r, doc = await rpc(
            http,
            gw,
            "/identity",
            msg,
            user="erin",
            **{
                "X-Tenant": "b",
                "X-Request-Id": "req-5",
                "traceparent": f"00-{'1' * 32}-{'2' * 16}-01",
            },
        )
        assert cache_header(r) == "hit" and text_of(doc).startswith("tenant b / None ")
        assert seen(up, "resources/read") == before + 4


async def test_an_answer_to_a_query_string_never_reaches_a_request_without_it(env):
    """The upstream gets the query string of the client's URL (an SDK server reads it): the
    answer to ``?tenant=X`` is never served to a request without it, nor the other way round,
    even on the route that shares public answers across callers."""
    gw, up = env["gateway"], env["upstream"]
    read = {"uri": "cache://query"}
    async with httpx.AsyncClient(timeout=10) as http:
        before = seen(up, "resources/read")
        r, with_query = await rpc(http, gw, "/mcp?tenant=X", message(1, "resources/read", **read))
        assert cache_header(r) == "miss" and text_of(with_query).startswith("query tenant X ")
        r, without = await rpc(http, gw, "/mcp", message(2, "resources/read", **read))
        assert cache_header(r) == "miss" and text_of(without).startswith("query tenant None ")
        r, other = await rpc(http, gw, "/mcp?tenant=Y", message(3, "resources/read", **read))
        assert cache_header(r) == "miss" and text_of(other).startswith("query tenant Y ")
        assert seen(up, "resources/read") == before + 3
        # Each is kept for its own URL, and given to other callers asking the same.
        for rid, (path, expected) in enumerate(
            [("/mcp", without), ("/mcp?tenant=X", with_query), ("/mcp?tenant=Y", other)], 4
        ):
            r, doc = await rpc(http, gw, path, message(rid, "resources/read", **read), user="bob")
            assert cache_header(r) == "hit" and text_of(doc) == text_of(expected), path
        assert seen(up, "resources/read") == before + 3


async def test_route_without_cache_is_untouched_and_metrics_count(env):
    gw, up = env["gateway"], env["upstream"]
    async with httpx.AsyncClient(timeout=10) as http:
        earlier = (await http.get(gw.base + "/metrics")).text
        before = seen(up, "tools/list")
        for rid in range(3):
            r, _ = await rpc(http, gw, "/off", message(rid, "tools/list"))
            assert cache_header(r) is None
        assert seen(up, "tools/list") == before + 3
        for rid in range(2):
            await rpc(
                http, gw, "/mcp", message(rid, "tools/list", cursor="metrics")
            )  # a miss, then a hit
            await rpc(http, gw, "/mcp", message(rid, "resources/list"))  # never kept: ttlMs 0
        metrics = (await http.get(gw.base + "/metrics")).text

    def cache_samples(text: str) -> dict[str, float]:
        return {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if line.startswith("mcp_edge_cache_")
        }

    samples, then = cache_samples(metrics), cache_samples(earlier)

    def grew(name: str) -> float:
        return samples[name] - then.get(name, 0.0)

    # The gateway is the module's: what counts is what these five calls added.
    assert (
        grew('mcp_edge_cache_lookups_total{result="hit",route="public"}') == 1
    )  # the second tools/list
    assert (
        grew('mcp_edge_cache_lookups_total{result="miss",route="public"}') == 3
    )  # the first, both resources/list
    assert grew('mcp_edge_cache_stores_total{route="public",scope="public"}') == 1
    assert grew('mcp_edge_cache_not_stored_total{reason="ttl_zero",route="public"}') == 2
    assert grew("mcp_edge_cache_entries") == 1 and grew("mcp_edge_cache_bytes") > 0
    assert not any('route="off"' in k for k in samples)
