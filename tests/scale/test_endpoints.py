"""Several upstream endpoints per route: static lists, DNS names resolved to all their addresses
(a headless Service), round robin for first rounds, affinity for retries, and the error a client
gets when the endpoint holding its flow is gone."""

from __future__ import annotations

import collections
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import httpx
import pytest

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge.asgi import Message, Scope
from mcp_edge.edge.context import RequestContext
from mcp_edge.server.app import GatewayApp
from mcp_edge.server.config import ConfigError, GatewayConfig, load_config
from mcp_edge.upstream.http.dns import DnsEndpoints, endpoint_urls, resolve_all
from mcp_edge.upstream.http.proxy import HttpProxy
from tests.scale.cluster import Upstream
from tests.scale.flows import SurveyFlow

pytestmark = pytest.mark.timeout(30)


class FakeDns:
    """A resolver whose answers the test changes, like pods coming and going."""

    def __init__(self, **names: list[str]) -> None:
        self.names = names
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups += 1
        if host not in self.names:
            raise OSError(f"unknown host {host}")
        return self.names[host]


# ------------------------------------------------------------------ units


def test_endpoint_urls_one_per_address_stable_order() -> None:
    urls = endpoint_urls("http://svc.ns:8000/mcp", ["10.0.0.2", "fd00::1", "10.0.0.1", "10.0.0.2"])
    assert urls == [
        "http://10.0.0.1:8000/mcp",
        "http://10.0.0.2:8000/mcp",
        "http://[fd00::1]:8000/mcp",
    ]
    assert endpoint_urls("http://svc/mcp", ["10.0.0.1"]) == ["http://10.0.0.1/mcp"]


async def test_resolve_all_uses_the_system_resolver() -> None:
    assert "127.0.0.1" in await resolve_all("localhost", 80)


async def test_dns_refresh_applies_changes_and_survives_failures() -> None:
    dns = FakeDns(svc=["10.0.0.1", "10.0.0.2"])
    seen: list[list[str]] = []
    endpoints = DnsEndpoints("r", "http://svc:8000/mcp", on_change=seen.append, resolver=dns)
    assert await endpoints.refresh()
    assert await endpoints.refresh()  # unchanged: no second notification
    assert seen == [["http://10.0.0.1:8000/mcp", "http://10.0.0.2:8000/mcp"]]
    dns.names["svc"] = []  # every pod gone from DNS at once: keep the last known list
    assert await endpoints.refresh()
    del dns.names["svc"]  # lookup fails: keep it too
    assert await endpoints.refresh()
    dns.names["svc"] = ["10.0.0.3"]
    assert await endpoints.refresh()
    assert seen[-1] == ["http://10.0.0.3:8000/mcp"] and len(seen) == 2


async def test_dns_first_lookup_failing_reports_no_list() -> None:
    endpoints = DnsEndpoints(
        "r", "http://nowhere:8000/mcp", on_change=lambda urls: None, resolver=FakeDns()
    )
    assert not await endpoints.refresh()


def test_choose_round_robin_affinity_and_gone() -> None:
    a, b = "http://10.0.0.1:8000/mcp", "http://10.0.0.2:8000/mcp"
    proxy = HttpProxy(route="r", endpoints=[a, b], client=httpx.AsyncClient())
    assert [proxy.choose(RequestContext()) for _ in range(4)] == [a, b, a, b]
    assert [proxy.choose(RequestContext(pinned_endpoint=b)) for _ in range(3)] == [b, b, b]
    proxy.set_endpoints([a], host="svc:8000")
    assert (
        proxy.choose(RequestContext(pinned_endpoint=b)) is None
    )  # gone: the client restarts the flow
    loose = HttpProxy(route="r", endpoints=[a, b], client=httpx.AsyncClient(), affinity=False)
    assert [loose.choose(RequestContext(pinned_endpoint=b)) for _ in range(2)] == [a, b]


@pytest.mark.parametrize(
    ("route", "error"),
    [
        ("{endpoints: []}", "routes.0.endpoints: must list at least one URL"),
        ("{endpoints: ['http://a/mcp', 'http://a/mcp']}", "must not list a URL twice"),
        ("{endpoints: ['ftp://a/mcp']}", "must be an absolute http(s) URL"),
        ("{upstream: 'http://a/mcp', endpoints: ['http://b/mcp']}", "give either 'upstream'"),
        ("{name: x}", "give either 'upstream'"),
        ("{endpoints: ['http://a/mcp'], dns: true}", "dns: needs 'upstream'"),
        ("{upstream: 'https://a/mcp', dns: true}", "dns: only http://"),
    ],
)
def test_route_config_errors(tmp_path: Path, route: str, error: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(f"routes: [{route}]\n")
    with pytest.raises(ConfigError, match=error.replace("(", r"\(").replace(")", r"\)")):
        load_config(str(path), env={})


def test_route_config_defaults_and_upstream_flag(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "routes: [{endpoints: ['http://a:1/mcp', 'http://b:1/mcp'], affinity: false}]\n"
    )
    route = load_config(str(path), env={}).routes[0]
    assert route.upstream_urls() == ["http://a:1/mcp", "http://b:1/mcp"]
    assert not route.affinity and not route.dns and not route.single_use
    # --upstream on the command line replaces the file's endpoints
    route = load_config(str(path), env={}, flags={"upstream": "http://c:1/mcp"}).routes[0]
    assert route.upstream_urls() == ["http://c:1/mcp"]


# ------------------------------------------------------------------ DNS route, real upstreams


def dns_gateway(port: int, dns: FakeDns, refresh: float = 60.0) -> GatewayApp:
    config = GatewayConfig.model_validate(
        {
            "auth": {"mode": "anonymous"},
            "routes": [
                {
                    "name": "dns",
                    "path": "/mcp",
                    "upstream": f"http://upstream.test:{port}/mcp",
                    "dns": True,
                    "dns_refresh_seconds": refresh,
                }
            ],
        }
    )
    return GatewayApp(config, KeyRing([parse_key_spec(generate_key())]), resolver=dns)


async def test_dns_route_spreads_pins_and_reports_a_gone_endpoint(
    ephemeral_pair: list[Upstream],
) -> None:
    """Two pods (per-process state keys) behind one name; one disappears with flows in flight."""
    port = ephemeral_pair[0].port
    dns = FakeDns(**{"upstream.test": ["127.0.0.2", "127.0.0.3"]})
    app = dns_gateway(port, dns)
    assert await app.dns[0].refresh()
    assert app.proxies["dns"].endpoints == [
        f"http://127.0.0.2:{port}/mcp",
        f"http://127.0.0.3:{port}/mcp",
    ]
    before = ephemeral_pair[0].stats()
    url = "http://127.0.0.1/mcp"
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1", timeout=10
    ) as client:
        flows = [SurveyFlow(f"dns{i}", url) for i in range(4)]
        for flow in flows:
            await flow.run(client)
        assert all(f.completed for f in flows)
        assert collections.Counter(f.served_by for f in flows) == {
            "eph-127.0.0.2 x4": 2,
            "eph-127.0.0.3 x4": 2,
        }

        in_flight = [SurveyFlow(f"scale-down{i}", url) for i in range(4)]
        for flow in in_flight:
            await flow.advance(client)  # round 1: two on each pod
        dns.names["upstream.test"] = ["127.0.0.2"]
        await app.dns[0].refresh()
        for flow in in_flight:
            await flow.run(client)
        late = SurveyFlow("after-scale-down", url)
        await late.run(client)
    await app.aclose()

    gone = [f for f in in_flight if f.error is not None]
    assert [f.served_by for f in in_flight if f.completed] == ["eph-127.0.0.2 x4"] * 2
    assert len(gone) == 2
    for flow in gone:
        assert flow.status == 502 and flow.requests == 2
        assert flow.error is not None and flow.error["code"] == -32603
        assert flow.error["data"] == {"reason": "endpoint_gone"}
        assert "restart the flow" in flow.error["message"]
    assert late.completed
    # The upstream saw the service name as Host, not the address it was reached on.
    after = ephemeral_pair[0].stats()
    name = f"upstream.test:{port}"
    assert (
        after["posts"] - before["posts"]
        == after["hosts"].get(name, 0) - before["hosts"].get(name, 0)
        > 0
    )


async def test_dns_is_resolved_at_startup_and_refreshed(ephemeral_pair: list[Upstream]) -> None:
    """Through the app's lifespan: resolved before serving, then every dns_refresh_seconds."""
    port = ephemeral_pair[0].port
    dns = FakeDns(**{"upstream.test": ["127.0.0.2"]})
    app = dns_gateway(port, dns, refresh=0.05)
    started, stop = anyio.Event(), anyio.Event()
    messages: Iterator[Message] = iter([{"type": "lifespan.startup"}])

    async def receive() -> Message:
        message = next(messages, None)
        if message is None:
            await stop.wait()
            return {"type": "lifespan.shutdown"}
        return message

    async def send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            scope: Scope = {"type": "lifespan"}
            tg.start_soon(app.__call__, scope, receive, send)
            await started.wait()
            assert app.proxies["dns"].endpoints == [f"http://127.0.0.2:{port}/mcp"]
            dns.names["upstream.test"] = ["127.0.0.3", "127.0.0.2"]
            while len(app.proxies["dns"].endpoints) < 2:
                await anyio.sleep(0.02)
            stop.set()
    assert app.proxies["dns"].endpoints == [
        f"http://127.0.0.2:{port}/mcp",
        f"http://127.0.0.3:{port}/mcp",
    ]
    assert dns.lookups >= 2
