"""Configuration of rate limits: the top-level ``rate_limits:`` section (how budgets are kept) and
each route's ``rate_limits:`` (what the budgets are)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mcp_edge.ratelimit.rates import parse_rates


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _rates(v: str | None) -> str | None:
    if v is not None:
        parse_rates(v)  # a ValueError names what is wrong
    return v


class RateLimitSection(_Model):
    """Top-level ``rate_limits:``: where budgets are counted. Budgets live in memory (one process)
    or, when ``store.type`` is ``redis``, in that Redis, shared by every replica."""

    #: ``moving-window``: exact (never more than N in any window; Redis keeps one entry per
    #: request in the window). ``sliding-window``: two counters per key, approximate near the
    #: window boundary (a weighted count of the previous window).
    strategy: Literal["moving-window", "sliding-window"] = "moving-window"
    #: Budget store unreachable: let the request through (default; logged and counted) or refuse it
    #: with HTTP 503 and ``Retry-After``.
    fail_open: bool = True
    #: Longest wait for the Redis budget store per request; slower counts as unreachable.
    timeout_seconds: float = Field(0.25, gt=0, le=30)
    #: Prefix of the Redis keys holding budgets.
    key_prefix: str = "mcp-edge:limits"


class ToolRateLimits(_Model):
    """Budgets for ``tools/call`` of one tool (on top of the route's)."""

    #: Per caller, e.g. ``10/minute`` or ``2/second; 100/hour``.
    per_principal: str | None = None
    #: All callers together.
    global_: str | None = Field(None, alias="global")

    @field_validator("per_principal", "global_")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        return _rates(v)


class RouteRateLimits(_Model):
    """A route's ``rate_limits:``. Every request counts once against each budget that applies;
    the first ``retries_per_unit`` retries of an MRTR flow whose sealed state verifies do not
    count again."""

    #: Per caller, e.g. ``60/minute`` (several: ``10/second; 600/hour``).
    per_principal: str | None = None
    #: All callers of this route together.
    global_: str | None = Field(None, alias="global")
    #: Per tool name: a budget string (per caller) or ``{per_principal, global}``.
    tools: dict[str, ToolRateLimits] = Field(default_factory=dict)
    #: Retries of an MRTR flow that ride on the unit its first request spent (rounds 1..N, by
    #: the round number sealed in the state, so every replica counts alike); each later retry
    #: spends like a new request. One unit buys at most N + 1 upstream calls. 0: every retry
    #: spends.
    retries_per_unit: int = Field(3, ge=0, le=1000)

    @field_validator("per_principal", "global_")
    @classmethod
    def _check(cls, v: str | None) -> str | None:
        return _rates(v)

    @field_validator("tools", mode="before")
    @classmethod
    def _short_form(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {
                name: {"per_principal": spec} if isinstance(spec, str) else spec
                for name, spec in v.items()
            }
        return v

    @property
    def enabled(self) -> bool:
        return bool(
            self.per_principal
            or self.global_
            or any(t.per_principal or t.global_ for t in self.tools.values())
        )
