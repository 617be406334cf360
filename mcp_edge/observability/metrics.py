"""Prometheus metrics. One registry per app, so several gateways can live in one process (tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from mcp_edge.observability import multiprocess
from mcp_edge.observability.operations import OPERATION_BUCKETS

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # OpenTelemetry's mcp.server.operation.duration (see mcp_edge.observability.operations).
        self.operation_seconds = Histogram(
            "mcp_server_operation_duration_seconds",
            "Duration of MCP requests from arrival until the response is complete (OpenTelemetry MCP "
            "semantic conventions)",
            ["route", "mcp_method_name", "gen_ai_tool_name", "error_type", "mcp_protocol_version"],
            buckets=OPERATION_BUCKETS,
            registry=r,
        )
        # The HTTP view: status codes and time to the response's first byte.
        self.requests = Counter(
            "mcp_edge_requests",
            "Requests handled, by route, JSON-RPC method and HTTP status",
            ["route", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "mcp_edge_request_seconds",
            "Time from request to response start, whole path",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_seconds = Histogram(
            "mcp_edge_upstream_seconds",
            "Time the upstream took to start answering",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.gateway_seconds = Histogram(
            "mcp_edge_gateway_overhead_seconds",
            "Time spent in the gateway itself (request side)",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.rounds_issued = Counter(
            "mcp_edge_mrtr_rounds_issued",
            "InputRequiredResults sealed and sent to clients",
            ["route"],
            registry=r,
        )
        self.rounds_accepted = Counter(
            "mcp_edge_mrtr_retries_accepted",
            "Retries whose requestState verified",
            ["route"],
            registry=r,
        )
        self.flows_completed = Counter(
            "mcp_edge_mrtr_flows_completed",
            "Retries that ended with a complete result",
            ["route"],
            registry=r,
        )
        self.state_rejections = Counter(
            "mcp_edge_state_rejections",
            "Retries refused, by reason",
            ["route", "reason"],
            registry=r,
        )
        self.violations = Counter(
            "mcp_edge_input_required_violations",
            "Upstream answers that broke the MRTR rules",
            ["route", "kind"],
            registry=r,
        )
        self.body_refused = Counter(
            "mcp_edge_body_refused",
            "Requests refused before their body was read whole, by reason: size (413), body_timeout (408), "
            "body_budget (503: the process holds as many request bodies as it may)",
            ["route", "reason"],
            registry=r,
        )
        self.answer_refused = Counter(
            "mcp_edge_answer_refused",
            "Upstream answers the client got an error for instead, by reason: answer_budget (503: "
            "the process holds as many answers as it may, limits.max_inflight_answer_bytes)",
            ["route", "reason"],
            registry=r,
        )
        self.answer_bytes = Gauge(
            "mcp_edge_answer_bytes_held",
            "Bytes of upstream answers held for inspection until their clients take them, counted "
            "against limits.max_inflight_answer_bytes",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.held_bytes = Gauge(
            "mcp_edge_held_bytes",
            "Bytes held for callers, by pool (body: limits.max_inflight_body_bytes; answer: "
            "limits.max_inflight_answer_bytes) and kind (request_body, answer, member_answer, "
            "member_part, fan_in, bridge, forwarded, list_filter, cache_fill)",
            ["pool", "kind"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.upstream_errors = Counter(
            "mcp_edge_upstream_errors", "Upstream failures, by kind", ["route", "kind"], registry=r
        )
        self.inflight = Gauge(
            "mcp_edge_inflight_requests",
            "Requests (and streams) in flight",
            ["route"],
            registry=r,
            multiprocess_mode="livesum",
        )
        # The legacy bridge (2026-07-28 clients in front of 2025-era servers).
        self.bridge_sessions = Counter(
            "mcp_edge_bridge_sessions_opened",
            "Legacy upstream sessions opened by the bridge",
            ["route"],
            registry=r,
        )
        self.bridge_flows = Counter(
            "mcp_edge_bridge_flow_events",
            "Bridged calls that asked the client (asked), went on (continued), completed, were re-run "
            "(replayed) or could not go on (lost), by strategy",
            ["route", "strategy", "event"],
            registry=r,
        )
        self.parked = Gauge(
            "mcp_edge_bridge_parked_calls",
            "Legacy calls held open on this replica awaiting an answer",
            ["route"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.parked_capacity = Gauge(
            "mcp_edge_bridge_parked_capacity",
            "Legacy calls this replica may hold parked at once (cluster.max_parked)",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.forwards = Counter(
            "mcp_edge_bridge_forwards",
            "Retries forwarded to the replica holding their parked call, by result (ok, lost, "
            "over_budget: the answer budget had no room for the answer)",
            ["route", "result"],
            registry=r,
        )
        self.peer_refused = Counter(
            "mcp_edge_peer_refused",
            "Requests on the replicas' endpoints refused before they were acted on",
            ["endpoint", "reason"],
            registry=r,
        )
        self.era = Gauge(
            "mcp_edge_upstream_era",
            "Detected upstream era (1 for the current one)",
            ["route", "era"],
            registry=r,
            multiprocess_mode="livemax",
        )
        # Local (stdio) upstreams run by the gateway.
        self.stdio_processes = Gauge(
            "mcp_edge_stdio_processes",
            "Stdio upstream processes by state (1 for the current one)",
            ["route", "instance", "state"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.stdio_restarts = Counter(
            "mcp_edge_stdio_restarts",
            "Stdio upstream processes restarted after they exited",
            ["route"],
            registry=r,
        )
        self.stdio_pool = Counter(
            "mcp_edge_stdio_pool",
            "Stdio processes of routes whose callers are kept apart: started, adopted (the spare "
            "taken by a new caller), reaped (idle), evicted (room for another caller), full (a "
            "caller refused: every process in use)",
            ["route", "event"],
            registry=r,
        )


class _HeldBytes(Protocol):
    """A budget of held bytes (mcp_edge.edge.body.AnswerBudget, BodyBudget)."""

    pool: str
    in_use: int
    held: dict[str, int]
    on_change: Callable[[int], None] | None
    on_kind_change: Callable[[str, int], None] | None


def _reader(held: dict[str, int], kind: str) -> Callable[[], float]:
    return lambda: held.get(kind, 0)


def watch_held(metrics: Metrics, budget: _HeldBytes) -> None:
    """``mcp_edge_held_bytes{pool, kind}`` from ``budget``: read at each scrape in one process;
    with several workers written as it changes."""
    gauge = metrics.held_bytes
    if not multiprocess.enabled():
        for kind in budget.held:
            gauge.labels(budget.pool, kind).set_function(_reader(budget.held, kind))
        return
    pool = budget.pool

    def changed(kind: str, n: int) -> None:
        gauge.labels(pool, kind).set(n)

    budget.on_kind_change = changed


def watch_answer_budget(metrics: Metrics, budget: _HeldBytes) -> None:
    """``mcp_edge_answer_bytes_held`` from ``budget``: read at each scrape in one process;
    with several workers (the values live in files) written as it changes."""
    if not multiprocess.enabled():
        metrics.answer_bytes.set_function(lambda: budget.in_use)
    else:
        budget.on_change = metrics.answer_bytes.set
    watch_held(metrics, budget)
