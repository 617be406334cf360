"""A member that stays missing is told in the log once a minute, not once per list."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.core.federation.parts import MissingMember
from mcp_edge.upstream.federation.report import MISSING_LOG_SECONDS, FederationMetrics, Reporter


def test_a_member_missing_from_every_list_is_told_once_a_minute_with_its_count(
    caplog: pytest.LogCaptureFixture,
):
    caplog.set_level(logging.WARNING, logger="mcp_edge")
    now = [1000.0]
    registry = CollectorRegistry()
    reporter = Reporter("r", FederationMetrics(registry), clock=lambda: now[0])
    down = MissingMember("docs", "unavailable")
    slow = MissingMember("docs", "timeout")

    def told() -> list[dict]:
        lines = [r for r in caplog.records if r.getMessage() == "federation member missing"]
        return [r.fields for r in lines]  # type: ignore[attr-defined]

    for _ in range(50):
        reporter.missing("tools/list", [down])
        now[0] += 0.5
    assert [(f["member"], f["reason"], f["times"]) for f in told()] == [("docs", "unavailable", 1)]
    reporter.missing("prompts/list", [slow])  # another reason is told on its own
    assert len(told()) == 2
    now[0] += MISSING_LOG_SECONDS
    reporter.missing("tools/list", [down])
    assert told()[-1]["times"] == 50  # the 49 untold fan-outs and this one
    # The metric counts every fan-out, told or not.
    counted = registry.get_sample_value(
        "mcp_edge_federation_missing_total",
        {"route": "r", "member": "docs", "reason": "unavailable"},
    )
    assert counted == 51
