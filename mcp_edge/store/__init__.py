"""Single-use sealed state (opt-in per route): each state's random id (``j``) may be spent once.

The flow middleware calls the replay guard built here after the state verified and before anything is
forwarded. A second use is ``StateRejected("replayed")``. A store that cannot answer, whatever it
raised, fails closed (HTTP 503 with a JSON-RPC error, nothing forwarded) unless
``store.fail_open`` is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.seal import StateRejected
from mcp_edge.observability.logs import event
from mcp_edge.store.base import StateStore, StoreUnavailable
from mcp_edge.store.memory_store import MemoryStore

if TYPE_CHECKING:
    from mcp_edge.store.config import StoreSection

__all__ = [
    "MemoryStore",
    "StateStore",
    "StoreMetrics",
    "StoreUnavailable",
    "build_store",
    "make_replay_guard",
    "store_unavailable_error",
]


class StoreMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.unavailable = Counter(
            "mcp_edge_state_store_unavailable",
            "Single-use checks the store could not answer, by what was done (rejected|fail_open)",
            ["route", "action"],
            registry=registry,
        )
        self.consumed = Counter(
            "mcp_edge_state_store_consumed",
            "States spent in the single-use store",
            ["route"],
            registry=registry,
        )


def build_store(section: StoreSection, clock: Callable[[], float] = time.time) -> StateStore:
    if section.type == "redis":
        from mcp_edge.store.redis_store import RedisStore

        assert section.url is not None  # the config validator requires it
        return RedisStore(
            section.url,
            timeout=section.timeout_seconds,
            key_prefix=section.key_prefix,
            clock=clock,
            spend_replicas=section.spend_replicas,
        )
    return MemoryStore(max_entries=section.max_entries, clock=clock)


def store_unavailable_error() -> RpcError:
    return RpcError(
        INTERNAL_ERROR,
        "Single-use state store unavailable; retry shortly",
        {"reason": "state_store_unavailable"},
        status=503,
        headers={"Retry-After": "1"},
    )


def make_replay_guard(
    store: StateStore,
    *,
    route: str,
    leeway_seconds: int,
    fail_open: bool,
    metrics: StoreMetrics,
) -> Callable[[str, int], Awaitable[None]]:
    """The ``GuardSettings.replay_guard`` of one route.

    Ids are kept until expiry plus the leeway, since the flow middleware still accepts a state that long.
    """

    async def replay_guard(jti: str, expires_at: int) -> None:
        try:
            await store.consume(jti, expires_at + leeway_seconds)
        except StateRejected:
            raise
        except Exception as exc:  # noqa: BLE001  (StoreUnavailable, or whatever a store raised)
            action = "fail_open" if fail_open else "rejected"
            metrics.unavailable.labels(route, action).inc()
            event(
                logging.WARNING,
                "single-use store unavailable",
                route=route,
                action=action,
                error=str(exc) if isinstance(exc, StoreUnavailable) else type(exc).__name__,
            )
            if not fail_open:
                raise store_unavailable_error() from None
            return
        metrics.consumed.labels(route).inc()

    return replay_guard
