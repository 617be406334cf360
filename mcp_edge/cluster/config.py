"""The ``cluster:`` section: how replicas reach each other."""

from __future__ import annotations

from pydantic import Field, field_validator

from mcp_edge.core.urls import no_credentials
from mcp_edge.sections import Section, check_http_url


class ClusterListen(Section):
    """A listener of its own for the replicas' endpoints (``/.mcp-edge/*``)."""

    #: Default: ``listen.host``. A private address (the pod IP) keeps it off public networks.
    host: str | None = None
    #: Must differ from ``listen.port`` (env MCP_EDGE_CLUSTER_PORT).
    port: int = Field(ge=1, le=65535)


class AdminListen(Section):
    """A listener of its own for the probes and the scraper (``/healthz``, ``/readyz``, ``/metrics``)."""

    #: Default: ``listen.host``.
    host: str | None = None
    #: Must differ from the other listeners' ports (env MCP_EDGE_ADMIN_PORT).
    port: int = Field(ge=1, le=65535)


class AdminSection(Section):
    #: Serve ``/healthz``, ``/readyz`` and ``/metrics`` on a listener of their own, and only
    #: there (404 on the public and cluster ports). Without it they share the public listener.
    listen: AdminListen | None = None


class ClusterSection(Section):
    """How replicas reach each other (the legacy bridge's parked calls and stdio sessions)."""

    #: This replica's own address as other replicas reach it, e.g. ``http://$(POD_IP):9090``
    #: (env MCP_EDGE_ADVERTISE_URL). Sealed into the state of calls parked here. Default: the
    #: cluster listener's address (else the public one), or this host's resolved address when
    #: listening on all interfaces.
    advertise_url: str | None = None
    #: Serve the replicas' endpoints on a listener of their own, and only there (404 on the
    #: public port). Without it they share the public listener.
    listen: ClusterListen | None = None
    #: Most legacy calls held open on this replica at once (then flows use another strategy).
    max_parked: int = Field(256, ge=0, le=100_000)

    @field_validator("advertise_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        # (Sealed into states and session ids, and printed: the replica's own address.)
        return None if v is None else no_credentials(check_http_url(v)).rstrip("/")
