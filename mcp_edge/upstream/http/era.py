"""Which era a route's upstream speaks, and sending 2026-07-28 requests to the right adapter.

A route is ``modern`` (a 2026-07-28 server: proxied as bytes), ``legacy`` (a 2025-era server:
2026-07-28 requests go through the legacy bridge) or ``auto``: the gateway sends the upstream a
2026-07-28 ``server/discover`` at start, and again after the upstream failed or answered a
2026-07-28 request the way legacy servers do. Legacy-era clients are always proxied.

Only an MCP answer decides an era: a discover result or a JSON-RPC error only one era gives. An
upstream that cannot be reached, times out, fails (5xx) or answers something else (a proxy's
error page, a 404 from a path router) is no era at all, and is asked again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import orjson

from mcp_edge.core.envelope import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, MODERN_VERSION
from mcp_edge.core.sse import SSESplitter
from mcp_edge.edge.asgi import ASGIApp, Receive, Scope, Send
from mcp_edge.edge.context import get_context
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics

Era = Literal["modern", "legacy"]
Setting = Literal["auto", "modern", "legacy"]

PROBE_BODY = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": "mcp-edge-era-probe",
        "method": "server/discover",
        "params": {
            "_meta": {
                META_PROTOCOL_VERSION: MODERN_VERSION,
                META_CLIENT_CAPABILITIES: {},
                "io.modelcontextprotocol/clientInfo": {"name": "mcp-edge", "version": "probe"},
            }
        },
    }
)
PROBE_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": MODERN_VERSION,
    "Mcp-Method": "server/discover",
}
#: JSON-RPC codes only a 2026-07-28 server answers a well-formed discover with.
_MODERN_CODES = frozenset({-32020, -32021})
#: What legacy servers answer: no such method, or "Bad Request: Missing session ID".
_LEGACY_CODES = frozenset({-32601, -32600, -32602, -32000, -32001})
#: The most of a probe's answer that is read.
_MAX_PROBE_BYTES = 64 * 1024


def _message(content_type: str, body: bytes) -> Any:
    """The JSON-RPC message in a JSON body, or the last response event of an SSE body."""
    ctype = content_type.split(";", 1)[0].strip().lower()
    if ctype == "application/json":
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(body)
        return None
    if ctype == "text/event-stream":
        found = None
        splitter = SSESplitter(len(body) + 1)
        for ev in [*splitter.feed(body), *splitter.feed(b"\n\n")]:
            if ev.data:
                with contextlib.suppress(orjson.JSONDecodeError):
                    doc = orjson.loads(ev.data)
                    if isinstance(doc, dict) and ("result" in doc or "error" in doc):
                        found = doc
        return found
    return None


def classify_probe(status: int, content_type: str, body: bytes) -> Era | None:
    """The era a ``server/discover`` answer reveals; None when it is no MCP answer (try later).

    Only a JSON-RPC message decides: a result (2xx) means modern; an error means the era its
    code belongs to. A failing upstream (5xx) and a bare status without a JSON-RPC body (a 404
    page, a 403 from a proxy in the way) say nothing about the server behind them."""
    if status >= 500:
        return None
    doc = _message(content_type, body)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("result"), dict):
        return "modern" if 200 <= status < 300 else None
    error = doc.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        if code == -32022:
            data = error.get("data")
            supported = data.get("supported") if isinstance(data, dict) else None
            return (
                "modern"
                if isinstance(supported, list) and MODERN_VERSION in supported
                else "legacy"
            )
        if code in _MODERN_CODES:
            return "modern"
        if code in _LEGACY_CODES:
            return "legacy"
    return None


def probe_server_name(content_type: str, body: bytes) -> str | None:
    """``serverInfo.name`` in a discover result, if it names one."""
    doc = _message(content_type, body)
    result = doc.get("result") if isinstance(doc, dict) else None
    meta = result.get("_meta") if isinstance(result, dict) else None
    info = meta.get("io.modelcontextprotocol/serverInfo") if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    return name[:128] if isinstance(name, str) else None


@dataclass(frozen=True, slots=True)
class ProbeOutcome:
    """What one endpoint said to a ``server/discover``: an era, or why there is none."""

    endpoint: str
    era: Era | None = None
    #: No HTTP answer, or a failing one (5xx): why.
    unreachable: str | None = None
    #: An HTTP answer that is no MCP answer (status and content type).
    not_mcp: str | None = None
    #: ``serverInfo.name`` of a 2026-07-28 answer (tells replicas of one server from others).
    server_name: str | None = None

    def describe(self) -> str:
        if self.era is not None:
            return f"detected {self.era}"
        if self.unreachable is not None:
            return f"unreachable: {self.unreachable}"
        return f"not an MCP answer: {self.not_mcp}"


def unreachable_reason(exc: BaseException, timeout: float) -> str:
    """One line saying why no HTTP answer came."""
    if isinstance(exc, asyncio.TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve {exc.host}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"connection refused by {exc.host}:{exc.port}"
        return f"cannot connect to {exc.host}:{exc.port} ({exc.os_error.strerror or type(exc.os_error).__name__})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the connection closed without an answer"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def looks_legacy(status: int, first_chunk: bytes) -> bool:
    """Did a 2026-07-28 request just get a legacy server's answer (sessions required)?"""
    return status in (400, 404) and b"ession" in first_chunk and b"-32022" not in first_chunk


class EraRouter:
    """Routes 2026-07-28 requests to the proxy or the bridge, by the upstream's era."""

    def __init__(
        self,
        *,
        route: str,
        setting: Setting,
        proxy: ASGIApp,
        bridge: ASGIApp,
        endpoints: Callable[[], Sequence[str]],
        host_for: Callable[[str], str],
        client: Callable[[], aiohttp.ClientSession],
        static_headers: Sequence[tuple[str, str]] = (),
        metrics: Metrics | None = None,
        probe_timeout: float = 5.0,
    ) -> None:
        self.route = route
        self.setting = setting
        self.proxy = proxy
        self.bridge = bridge
        self._endpoints = endpoints
        self._host_for = host_for
        self._client = client
        self._static = list(static_headers)
        self.metrics = metrics or Metrics()
        self.probe_timeout = probe_timeout
        self.detected: Era | None = None if setting == "auto" else setting
        self._lock = asyncio.Lock()
        self._changed = asyncio.Event()
        self._failed_at = -1e9
        self._report(self.detected)

    @property
    def era(self) -> Era | None:
        return self.detected

    def _report(self, era: Era | None) -> None:
        for name in ("modern", "legacy"):
            self.metrics.era.labels(self.route, name).set(1 if era == name else 0)

    def suspect(self) -> None:
        """The upstream failed, or answered like a server of the other era: detect again."""
        if self.setting == "auto" and self.detected is not None:
            event(
                logging.INFO,
                "upstream era in doubt; probing again",
                route=self.route,
                was=self.detected,
            )
            self.detected = None
            self._report(None)
            self._changed.set()

    async def probe(self) -> Era | None:
        """Ask each endpoint until one answers decisively."""
        for endpoint in list(self._endpoints()):
            outcome = await self.probe_endpoint(endpoint)
            if outcome.era is not None:
                return outcome.era
        return None

    async def probe_all(self) -> list[ProbeOutcome]:
        """Ask every endpoint (``mcp-edge check-config --probe``)."""
        return [await self.probe_endpoint(endpoint) for endpoint in list(self._endpoints())]

    async def probe_endpoint(self, endpoint: str) -> ProbeOutcome:
        headers = {**PROBE_HEADERS, "Host": self._host_for(endpoint), **dict(self._static)}
        try:
            async with self._client().post(
                endpoint,
                data=PROBE_BODY,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self.probe_timeout),
            ) as response:
                status, content_type = response.status, response.headers.get("content-type", "")
                body = b""
                # To the end (a JSON body), or until an event decides (an SSE stream may stay open).
                while len(body) < _MAX_PROBE_BYTES:
                    chunk = await response.content.read(_MAX_PROBE_BYTES - len(body))
                    if not chunk:
                        break
                    body += chunk
                    if "event-stream" in content_type and classify_probe(
                        status, content_type, body
                    ):
                        break
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return ProbeOutcome(endpoint, unreachable=unreachable_reason(exc, self.probe_timeout))
        era = classify_probe(status, content_type, body)
        if era is not None:
            return ProbeOutcome(
                endpoint, era=era, server_name=probe_server_name(content_type, body)
            )
        described = f"HTTP {status} {content_type.split(';', 1)[0].strip() or '(no content type)'}"
        if status >= 500:
            return ProbeOutcome(endpoint, unreachable=f"the upstream failed ({described})")
        return ProbeOutcome(endpoint, not_mcp=described)

    async def detect(self) -> Era | None:
        """The era, probing now if it is not known (one probe at a time, and not again within a
        second of a failed one, so an unreachable upstream is not probed by every request)."""
        if self.detected is not None:
            return self.detected
        loop = asyncio.get_running_loop()
        if loop.time() - self._failed_at < 1.0:
            return None
        async with self._lock:
            if self.detected is None and loop.time() - self._failed_at >= 1.0:
                era = await self.probe()
                if era is None:
                    self._failed_at = loop.time()
                else:
                    self.detected = era
                    self._report(era)
                    event(logging.INFO, "upstream era detected", route=self.route, era=era)
        return self.detected

    async def run(self) -> None:
        """Background detection for ``auto`` routes: at start, and whenever in doubt."""
        if self.setting != "auto":
            return
        delay = 0.5
        while True:
            if await self.detect() is None:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
                continue
            delay = 0.5
            self._changed.clear()
            await self._changed.wait()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and get_context(scope).modern and self.setting != "modern":
            if await self.detect() == "legacy":
                await self.bridge(scope, receive, send)
                return
        await self.proxy(scope, receive, send)
