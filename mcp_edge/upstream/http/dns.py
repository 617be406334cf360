"""Upstream endpoints from DNS: one URL per address a host name resolves to.

This is how a Kubernetes headless Service is used: the name resolves to every ready pod, and the
gateway spreads first rounds over them, then keeps each flow's retries on the pod that answered
(affinity, see ``HttpProxy.choose``). The list is refreshed periodically; a failed or empty lookup
keeps the previous list, so a DNS hiccup never empties a route.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit, urlunsplit

import anyio
import anyio.abc
import anyio.to_thread

from mcp_edge.observability.logs import event

#: host, port -> addresses (IPv4 or IPv6 literals, any order, duplicates allowed).
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


async def resolve_all(host: str, port: int) -> list[str]:
    """All A/AAAA addresses of ``host`` (getaddrinfo in a worker thread: it blocks).

    A lookup that outlives the caller's timeout is abandoned, not waited for.
    """
    infos = await anyio.to_thread.run_sync(
        lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP),
        abandon_on_cancel=True,
    )
    return [str(info[4][0]) for info in infos]


def endpoint_urls(template: str, addresses: Sequence[str]) -> list[str]:
    """``template`` with its host replaced by each address: unique, in a stable (sorted) order."""
    parts = urlsplit(template)
    port = f":{parts.port}" if parts.port is not None else ""
    hosts: set[str] = set()
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # scoped link-local: drop the zone
        hosts.add(f"[{ip.compressed}]" if ip.version == 6 else ip.compressed)
    return [
        urlunsplit((parts.scheme, host + port, parts.path, parts.query, ""))
        for host in sorted(hosts)
    ]


class DnsEndpoints:
    """Keeps a route's endpoint list in step with what its upstream host name resolves to."""

    def __init__(
        self,
        route: str,
        url: str,
        *,
        on_change: Callable[[list[str]], None],
        refresh_seconds: float = 10.0,
        resolver: Resolver = resolve_all,
        timeout: float = 5.0,
    ) -> None:
        parts = urlsplit(url)
        if not parts.hostname:
            raise ValueError(f"no host name in {url!r}")
        self.route = route
        self.url = url
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.on_change = on_change
        self.refresh_seconds = refresh_seconds
        self.resolver = resolver
        self.timeout = timeout
        self.current: list[str] = []

    async def refresh(self) -> bool:
        """Resolve once; apply a changed, non-empty result. True if a usable list is in place."""
        try:
            with anyio.fail_after(self.timeout):
                addresses = await self.resolver(self.host, self.port)
            urls = endpoint_urls(self.url, addresses)
        except (OSError, TimeoutError, ValueError) as exc:
            event(
                logging.WARNING,
                "upstream DNS lookup failed; keeping the previous endpoints",
                route=self.route,
                host=self.host,
                error=type(exc).__name__,
                endpoints=len(self.current),
            )
            return bool(self.current)
        if not urls:
            event(
                logging.WARNING,
                "upstream DNS name has no addresses; keeping the previous endpoints",
                route=self.route,
                host=self.host,
                endpoints=len(self.current),
            )
            return bool(self.current)
        if urls != self.current:
            event(
                logging.INFO,
                "upstream endpoints changed",
                route=self.route,
                host=self.host,
                added=sorted(set(urls) - set(self.current)),
                removed=sorted(set(self.current) - set(urls)),
            )
            self.current = urls
            self.on_change(urls)
        return True

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Resolve now, report started, then refresh forever (cancel to stop)."""
        await self.refresh()
        task_status.started()
        while True:
            await anyio.sleep(self.refresh_seconds)
            await self.refresh()
