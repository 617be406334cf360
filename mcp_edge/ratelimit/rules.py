"""Rate-limit rules without I/O: parsing budgets, deciding which budgets a request spends, and the
answer to a request over its budget.

A route has budgets per principal and for all callers together (``global``), and per tool name
(``tools/call``), again per principal and global. A request spends one unit of each budget that
applies to it; a legacy-era batch spends one per JSON-RPC request in it. Identifiers carry the
gateway id and the route, and a hash of the principal (never the principal in clear), so Redis
can be shared by several gateways and holds no caller identities.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.memo import BoundedMemo
from mcp_edge.ratelimit.config import RouteRateLimits
from mcp_edge.ratelimit.rates import describe, parse_rates

if TYPE_CHECKING:
    from limits import RateLimitItem

__all__ = [
    "BUDGET_KINDS",
    "RATE_LIMITED",
    "Budget",
    "Check",
    "RoutePolicy",
    "budget_store_unavailable_error",
    "describe",
    "legacy_demand",
    "parse_rates",
    "principal_key",
    "rate_limited_error",
    "retry_after_seconds",
]

#: JSON-RPC code of "rate limited" (HTTP 429). The spec defines none: -32020..-32099 are the
#: spec's own (implementations must not invent codes there), -32000..-32019 are discouraged for
#: new implementations, and the rest of -32768..-32000 is reserved by JSON-RPC, where -32600
#: (invalid request) or -32603 (internal error) would tell a client the wrong thing. So an
#: application code outside the reserved range, negative like every MCP code, that reads "429".
RATE_LIMITED = -31429

#: Callers whose checks of a single request a route keeps (all dropped when full).
MAX_KEPT_CHECKS = 4096

#: Which budget ran out: every caller's own, all callers', a tool's per caller, a tool's total.
BUDGET_KINDS = ("principal", "global", "tool", "tool_global")


@functools.lru_cache(maxsize=4096)
def principal_key(principal_id: str) -> str:
    """A stable, non-reversible handle for a caller in budget keys (same on every replica and
    across key rotations, unlike the keyed tag sealed into state)."""
    return hashlib.sha256(b"mcp-edge/limits/v1\0" + principal_id.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Budget:
    kind: str
    item: RateLimitItem
    tool: str | None = None
    #: The identifiers every key of this budget starts with (gateway id, route, kind[, tool]).
    prefix: tuple[str, ...] = field(default=(), compare=False)

    @property
    def per_principal(self) -> bool:
        return self.kind in ("principal", "tool")


@dataclass(frozen=True, slots=True)
class Check:
    """One budget to spend ``cost`` units of, under ``identifiers``."""

    budget: Budget
    identifiers: tuple[str, ...]
    cost: int = 1


class RoutePolicy:
    """The budgets of one route, resolved once at start."""

    def __init__(self, gateway_id: str, route: str, config: RouteRateLimits) -> None:
        self.scope = (gateway_id, route)
        self.route_budgets: list[Budget] = []
        self.tool_budgets: dict[str, list[Budget]] = {}
        if config.per_principal:
            self.route_budgets += [
                self._budget("principal", i) for i in parse_rates(config.per_principal)
            ]
        if config.global_:
            self.route_budgets += [self._budget("global", i) for i in parse_rates(config.global_)]
        for tool, limits in config.tools.items():
            budgets = []
            if limits.per_principal:
                budgets += [
                    self._budget("tool", i, tool) for i in parse_rates(limits.per_principal)
                ]
            if limits.global_:
                budgets += [
                    self._budget("tool_global", i, tool) for i in parse_rates(limits.global_)
                ]
            if budgets:
                self.tool_budgets[tool] = budgets
        self._single: BoundedMemo[str, list[Check]] = BoundedMemo(MAX_KEPT_CHECKS)

    def _budget(self, kind: str, item: RateLimitItem, tool: str | None = None) -> Budget:
        prefix = (*self.scope, kind) if tool is None else (*self.scope, kind, tool)
        return Budget(kind, item, tool, prefix)

    @property
    def has_tool_budgets(self) -> bool:
        return bool(self.tool_budgets)

    def checks(self, principal: str, requests: int, tool_calls: Mapping[str, int]) -> list[Check]:
        """What a request (or legacy batch) of ``requests`` JSON-RPC requests, ``tool_calls`` of
        them ``tools/call`` by tool name, spends. ``principal`` is :func:`principal_key`'s.
        The list is shared: do not change it."""
        if requests == 1 and not tool_calls:  # one request, no tool budget: kept per caller
            known = self._single.get(principal)
            if known is None:
                known = self._single.put(
                    principal, [Check(b, self._ids(b, principal)) for b in self.route_budgets]
                )
            return known
        out: list[Check] = []
        if requests > 0:
            out += [Check(b, self._ids(b, principal), requests) for b in self.route_budgets]
        for tool, n in tool_calls.items():
            if n > 0:
                out += [
                    Check(b, self._ids(b, principal), n) for b in self.tool_budgets.get(tool, ())
                ]
        return out

    @staticmethod
    def _ids(budget: Budget, principal: str) -> tuple[str, ...]:
        return (*budget.prefix, principal) if budget.per_principal else budget.prefix


def legacy_demand(doc: Any) -> tuple[int, collections.Counter[str]]:
    """What a legacy-era body asks for: the number of JSON-RPC requests in it (a 2025-03-26 body
    may be a batch; responses and notifications, such as the answer to a server's elicitation,
    spend nothing) and its ``tools/call`` requests by tool name."""
    requests = 0
    tools: collections.Counter[str] = collections.Counter()
    for message in doc if isinstance(doc, list) else [doc]:
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("method"), str)
            or "id" not in message
        ):
            continue
        requests += 1
        if message["method"] == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str):
                tools[name] += 1
    return requests, tools


def retry_after_seconds(reset_at: float, now: float) -> int:
    """Whole seconds until the budget has room again (at least 1)."""
    return max(1, math.ceil(reset_at - now))


def rate_limited_error(budget: Budget, retry_after: int) -> RpcError:
    """HTTP 429 with ``Retry-After``; ``data`` says the same for clients that only see the body."""
    data: dict[str, Any] = {
        "reason": "rate_limited",
        "budget": budget.kind,
        "limit": describe(budget.item),
        "retryAfterSeconds": retry_after,
    }
    if budget.tool is not None:
        data["tool"] = budget.tool
    return RpcError(
        RATE_LIMITED,
        f"Rate limit exceeded ({describe(budget.item)}); retry in {retry_after} s",
        data,
        status=429,
        headers={"Retry-After": str(retry_after)},
    )


def budget_store_unavailable_error() -> RpcError:
    """Fail closed: the budget could not be checked."""
    return RpcError(
        INTERNAL_ERROR,
        "Rate-limit store unavailable; retry shortly",
        {"reason": "rate_limit_store_unavailable"},
        status=503,
        headers={"Retry-After": "1"},
    )
