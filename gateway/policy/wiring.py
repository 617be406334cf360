"""Building each route's policy from the configuration: the guard's hook, the list layer, and the
pin store shared by every route of the process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry

from gateway.edge.asgi import ASGIApp
from gateway.policy.hook import RoutePolicy
from gateway.policy.layer import PolicyListLayer
from gateway.policy.metrics import PolicyMetrics
from gateway.policy.pins import MemoryPins, PinBackend, RedisPins, ToolPins

if TYPE_CHECKING:
    from gateway.server.config import GatewayConfig, RouteConfig, StoreSection


def pin_scope(gateway_id: str, route: str) -> str:
    """Pins are kept per gateway identity and route (replicas share both)."""
    return f"{gateway_id}/{route}"


def build_pin_backend(store: StoreSection) -> PinBackend:
    if store.type == "redis":
        assert store.url is not None  # the store section requires it
        return RedisPins(store.url, timeout=store.timeout_seconds)
    return MemoryPins()


class PolicyWiring:
    def __init__(self, config: GatewayConfig, registry: CollectorRegistry) -> None:
        self.config = config
        self.registry = registry
        self.hooks: dict[str, RoutePolicy] = {}
        self._metrics: PolicyMetrics | None = None
        self._pins: PinBackend | None = None

    def hook(self, route: RouteConfig) -> RoutePolicy:
        found = self.hooks.get(route.name)
        if found is None:
            if self._metrics is None:
                self._metrics = PolicyMetrics(self.registry)
            pins = None
            if route.policy.pin_tools:
                if self._pins is None:
                    self._pins = build_pin_backend(self.config.store)
                pins = ToolPins(self._pins, pin_scope(self.config.gateway.id, route.name), route.policy.accepted_tools)
            found = self.hooks[route.name] = RoutePolicy(route=route.name, config=route.policy,
                                                         metrics=self._metrics, pins=pins)  # fmt: skip
        return found

    def list_layer(self, route: RouteConfig, inner: ASGIApp) -> ASGIApp:
        return PolicyListLayer(inner, self.hook(route), max_bytes=self.config.limits.max_inspect_bytes)

    async def aclose(self) -> None:
        if self._pins is not None:
            await self._pins.aclose()
