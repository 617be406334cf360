"""Configuration of the edge cache: the top-level ``cache:`` section (where entries live, how much
room they get) and each route's ``cache:`` (whether the route uses it)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CacheSection(_Model):
    """Top-level ``cache:``: shared by every route that enables its cache."""

    #: ``memory``: per process, LRU bounded by ``max_bytes``. ``redis``: the same memory LRU in
    #: front of the ``store`` Redis (``store.type: redis``), so replicas share what one of them
    #: fetched (a federated member's entries in Redis only, so its list change reaches all).
    backend: Literal["memory", "redis"] = "memory"
    #: Room for cached results in this process (least recently used entries are evicted first).
    max_bytes: int = Field(64 * 1024 * 1024, gt=0)
    #: Larger results are not cached.
    max_entry_bytes: int = Field(1024 * 1024, gt=0)
    #: Upper bound on an upstream's ``ttlMs`` (an entry is never kept longer than this).
    max_ttl_seconds: float = Field(3600.0, gt=0, le=7 * 24 * 3600)
    #: Redis backend: longest wait per lookup or store; slower counts as a miss.
    timeout_seconds: float = Field(0.1, gt=0, le=30)
    #: Redis backend: prefix of the keys holding entries.
    key_prefix: str = "mcp-edge:cache:"


class RouteCache(_Model):
    """A route's ``cache:``. Off unless ``enabled``."""

    #: Answer ``tools/list``, ``prompts/list``, ``resources/list``, ``resources/templates/list``,
    #: ``server/discover`` and ``resources/read`` from the cache while the upstream's ``ttlMs``
    #: lasts, when it marked the result ``cacheScope: "public"``.
    enabled: bool = False
    #: Also keep ``cacheScope: "private"`` results, each for the caller (principal and bearer
    #: token) it was fetched for only. Needs authenticated callers (jwt or trusted_header).
    private: bool = False
    #: On a route that passes the caller's identity upstream (``upstream_auth.principal_header``
    #: or ``forward_client_token``), the identity is part of every key, so a result the upstream
    #: marks ``public`` still goes to that caller only. ``true`` leaves it out of the key of
    #: ``public`` results, for upstreams whose public answers truly do not depend on who asks.
    trust_public: bool = False
    #: Request headers the upstream's answers do not depend on, left out of the key (e.g. a
    #: balancer's ``X-Forwarded-For``, which would otherwise make an entry per client address).
    #: Every other header the gateway forwards is part of the key.
    ignore_headers: list[str] = Field(default_factory=list, max_length=64)

    @field_validator("ignore_headers")
    @classmethod
    def _header_names(cls, v: list[str]) -> list[str]:
        names = []
        for name in v:
            if not _TOKEN.fullmatch(name):
                raise ValueError(f"{name!r} is not a header name")
            if name.lower() in ("authorization", "cookie"):
                raise ValueError(
                    f"{name!r}: a credential is always part of the key (see trust_public)"
                )
            if name.lower() == "host":
                raise ValueError(
                    f"{name!r}: the Host the upstream gets is always part of the key (an app "
                    "in-process gets the client's)"
                )
            names.append(name.lower())
        return names
