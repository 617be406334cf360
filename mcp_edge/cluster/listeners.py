"""Listeners and their roles: which endpoints a request may reach, by where it arrived.

Every endpoint belongs to one role:

* ``public``: the MCP routes and the OAuth metadata, for clients;
* ``cluster``: the replicas' own endpoints (``/.mcp-edge/*``: forwarded retries, relayed
  2025-era requests), for other replicas only; but ``/.mcp-edge/consent/*``, the consent
  pages a person's browser opens (mcp_edge.identity.consent_endpoints), are public;
* ``admin``: ``/healthz``, ``/readyz``, ``/metrics``, for probes and scrapers.

The public listener (``listen``) is always there. A role can get a listener of its own
(``cluster.listen``, ``admin.listen``); its endpoints are then served there and only there (404 on
every other listener), and that listener serves nothing else. The public listener serves its own
role and every role without a listener of its own, so with one listener everything is served
where it always was.

A request's listener is told by the local port it arrived on (``scope["server"]``), so listeners
must have distinct ports; a request whose local address is unknown is taken as public.

The admin endpoints read no body: anything but a bodyless GET or HEAD is refused before a byte
of body is read (``admin_refusal``). Nor does any listener read the body of a request for a path
it does not serve: the 404 is answered from the head and the connection closed
(``mcp_edge.cluster.endpoints.not_found``), so a large announced body is never read and dropped.
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
#: The consent pages (per-user consent, ``upstream_auth.oauth``): public, under the peers' prefix.
CONSENT_PREFIX = "/.mcp-edge/consent/"
ADMIN_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
#: Users' grants (per-user consent): listed and revoked by operators, on the admin listener's
#: own port only (``admin.listen``; 404 when it has none: never on the public listener).
GRANTS_PATH = "/grants"
ADMIN_METHODS = frozenset({"GET", "HEAD"})

#: What each role's listener serves, for people (``check-config``).
ENDPOINTS = {
    PUBLIC: "MCP routes, OAuth metadata",
    CLUSTER: "/.mcp-edge/*",
    ADMIN: "/healthz, /readyz, /metrics",
}


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
    if path.startswith(CONSENT_PREFIX):
        return PUBLIC
    if path.startswith(PEER_PREFIX):
        return CLUSTER
    if path in ADMIN_PATHS or path == GRANTS_PATH:
        return ADMIN
    return PUBLIC


def admin_refusal(scope: Mapping[str, Any]) -> int | None:
    """The status refusing a request for an admin endpoint (405: a method other than GET or
    HEAD; 413: a body, or ``Transfer-Encoding``), or None to serve it."""
    if scope["method"] not in ADMIN_METHODS:
        return 405
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return 413
    return None


class Roles:
    """Which roles each listener serves."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        own = [item for item in listeners if item.role != PUBLIC]
        #: More than one listener: requests are checked against the one they arrived on.
        self.split = bool(own)
        self.by_port: Mapping[int, frozenset[str]] = {
            item.port: frozenset({item.role}) for item in own
        }
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

    def describe(self, listeners: Sequence[Listener]) -> list[str]:
        """One line per listener: where it is and what it serves."""
        lines = []
        for item in listeners:
            roles = self.public if item.role == PUBLIC else self.by_port[item.port]
            served = "; ".join(ENDPOINTS[role] for role in ROLES if role in roles)
            lines.append(f"listener {item.role}: {item.url()} ({served})")
        return lines
