"""The official conformance suite against the TypeScript SDK server (`tests/servers/ts_server.mjs`),
directly: the baseline that legs through the gateway (a federation with this server as a member)
are compared with.

The server has its own small surface, not the conformance fixtures' tools, prompts and
resources, so every scenario that calls one of those fails here: what is pinned is the set of
scenarios that pass, and, in `server-stateless`, which checks fail (the four that need the
fixtures' diagnostic tools). Everything the SDK does itself passes: discover, the `_meta`
envelope, the header and version rules, the removed methods, `subscriptions/listen`, DNS
rebinding (the SDK's localhost guards), the caching fields, MRTR input validation.
"""

from __future__ import annotations

import os
import shutil
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import require
from tests.support.conformance import (
    INSTALL_HINT,
    STATELESS_SCENARIO,
    SuiteRun,
    find_harness,
    run_server_suite,
)
from tests.support.processes import REPO_ROOT, run_bounded
from tests.support.ts_server import start_ts_server

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(300)]

#: The 2026-07-28 requirement set's scenarios that pass against the server directly (harness
#: 0.2.0-alpha.12, @modelcontextprotocol/server 2.4.0).
EXPECTED_PASSING = frozenset(
    {
        "tools-list",
        "resources-list",
        "prompts-list",
        "server-sse-multiple-streams",
        "sep-2164-resource-not-found",
        "dns-rebinding-protection",
        "caching",
        "input-required-result-missing-input-response",
        "input-required-result-unsupported-methods",
        "input-required-result-ignore-extra-params",
        "input-required-result-validate-input",
        "tasks-status-notifications",
        "http-header-validation",
    }
)
#: The checks of server-stateless that fail: each needs a diagnostic tool of the fixtures.
STATELESS_FAILING_CHECKS = frozenset(
    {
        "sep-2575-server-rejects-undeclared-capability",  # test_missing_capability
        "sep-2575-missing-capability-http-400",  # test_missing_capability
        "sep-2575-http-server-no-independent-requests-on-stream",  # test_streaming_elicitation
        "sep-2575-server-no-log-without-loglevel",  # test_logging_tool
    }
)
LISTEN_CHECKS = (
    "sep-2575-server-sends-subscription-ack",
    "sep-2575-server-tags-subscription-id",
    "sep-2575-server-honors-notification-filter",
)


@pytest.fixture(scope="module")
def harness() -> Path:
    cli = find_harness()
    if cli is None and shutil.which("npm"):
        run_bounded(["bash", str(REPO_ROOT / "scripts" / "install-conformance.sh")], timeout=900)
        cli = find_harness()
    require(cli is not None, f"MCP conformance harness not installed: {INSTALL_HINT}")
    assert cli is not None
    return cli


@pytest.fixture(scope="module")
def direct(harness: Path, tmp_path_factory: pytest.TempPathFactory) -> SuiteRun:
    keep = os.environ.get("MCP_CONFORMANCE_RESULTS")
    work = Path(keep) / "ts-server" if keep else tmp_path_factory.mktemp("ts-conformance")
    work.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        server = start_ts_server(stack, work, instance="conformance")
        return run_server_suite(harness, server.url, work / "results", label="ts-server-direct")


def test_the_passing_scenarios_are_the_baseline(direct: SuiteRun) -> None:
    assert direct.scenarios, direct.summary()
    gained, lost = direct.passing - EXPECTED_PASSING, EXPECTED_PASSING - direct.passing
    assert not gained and not lost, (
        f"passing now, not in the baseline: {sorted(gained)}\n"
        f"in the baseline, not passing: {sorted(lost)}\n"
        f"{direct.explain(lost)}\n{direct.summary()}"
    )


def test_server_stateless_fails_only_for_want_of_the_fixtures_tools(direct: SuiteRun) -> None:
    scenario = direct.scenarios.get(STATELESS_SCENARIO)
    assert scenario is not None, direct.summary()
    failing = {check.id for check in scenario.failures()}
    assert failing == STATELESS_FAILING_CHECKS, direct.explain([STATELESS_SCENARIO])
    statuses = scenario.statuses
    assert {check: statuses.get(check) for check in LISTEN_CHECKS} == dict.fromkeys(
        LISTEN_CHECKS, "SUCCESS"
    )
