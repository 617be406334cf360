"""The gateway's HTTP clients, one per kind of call, each created in the running event loop on
first use and closed with the app.

* **The hot path** (the proxy's calls to a 2026-07-28 upstream) has its own pooled client
  (mcp_edge.upstream.http.client): httptools over asyncio transports, doing only what a reverse
  proxy needs. A general client's objects cost more CPU per small call than the ASGI server
  itself (``bench/results/layers.md``: uvicorn-proxy against uvicorn-native).
* **Everything off the hot path** (the legacy bridge's sessions and their SSE streams, retries
  forwarded and 2025-era requests relayed to other replicas, era probes, JWK Set fetches) uses
  one library, aiohttp: measured against httpx on each of those kinds of call (``python -m
  bench.clients``, ``bench/results/clients.md``), httpx took 3 to 5 times the CPU per call and as
  much more time, and aiohttp's streaming reads (``content.readany``) are what the bridge's
  event-by-event reading is built on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from mcp_edge.edge.config import LimitsSection

# Each client's library is loaded with the client, made on first use: a gateway whose upstreams
# are apps in its own process makes neither.
if TYPE_CHECKING:
    import aiohttp

    from mcp_edge.upstream.http.client import UpstreamClient


class _Pool(TypedDict):
    """What both clients' pools are sized and timed by (the ``limits`` section)."""

    connect_timeout: float
    read_timeout: float
    max_connections: int
    keepalive_seconds: float


#: Headers aiohttp would add on its own: only the caller's go upstream.
_SKIP_AUTO = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})


def build_client(
    *,
    connect_timeout: float = 5.0,
    read_timeout: float = 300.0,
    max_connections: int = 512,
    keepalive_seconds: float = 4.0,
) -> aiohttp.ClientSession:
    """The pooled client for the gateway's own HTTP calls off the hot path."""
    import aiohttp

    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=0,
        keepalive_timeout=keepalive_seconds,
        ttl_dns_cache=10,
        force_close=False,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout),
        auto_decompress=False,  # bytes pass through as the upstream sent them
        # Only the client's own headers go upstream; aiohttp adds none of its defaults.
        skip_auto_headers=_SKIP_AUTO,
        trust_env=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class Clients:
    """The app's two clients, made when first asked for (inside the running loop)."""

    def __init__(self, limits: LimitsSection, *, upstream: UpstreamClient | None = None) -> None:
        self.limits = limits
        self._client: aiohttp.ClientSession | None = None
        #: Given (tests, benchmarks: an in-memory upstream) or made on first use.
        self._upstream: UpstreamClient | None = upstream

    def upstream(self) -> UpstreamClient:
        """The proxy's pooled client (its hot path)."""
        if self._upstream is None:
            from mcp_edge.upstream.http.client import UpstreamClient

            self._upstream = UpstreamClient(**self._pool())
        return self._upstream

    def off_path(self) -> aiohttp.ClientSession:
        """The client of every other HTTP call."""
        if self._client is None:
            self._client = build_client(**self._pool())
        return self._client

    def _pool(self) -> _Pool:
        """The pool settings both clients take from ``limits``."""
        lim = self.limits
        return _Pool(
            connect_timeout=lim.connect_timeout,
            read_timeout=lim.read_timeout,
            max_connections=lim.max_connections,
            keepalive_seconds=lim.keepalive_seconds,
        )

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self._upstream is not None:
            upstream, self._upstream = self._upstream, None
            await upstream.close()
