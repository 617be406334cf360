"""Listeners and their roles: which endpoints a request may reach, by where it arrived.

Every endpoint belongs to one role:

* ``public``: the MCP routes and the OAuth metadata, for clients;
* ``cluster``: the replicas' own endpoints (``/.mcp-edge/*``: forwarded retries, relayed
  2025-era requests), for other replicas only;
* ``admin``: ``/healthz``, ``/readyz``, ``/metrics``, for probes and scrapers.

The public listener (``listen``) is always there. A role can get a listener of its own (the
cluster one: ``cluster.listen``); its endpoints are then served there and only there (404 on
every other listener), and that listener serves nothing else. The public listener serves its own
role and every role without a listener of its own, so with one listener everything is served
where it always was.

A request's listener is told by the local port it arrived on (``scope["server"]``), so listeners
must have distinct ports; a request whose local address is unknown is taken as public.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PUBLIC = "public"
CLUSTER = "cluster"
ADMIN = "admin"
ROLES = (PUBLIC, CLUSTER, ADMIN)

PEER_PREFIX = "/.mcp-edge/"
ADMIN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


@dataclass(frozen=True, slots=True)
class Listener:
    role: str
    host: str
    port: int

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def path_role(path: str) -> str:
    """The role of the endpoint at ``path``."""
    if path.startswith(PEER_PREFIX):
        return CLUSTER
    if path in ADMIN_PATHS:
        return ADMIN
    return PUBLIC


class Roles:
    """Which roles each listener serves."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        own = [item for item in listeners if item.role != PUBLIC]
        #: More than one listener: requests are checked against the one they arrived on.
        self.split = bool(own)
        self.by_port: Mapping[int, frozenset[str]] = {item.port: frozenset({item.role}) for item in own}
        self.public = frozenset(role for role in ROLES if role not in {item.role for item in own})

    def served(self, scope: Mapping[str, Any]) -> frozenset[str]:
        """The roles served on the listener a request arrived on."""
        server = scope.get("server")
        if server and len(server) > 1:
            roles = self.by_port.get(server[1])
            if roles is not None:
                return roles
        return self.public

    def allows(self, scope: Mapping[str, Any]) -> bool:
        """Whether the endpoint the request asks for is served where it arrived."""
        return not self.split or path_role(scope["path"]) in self.served(scope)
