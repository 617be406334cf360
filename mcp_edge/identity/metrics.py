"""Prometheus metrics of upstream identity (registered once per app, when a route uses it).

``route`` is the member's key (``<route>`` or ``<route>/<member>``), as in the cache's and the
adapters' metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_EXCHANGE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class IdentityMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.exchanges = Counter(
            "mcp_edge_token_exchanges",
            "Token exchanges asked of the authorization server, by outcome: ok, failed (it refused "
            "or issued nothing usable: token_exchange_failed), unavailable (no usable answer: "
            "token_exchange_unavailable)",
            ["route", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "mcp_edge_token_exchange_failures",
            "Calls that got no exchanged token, by reason: the server's OAuth error code "
            "(invalid_grant, invalid_target, invalid_client, ... or other), unusable_answer, "
            "unreachable, timeout, too_large, bad_answer, no_subject_token, busy",
            ["route", "reason"],
            registry=registry,
        )
        self.cache = Counter(
            "mcp_edge_token_exchange_cache",
            "Lookups of an exchanged token, by result: memory (this replica's), shared (the "
            "store's, another replica's exchange), miss (exchanged now)",
            ["route", "result"],
            registry=registry,
        )
        self.seconds = Histogram(
            "mcp_edge_token_exchange_seconds",
            "Time a token exchange took at the authorization server (answers of any outcome)",
            ["route"],
            buckets=_EXCHANGE_BUCKETS,
            registry=registry,
        )
        self.vault_errors = Counter(
            "mcp_edge_identity_store_errors",
            "Shared-store operations of upstream identity that failed or timed out (the exchange "
            "went on without the shared cache)",
            ["op"],
            registry=registry,
        )
