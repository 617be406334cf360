"""mcp_edge.observability.observer: what the request path writes is what the library's own calls
write, in one process (without the lock) and across worker processes (through the library)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.multiprocess import MultiProcessCollector

from mcp_edge.observability.metrics import Metrics
from mcp_edge.observability.observer import Count, Observer
from mcp_edge.observability.operations import OPERATION_BUCKETS

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


def exposition(ours: bool, buckets: tuple[float, ...], tag: str = "") -> bytes:
    """A histogram, a counter and a gauge written with the request path's writers (``ours``) or
    with the library's own calls, as a scrape shows them."""
    registry = CollectorRegistry()
    histogram = Histogram(f"h{tag}_seconds", "h", ["route"], buckets=buckets, registry=registry)
    counter = Counter(f"c{tag}", "c", ["route"], registry=registry)
    gauge = Gauge(f"g{tag}", "g", ["route"], registry=registry, multiprocess_mode="livesum")
    child = histogram.labels("r")
    observe = Observer(child).observe if ours else child.observe
    for amount in AMOUNTS:
        observe(amount)
    count = Count(counter.labels("r")) if ours else counter.labels("r")
    level = Count(gauge.labels("r")) if ours else gauge.labels("r")
    for _ in range(5):
        count.inc()
        level.inc()
    level.dec()
    level.dec()
    return scraped(registry)


def scraped(registry: CollectorRegistry) -> bytes:
    if values.ValueClass is not values.MutexValue:  # the worker processes' files, merged
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
    return b"\n".join(
        line for line in generate_latest(registry).splitlines() if b"_created" not in line
    )


@pytest.mark.parametrize("buckets", [OPERATION_BUCKETS, (0.0005, 0.001, 0.0025, 0.005, 30), (1.0,)])
def test_the_request_paths_writers_expose_what_the_librarys_do(buckets):
    assert exposition(True, buckets) == exposition(False, buckets)


def test_in_one_process_they_skip_the_lock():
    """The values are added to directly: the library's lock is never taken."""

    class Watched:
        def __init__(self) -> None:
            self.taken = 0

        def __enter__(self) -> None:
            self.taken += 1

        def __exit__(self, *exc: object) -> None:
            pass

    registry = CollectorRegistry()
    histogram = Histogram("h_seconds", "h", ["route"], buckets=(1.0,), registry=registry)
    counter = Counter("c", "c", ["route"], registry=registry)
    watched = Watched()
    child, counted = histogram.labels("r"), counter.labels("r")
    for value in (child._sum, *child._buckets, counted._value):
        value._lock = watched
    Observer(child).observe(0.5)
    Count(counted).inc()
    assert watched.taken == 0
    child.observe(0.5)  # the library's own call takes it
    assert watched.taken > 0
    assert registry.get_sample_value("h_seconds_count", {"route": "r"}) == 2.0
    assert registry.get_sample_value("c_total", {"route": "r"}) == 1.0


def test_across_worker_processes_they_write_through_the_library(tmp_path, monkeypatch):
    """With PROMETHEUS_MULTIPROC_DIR (--workers N) the values are the workers' shared files: the
    request path writes them through the library, and the merged scrape shows every write."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setattr(values, "ValueClass", values.MultiProcessValue())
    try:
        ours = exposition(True, (0.001, 1.0), tag="_ours")
        theirs = exposition(False, (0.001, 1.0), tag="_theirs")
    finally:
        values.close_all_multiprocess_files()
    assert samples(ours, b"_ours") and samples(ours, b"_ours") == samples(theirs, b"_theirs")
    assert b'c_ours_total{route="r"} 5.0' in ours
    assert b'g_ours{route="r"} 3.0' in ours


def samples(text: bytes, tag: bytes) -> list[bytes]:
    """The sample lines of the metrics named with ``tag``, the tag taken out of their names."""
    return [
        line.replace(tag, b"")
        for line in text.splitlines()
        if tag in line and not line.startswith(b"#")
    ]


def test_the_gateways_histograms_can_be_observed_so():
    metrics = Metrics()
    for histogram in (metrics.request_seconds, metrics.upstream_seconds, metrics.gateway_seconds):
        Observer(histogram.labels("r")).observe(0.002)
    Observer(metrics.operation_seconds.labels("r", "tools/call", "", "", "")).observe(0.002)
    text = generate_latest(metrics.registry).decode()
    assert 'mcp_edge_request_seconds_bucket{le="0.0025",route="r"} 1.0' in text
    assert 'mcp_server_operation_duration_seconds_count{error_type="",gen_ai_tool_name=""' in text
