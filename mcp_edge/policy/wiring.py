"""Building each route's policy from its section: the flow's call decisions, the list layer, and
the pin store shared by every route of the process."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry

from mcp_edge.edge.asgi import ASGIApp
from mcp_edge.edge.body import AnswerBudget
from mcp_edge.policy.config import RoutePolicyConfig
from mcp_edge.policy.hook import RoutePolicy
from mcp_edge.policy.layer import PolicyListLayer
from mcp_edge.policy.metrics import PolicyMetrics
from mcp_edge.policy.pins import MemoryPins, PinBackend, RedisPins, ToolPins
from mcp_edge.store.config import StoreSection


def pin_scope(gateway_id: str, route: str) -> str:
    """Pins are kept per gateway identity and route (replicas share both)."""
    return f"{gateway_id}/{route}"


def build_pin_backend(store: StoreSection) -> PinBackend:
    if store.type == "redis":
        assert store.url is not None  # the store section requires it
        return RedisPins(store.url, timeout=store.timeout_seconds)
    return MemoryPins()


class PolicyWiring:
    def __init__(
        self,
        *,
        gateway_id: str,
        store: StoreSection,
        registry: CollectorRegistry,
        max_list_bytes: int,
        budget: AnswerBudget | None = None,
    ) -> None:
        self.gateway_id = gateway_id
        #: The process's answer pool: a list answer read to be filtered draws from it.
        self.budget = budget
        self.store = store
        self.registry = registry
        self.max_list_bytes = max_list_bytes
        self.policies: dict[str, RoutePolicy] = {}
        self._metrics: PolicyMetrics | None = None
        self._pins: PinBackend | None = None

    def policy(self, route: str, config: RoutePolicyConfig) -> RoutePolicy:
        """The route's policy (one per route, built on first use)."""
        found = self.policies.get(route)
        if found is None:
            if self._metrics is None:
                self._metrics = PolicyMetrics(self.registry)
            pins = None
            if config.pin_tools:
                if self._pins is None:
                    self._pins = build_pin_backend(self.store)
                pins = ToolPins(
                    self._pins, pin_scope(self.gateway_id, route), config.accepted_tools
                )
            found = self.policies[route] = RoutePolicy(
                route=route, config=config, metrics=self._metrics, pins=pins
            )
        return found

    def list_layer(
        self,
        route: str,
        config: RoutePolicyConfig,
        inner: ASGIApp,
        on_over_budget: Callable[[], None] | None = None,
    ) -> ASGIApp:
        return PolicyListLayer(
            inner,
            self.policy(route, config),
            max_bytes=self.max_list_bytes,
            budget=self.budget,
            on_over_budget=on_over_budget,
        )

    async def aclose(self) -> None:
        if self._pins is not None:
            await self._pins.aclose()
