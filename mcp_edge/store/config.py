"""The ``store:`` section: the shared Redis (or this process's memory) that single-use states,
single-use approvals, tool pins, rate-limit budgets and the edge cache keep what they share."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from mcp_edge import extras
from mcp_edge.sections import Section


class StoreSection(Section):
    """Where single-use routes record spent states (see ``routes[].single_use``)."""

    #: ``memory`` is per process (one replica only); ``redis`` is shared by all replicas.
    type: Literal["memory", "redis"] = "memory"
    #: One server: ``redis://[user:password@]host:port/db``, ``rediss://...`` or ``unix://...``;
    #: Sentinel: ``redis+sentinel://[user:password@]host:port[,host:port...]/<master>[/db]``
    #: (``rediss+sentinel://`` for TLS); Cluster: ``redis+cluster://[user:password@]host:port[,...]``
    #: (``rediss+cluster://``). Env MCP_EDGE_STORE_URL. Every feature that shares state uses it.
    url: str | None = Field(None, repr=False)
    #: Store unreachable: refuse the retry with HTTP 503 (default) or let it through unchecked.
    fail_open: bool = False
    timeout_seconds: float = Field(0.5, gt=0, le=30)
    key_prefix: str = "mcp-edge:jti:"
    #: Where the secret vault (exchanged tokens, users' grants: mcp_edge.identity.vault) keeps
    #: its sealed entries and per-principal indexes.
    vault_key_prefix: str = "mcp-edge:vault:"
    #: Memory store only: most spent states remembered at once (then it refuses, fail closed).
    max_entries: int = Field(1_000_000, gt=0)
    #: Redis only: a spend (single-use state, approval) counts once this many replicas hold it
    #: (``WAIT``, bounded by ``timeout_seconds``); fewer is "unknown" and fails closed. 0: the
    #: master's answer is enough (a failover may lose the spends of its last moments). Not with
    #: a cluster (its client does not keep the connection ``WAIT`` needs).
    spend_replicas: int = Field(0, ge=0, le=5)

    @model_validator(mode="after")
    def _url(self) -> StoreSection:
        if self.type == "redis":
            if not self.url:
                raise ValueError("url: required when type is redis (e.g. redis://redis:6379/0)")
            extras.require("redis", "store.type: redis (the shared store's Redis client)")
            from mcp_edge.store.redis import parse_redis_url  # (the client checks the options)

            target = parse_redis_url(self.url)
            if self.spend_replicas and target.kind == "cluster":
                raise ValueError(
                    "spend_replicas: not available with a cluster (WAIT needs the connection of the "
                    "write); set it to 0, or use redis+sentinel://"
                )
        return self
