"""What a federation tells the operator: its metrics and log lines.

| metric | labels | what |
|---|---|---|
| `mcp_edge_member_up` | `route`, `member` | 1 while the member answers, 0 once it could not be reached |
| `mcp_edge_federation_missing_total` | `route`, `member`, `reason` | fan-outs (lists, discover) a member was missing from |
| `mcp_edge_federation_collisions_total` | `route`, `member`, `kind` | items a member listed that the collision rule left out |

Labels hold configured names only (routes, members) and fixed words (reasons, kinds). Log lines:
``federation member missing`` (route, member, reason, method; at most once a minute per member
and reason, with how many fan-outs missed it since the last line: a member down does not flood
the log with one line per list), ``federation item dropped``
(route, member, kind, name, reason: once per item until 4096 were told, then again after a
restart) and ``federation member down`` / ``federation member up``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge

from mcp_edge.core.federation.parts import Dropped, MissingMember
from mcp_edge.observability.logs import event

#: Dropped items told in the log, at most (each once).
MAX_TOLD = 4096
#: A member missing for one reason is told at most once in this many seconds.
MISSING_LOG_SECONDS = 60.0


class FederationMetrics:
    """Registered once per registry (shared by every federated route of the app)."""

    _by_registry: dict[int, FederationMetrics] = {}

    def __init__(self, registry: CollectorRegistry) -> None:
        self.member_up = Gauge(
            "mcp_edge_member_up",
            "Members of federated routes: 1 while the member answers, 0 once it could not be reached",
            ["route", "member"],
            registry=registry,
            multiprocess_mode="livemin",
        )
        self.missing = Counter(
            "mcp_edge_federation_missing",
            "Fan-outs (lists, server/discover) answered without a member, by why it was missing",
            ["route", "member", "reason"],
            registry=registry,
        )
        self.collisions = Counter(
            "mcp_edge_federation_collisions",
            "Items a member listed that the collision rule left out of the merged list",
            ["route", "member", "kind"],
            registry=registry,
        )

    @classmethod
    def of(cls, registry: CollectorRegistry) -> FederationMetrics:
        found = cls._by_registry.get(id(registry))
        if found is None or found._registry is not registry:
            found = cls(registry)
            found._registry = registry
            cls._by_registry[id(registry)] = found
        return found

    _registry: CollectorRegistry | None = None


class Reporter:
    """One federated route's reports."""

    def __init__(
        self,
        route: str,
        metrics: FederationMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.route = route
        self.metrics = metrics
        self.clock = clock
        self._told: set[tuple[str, str, str | None]] = set()
        #: (member, reason) -> (when last told, fan-outs missing it since).
        self._missing_told: dict[tuple[str, str], tuple[float, int]] = {}

    def missing(self, method: str, missing: Iterable[MissingMember]) -> None:
        now = self.clock()
        for m in missing:
            self.metrics.missing.labels(self.route, m.member, m.reason).inc()
            key = (m.member, m.reason)  # configured names and fixed words: a bounded set
            last, since = self._missing_told.get(key, (None, 0))
            if last is not None and now - last < MISSING_LOG_SECONDS:
                self._missing_told[key] = (last, since + 1)
                continue
            self._missing_told[key] = (now, 0)
            event(
                logging.WARNING,
                "federation member missing",
                route=self.route,
                member=m.member,
                reason=m.reason,
                method=method,
                times=since + 1,
            )

    def dropped(self, dropped: Iterable[Dropped]) -> None:
        for d in dropped:
            self.metrics.collisions.labels(self.route, d.member, d.kind).inc()
            key = (d.member, d.kind, d.name)
            if key in self._told or len(self._told) >= MAX_TOLD:
                continue
            self._told.add(key)
            event(
                logging.WARNING,
                "federation item dropped",
                route=self.route,
                member=d.member,
                kind=d.kind,
                name=d.name,
                reason=d.reason,
            )

    def health(self, member: str, up: bool, reason: str | None) -> None:
        self.metrics.member_up.labels(self.route, member).set(1 if up else 0)
        event(
            logging.INFO if up else logging.WARNING,
            "federation member up" if up else "federation member down",
            route=self.route,
            member=member,
            reason=reason,
        )
