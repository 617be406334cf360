"""gateway.observability.observer: the request path's histogram observations are the library's."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from gateway.observability.metrics import Metrics
from gateway.observability.observer import Observer
from gateway.observability.operations import OPERATION_BUCKETS

AMOUNTS = [
    0.0,
    0.0004,
    0.0005,
    0.00051,
    0.001,
    0.0024,
    0.0025,
    0.3,
    1,
    2.5,
    29.9,
    30,
    31,
    1e9,
    -1.0,
]


def exposition(observe_with_observer: bool, buckets: tuple[float, ...]) -> bytes:
    registry = CollectorRegistry()
    histogram = Histogram("h_seconds", "h", ["route"], buckets=buckets, registry=registry)
    child = histogram.labels("r")
    observe = Observer(child).observe if observe_with_observer else child.observe
    for amount in AMOUNTS:
        observe(amount)
    return b"\n".join(
        line for line in generate_latest(registry).splitlines() if b"_created" not in line
    )


@pytest.mark.parametrize("buckets", [OPERATION_BUCKETS, (0.0005, 0.001, 0.0025, 0.005, 30), (1.0,)])
def test_the_observer_exposes_what_observe_does(buckets):
    assert exposition(True, buckets) == exposition(False, buckets)


def test_the_gateways_histograms_can_be_observed_so():
    metrics = Metrics()
    for histogram in (metrics.request_seconds, metrics.upstream_seconds, metrics.gateway_seconds):
        Observer(histogram.labels("r")).observe(0.002)
    Observer(metrics.operation_seconds.labels("r", "tools/call", "", "", "")).observe(0.002)
    text = generate_latest(metrics.registry).decode()
    assert 'mcp_edge_request_seconds_bucket{le="0.0025",route="r"} 1.0' in text
    assert 'mcp_server_operation_duration_seconds_count{error_type="",gen_ai_tool_name=""' in text
