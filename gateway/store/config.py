"""The ``store:`` section: the shared Redis (or this process's memory) that single-use states,
single-use approvals, tool pins, rate-limit budgets and the edge cache keep what they share."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from gateway.sections import Section


class StoreSection(Section):
    """Where single-use routes record spent states (see ``routes[].single_use``)."""

    #: ``memory`` is per process (one replica only); ``redis`` is shared by all replicas.
    type: Literal["memory", "redis"] = "memory"
    #: ``redis://[user:password@]host:port/db``, ``rediss://...`` or ``unix://...`` (env MCP_EDGE_STORE_URL).
    url: str | None = Field(None, repr=False)
    #: Store unreachable: refuse the retry with HTTP 503 (default) or let it through unchecked.
    fail_open: bool = False
    timeout_seconds: float = Field(0.5, gt=0, le=30)
    key_prefix: str = "mcp-edge:jti:"
    #: Memory store only: most spent states remembered at once (then it refuses, fail closed).
    max_entries: int = Field(1_000_000, gt=0)

    @model_validator(mode="after")
    def _url(self) -> StoreSection:
        if self.type == "redis":
            if not self.url:
                raise ValueError("url: required when type is redis (e.g. redis://redis:6379/0)")
            if urlsplit(self.url).scheme not in ("redis", "rediss", "unix"):
                raise ValueError("url: must be a redis://, rediss:// or unix:// URL")
        return self
