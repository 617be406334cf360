"""The official suite's 2026-07-28 scenarios through the gateway, in front of a legacy server.

The upstream is tests/servers/legacy_everything.py (FastMCP, `mcp==1.30.0`), which asks every
question the 2025 way: a live `elicitation/create`, `sampling/createMessage` or `roots/list`
during the call. Directly it fails the MRTR scenarios (see test_legacy_fixture.py); through
`mcp-edge serve` with the route's era detected as legacy, the bridge turns those questions into
InputRequiredResults and continues the call on the retry:

* with the fixture's event store, by **resume** (answer posted into the session, stream resumed
  with Last-Event-ID);
* without it, by **park** (the call held open on the replica).

One harness run per leg (`--suite draft --spec-version 2026-07-28`: the scenarios that exist only
in 2026-07-28). What cannot pass, and why, is pinned here so that any change shows:

* `input-required-result-basic-elicitation` requires the inputRequests key `user_name`, a name
  the server chose in the 2026 fixture; a legacy request carries a JSON-RPC id, not a key, so the
  bridge names it `elicitation-1`. Only that check fails (the retry check is then not run).
* `http-custom-header-server-validation` needs a tool whose schema carries `x-mcp-header`, a
  2026-07-28 annotation no 2025-era server has: the harness reports it as not testable.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from mcp_edge.core.seal import generate_key
from tests.conftest import require, start_gateway
from tests.scale.cluster import metric, scrape
from tests.support.conformance import (
    INSTALL_HINT,
    MRTR_SCENARIOS,
    SuiteRun,
    find_harness,
    run_server_suite,
)
from tests.support.legacy_conformance import serving_legacy, uv_path

pytestmark = [pytest.mark.conformance, pytest.mark.integration, pytest.mark.timeout(600)]

KEY_BOUND = "input-required-result-basic-elicitation"
NOT_TESTABLE = "http-custom-header-server-validation"
ALSO_PASSING = (
    "server-stateless",
    "caching",
    "http-header-validation",
    "sep-2164-resource-not-found",
)


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("MCP_CONFORMANCE_RESULTS")
    if keep:
        path = Path(keep) / f"legacy-bridge-{time.strftime('%Y%m%dT%H%M%S')}"
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("legacy-bridge-conformance")


def _leg(work_dir: Path, name: str, *, event_store: bool) -> Iterator[tuple[SuiteRun, dict]]:
    cli = find_harness()
    require(cli is not None, f"MCP conformance harness not installed: {INSTALL_HINT}")
    require(uv_path() is not None, "uv is needed to run the mcp 1.30 fixture in isolation")
    assert cli is not None
    with ExitStack() as stack:
        legacy = stack.enter_context(serving_legacy(work_dir / name, event_store=event_store))
        gateway = start_gateway(stack, work_dir / name, upstream=legacy.url, keys=generate_key())
        run = run_server_suite(
            cli,
            gateway.url,
            work_dir / name / "results",
            label=f"bridge-{name}",
            requirements=None,
            extra_args=("--suite", "draft", "--spec-version", "2026-07-28"),
            timeout=300,
        )
        yield run, scrape(gateway.base)


@pytest.fixture(scope="module")
def resume_leg(work_dir: Path) -> Iterator[tuple[SuiteRun, dict]]:
    yield from _leg(work_dir, "resume", event_store=True)


@pytest.fixture(scope="module")
def park_leg(work_dir: Path) -> Iterator[tuple[SuiteRun, dict]]:
    yield from _leg(work_dir, "park", event_store=False)


@pytest.fixture(params=["resume", "park"])
def leg(request: pytest.FixtureRequest) -> tuple[str, SuiteRun, dict]:
    run, metrics = request.getfixturevalue(f"{request.param}_leg")
    return request.param, run, metrics


@pytest.mark.parametrize("name", [s for s in MRTR_SCENARIOS if s != KEY_BOUND])
def test_mrtr_scenario_passes_through_the_bridge(leg, name):
    _, run, _ = leg
    scenario = run.scenarios.get(name)
    assert scenario is not None, run.summary()
    assert scenario.passed, run.explain([name])


def test_the_key_bound_scenario_fails_only_on_the_key(leg):
    _, run, _ = leg
    scenario = run.scenarios[KEY_BOUND]
    failures = [c for c in scenario.checks if c.status == "FAILURE"]
    assert [c.id for c in failures] == ["sep-2322-elicitation-incomplete"], run.explain([KEY_BOUND])
    assert 'missing expected key "user_name"' in (failures[0].error_message or "")
    details = failures[0].details
    assert isinstance(details, dict)
    requests = details["result"]["inputRequests"]
    assert (
        list(requests) == ["elicitation-1"]
        and requests["elicitation-1"]["method"] == "elicitation/create"
    )


@pytest.mark.parametrize("name", ALSO_PASSING)
def test_other_2026_scenarios_pass_through_the_bridge(leg, name):
    _, run, _ = leg
    assert run.scenarios[name].passed, run.explain([name])


def test_custom_header_scenario_is_not_testable_on_a_legacy_server(leg):
    _, run, _ = leg
    failures = [c for c in run.scenarios[NOT_TESTABLE].checks if c.status == "FAILURE"]
    assert failures and all((c.error_message or "").startswith("Not testable") for c in failures)


def test_each_leg_used_its_strategy(leg):
    strategy, _, metrics = leg
    asked = metric(metrics, "mcp_edge_bridge_flow_events_total", strategy=strategy, event="asked")
    continued = metric(
        metrics, "mcp_edge_bridge_flow_events_total", strategy=strategy, event="continued"
    )
    assert asked >= 10 and continued >= 5, (asked, continued)
    others = {"resume", "park", "replay"} - {strategy}
    assert all(
        metric(metrics, "mcp_edge_bridge_flow_events_total", strategy=s) == 0 for s in others
    )
