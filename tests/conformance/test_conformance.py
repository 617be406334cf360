"""The official MCP conformance suite, run directly against real SDK servers and through the gateway.

Each leg runs the frozen `--requirements 2026-07-28` set once (a few seconds): the 37
required server scenarios plus the unscored ones (tasks extension, pending header and
JSON-Schema scenarios). Verdicts come from the harness's `checks.json` files.

Legs:
- `everything.py` (MCPServer, sealed state) directly, behind `mcp-edge serve`, and wrapped
  in its own process by `mcp_edge.Edge` (`tests/servers/in_process.py everything`);
- `plaintext_state.py` (low-level Server, plaintext state) directly, where the
  tampered-state scenario must fail, and behind the gateway, where every MRTR scenario
  must pass because the gateway seals state at the edge; wrapped in-process, the
  tampered-state scenario alone (the Edge refuses the tampered state before the app sees it);
- `everything.py` as the only member of a route with `members:` (unprefixed), which must give
  what the single-upstream route gives, check by check; and beside the TypeScript SDK server
  (prefixed `ts`) in a route of two members, where every scenario the everything server's
  fixtures serve must pass the same (one gateway serves both routes).

Needs the harness from scripts/install-conformance.sh (or $MCP_CONFORMANCE_CLI); without
it these tests skip, or fail when REQUIRE_ALL=1. Set $MCP_CONFORMANCE_RESULTS to keep the
harness output, process logs and a summary.txt.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.conformance import (
    DNS_REBINDING_SCENARIO,
    HEADER_SCENARIOS,
    INSTALL_HINT,
    MRTR_SCENARIOS,
    STATELESS_SCENARIO,
    SuiteRun,
    check_differences,
    find_harness,
    run_server_suite,
)
from tests.support.processes import (
    REPO_ROOT,
    free_port,
    python_script,
    run_bounded,
    serving,
    venv_command,
    write_private,
)
from tests.support.ts_server import start_ts_server

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(900)]

HOST = "127.0.0.1"
TAMPERED_SCENARIO = "input-required-result-tampered-state"


@dataclass(frozen=True)
class Upstream:
    url: str
    request_log: Path | None = None  # plaintext_state.py's JSON-lines log


@dataclass(frozen=True)
class Leg:
    """One suite run, plus the part of the upstream's request log it produced."""

    run: SuiteRun
    upstream_requests: tuple[dict[str, Any], ...] = ()


@pytest.fixture(scope="module")
def harness() -> Path:
    cli = find_harness()
    if cli is None and shutil.which("npm"):
        # First run on this machine: install the harness (Node 22 + the npm package) into .cache/.
        run_bounded(["bash", str(REPO_ROOT / "scripts" / "install-conformance.sh")], timeout=900)
        cli = find_harness()
    if cli is None:
        message = f"MCP conformance harness not installed: {INSTALL_HINT}"
        if os.environ.get("REQUIRE_ALL") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return cli


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where logs and harness results go: $MCP_CONFORMANCE_RESULTS/<time> to keep them."""
    keep = os.environ.get("MCP_CONFORMANCE_RESULTS")
    if keep:
        path = Path(keep) / time.strftime("%Y%m%dT%H%M%S")
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("conformance")


@pytest.fixture(scope="module")
def gateway_key() -> str:
    return base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()


@contextmanager
def _upstream(work_dir: Path, script: str, *extra: str, name: str = "") -> Iterator[str]:
    port = free_port(HOST)
    argv = python_script(script, "--port", str(port), "--host", HOST, *extra)
    log_path = work_dir / f"{name or script}.log"
    with serving(script, argv, port=port, log_path=log_path):
        yield f"http://{HOST}:{port}/mcp"


@contextmanager
def _gateway(leg_dir: Path, upstream_url: str, gateway_key: str) -> Iterator[str]:
    port = free_port(HOST)
    argv = [*venv_command("mcp-edge"), "serve", "--upstream", upstream_url]
    argv += ["--host", HOST, "--port", str(port), "--anonymous"]
    env = {"MCP_EDGE_STATE_KEYS": gateway_key}
    with serving("mcp-edge", argv, port=port, log_path=leg_dir / "mcp-edge.log", env=env):
        yield f"http://{HOST}:{port}/mcp"


@contextmanager
def _in_process(leg_dir: Path, shape: str, gateway_key: str, *extra: str) -> Iterator[str]:
    """A fixture server wrapped by ``mcp_edge.Edge`` in its own uvicorn process."""
    port = free_port(HOST)
    argv = python_script("in_process.py", shape, "--port", str(port), "--host", HOST, *extra)
    env = {"MCP_EDGE_STATE_KEYS": gateway_key}
    log = leg_dir / "in-process.log"
    # (it imports the SDK, the fixture and the gateway: slow to start on a loaded machine)
    with serving(shape, argv, port=port, log_path=log, env=env, startup_timeout=120):
        yield f"http://{HOST}:{port}/mcp"


@pytest.fixture(scope="module")
def everything(work_dir: Path) -> Iterator[Upstream]:
    with _upstream(work_dir, "everything.py") as url:
        yield Upstream(url)


@contextmanager
def _plaintext(work_dir: Path, leg: str) -> Iterator[Upstream]:
    """A plaintext-state upstream of one leg's own, with its own request log: the leg reads all
    of it, and nothing in it came from another leg."""
    log = work_dir / f"{leg}-upstream-requests.jsonl"
    script = "plaintext_state.py"
    with _upstream(work_dir, script, "--log", str(log), name=f"{leg}-upstream") as url:
        yield Upstream(url, log)


def _leg(
    harness: Path, work_dir: Path, name: str, upstream: Upstream, gateway_key: str | None
) -> Leg:
    """Run the suite against the upstream, through a fresh gateway if a key is given."""
    leg_dir = work_dir / name
    leg_dir.mkdir()
    with ExitStack() as stack:
        url = upstream.url
        if gateway_key is not None:
            url = stack.enter_context(_gateway(leg_dir, url, gateway_key))
        run = run_server_suite(harness, url, leg_dir / "results", label=name)
    with open(work_dir / "summary.txt", "a") as summary:
        summary.write(run.summary() + "\n")
    requests: tuple[dict[str, Any], ...] = ()
    if upstream.request_log:
        with open(upstream.request_log, encoding="utf-8") as log:
            requests = tuple(json.loads(line) for line in log if line.strip())
    return Leg(run, requests)


@pytest.fixture(scope="module")
def direct(harness: Path, work_dir: Path, everything: Upstream) -> SuiteRun:
    return _leg(harness, work_dir, "direct", everything, None).run


@pytest.fixture(scope="module")
def via_gateway(harness: Path, work_dir: Path, everything: Upstream, gateway_key: str) -> SuiteRun:
    return _leg(harness, work_dir, "gateway", everything, gateway_key).run


@pytest.fixture(scope="module")
def plaintext_direct(harness: Path, work_dir: Path) -> SuiteRun:
    with _plaintext(work_dir, "plaintext-direct") as upstream:
        return _leg(harness, work_dir, "plaintext-direct", upstream, None).run


@pytest.fixture(scope="module")
def plaintext_via_gateway(harness: Path, work_dir: Path, gateway_key: str) -> Leg:
    with _plaintext(work_dir, "plaintext-gateway") as upstream:
        return _leg(harness, work_dir, "plaintext-gateway", upstream, gateway_key)


@pytest.fixture(scope="module")
def in_process(harness: Path, work_dir: Path, gateway_key: str) -> SuiteRun:
    leg_dir = work_dir / "in-process"
    leg_dir.mkdir()
    with _in_process(leg_dir, "everything", gateway_key) as url:
        run = run_server_suite(harness, url, leg_dir / "results", label="in-process")
    with open(work_dir / "summary.txt", "a") as summary:
        summary.write(run.summary() + "\n")
    return run


@pytest.fixture(scope="module")
def plaintext_in_process(harness: Path, work_dir: Path, gateway_key: str) -> Leg:
    """The tampered-state scenario against plaintext_state.py wrapped in-process; its request
    log sits between the Edge and the app."""
    leg_dir = work_dir / "plaintext-in-process"
    leg_dir.mkdir()
    log = leg_dir / "app-requests.jsonl"
    with _in_process(leg_dir, "plaintext", gateway_key, "--log", str(log)) as url:
        run = run_server_suite(
            harness,
            url,
            leg_dir / "results",
            label="plaintext-in-process",
            scenario=TAMPERED_SCENARIO,
        )
    with open(log, encoding="utf-8") as lines:
        requests = tuple(json.loads(line) for line in lines if line.strip())
    return Leg(run, requests)


def _same_as_direct(direct: SuiteRun, other: SuiteRun, names: tuple[str, ...]) -> None:
    diffs = check_differences(direct, other, names)
    assert not diffs, (
        f"{other.label} differs from {direct.label} check by check:\n"
        + "\n".join(diffs)
        + f"\n{direct.summary()}\n{other.summary()}"
    )


# ---- the fixture server itself ---------------------------------------------------------


def test_everything_fixture_passes_the_required_set_directly(direct: SuiteRun) -> None:
    required_failing = direct.failing & direct.required
    assert direct.process.returncode == 0 and not required_failing, (
        f"{direct.summary()}\n{direct.explain(required_failing)}\n{direct.process.output[-2000:]}"
    )
    expected = {*MRTR_SCENARIOS, STATELESS_SCENARIO, DNS_REBINDING_SCENARIO, *HEADER_SCENARIOS}
    assert expected <= direct.passing, direct.explain(expected - direct.passing)


def test_plaintext_fixture_fails_only_tampered_state_directly(plaintext_direct: SuiteRun) -> None:
    verdicts = {name: plaintext_direct.verdict(name) for name in MRTR_SCENARIOS}
    expected = {name: "FAIL" if name == TAMPERED_SCENARIO else "PASS" for name in MRTR_SCENARIOS}
    assert verdicts == expected, (
        f"{plaintext_direct.summary()}\n{plaintext_direct.explain(MRTR_SCENARIOS)}"
    )


# ---- through the gateway ---------------------------------------------------------------


def test_mrtr_scenarios_through_gateway_match_direct(
    direct: SuiteRun, via_gateway: SuiteRun
) -> None:
    _same_as_direct(direct, via_gateway, MRTR_SCENARIOS)


def test_stateless_and_header_scenarios_through_gateway_match_direct(
    direct: SuiteRun, via_gateway: SuiteRun
) -> None:
    _same_as_direct(direct, via_gateway, (STATELESS_SCENARIO, *HEADER_SCENARIOS))


def test_dns_rebinding_through_gateway_matches_direct(
    direct: SuiteRun, via_gateway: SuiteRun
) -> None:
    # The harness sends Host and Origin set to evil.example.com (must get a 4xx), then to
    # the URL's own host:port (must get a 2xx). A gateway that rewrites Host for its
    # upstream has to judge the client's Host/Origin itself.
    _same_as_direct(direct, via_gateway, (DNS_REBINDING_SCENARIO,))


def test_gateway_passes_every_scenario_direct_passes(
    direct: SuiteRun, via_gateway: SuiteRun
) -> None:
    lost = direct.passing - via_gateway.passing
    assert not lost, (
        f"scenarios passing directly but not through the gateway: {sorted(lost)}\n"
        f"{via_gateway.explain(lost)}\n{direct.summary()}\n{via_gateway.summary()}"
    )


def test_gateway_passes_the_required_set(via_gateway: SuiteRun) -> None:
    required_failing = via_gateway.failing & via_gateway.required
    missing = {"server-stateless", *MRTR_SCENARIOS} - set(via_gateway.scenarios)
    assert via_gateway.process.returncode == 0 and not required_failing and not missing, (
        f"{via_gateway.summary()}\n{via_gateway.explain(required_failing | missing)}"
    )


def test_gateway_seals_state_for_a_plaintext_upstream(plaintext_via_gateway: Leg) -> None:
    run = plaintext_via_gateway.run
    failing = [name for name in MRTR_SCENARIOS if run.verdict(name) != "PASS"]
    assert not failing, f"{run.summary()}\n{run.explain(failing)}"


def test_upstream_only_ever_gets_back_the_state_it_issued(plaintext_via_gateway: Leg) -> None:
    """Behind the gateway, a retry reaches the upstream with the upstream's own state or none.

    A tampered, forged or gateway-sealed string never reaches it.
    """
    entries = plaintext_via_gateway.upstream_requests
    issued: set[str] = set()
    strangers: list[dict[str, Any]] = []
    returned = 0
    for entry in entries:
        if entry["event"] == "response" and isinstance(entry.get("issued_request_state"), str):
            issued.add(entry["issued_request_state"])
        elif entry["event"] == "request" and entry.get("has_request_state"):
            if entry.get("request_state") in issued:
                returned += 1
            else:
                strangers.append(entry)
    assert entries, "the upstream logged no requests at all"
    assert returned, "no retry reached the upstream with the state it issued"
    assert not strangers, "requestState values the upstream never issued reached it:\n" + "\n".join(
        f"  {e.get('method')} {e.get('name') or e.get('uri')}: {e.get('request_state')!r}"
        for e in strangers
    )


# ---- wrapped in-process (mcp_edge.Edge) ---------------------------------------------------


def test_in_process_passes_every_scenario_direct_passes(
    direct: SuiteRun, in_process: SuiteRun
) -> None:
    lost = direct.passing - in_process.passing
    required_failing = in_process.failing & in_process.required
    assert not lost and not required_failing, (
        f"scenarios passing directly but not wrapped in-process: {sorted(lost)}; required and "
        f"failing: {sorted(required_failing)}\n{in_process.explain(lost | required_failing)}\n"
        f"{direct.summary()}\n{in_process.summary()}"
    )


def test_in_process_mrtr_and_header_scenarios_match_direct(
    direct: SuiteRun, in_process: SuiteRun
) -> None:
    _same_as_direct(
        direct, in_process, (*MRTR_SCENARIOS, STATELESS_SCENARIO, DNS_REBINDING_SCENARIO)
    )


def test_in_process_refuses_a_tampered_state_before_the_app(plaintext_in_process: Leg) -> None:
    """Directly, this app fails the scenario (it takes any state); wrapped, it passes, and no
    state the app did not issue ever reached it."""
    run = plaintext_in_process.run
    assert run.verdict(TAMPERED_SCENARIO) == "PASS", f"{run.summary()}\n{run.explain()}"
    entries = plaintext_in_process.upstream_requests
    issued = {
        e["issued_request_state"]
        for e in entries
        if e["event"] == "response" and isinstance(e.get("issued_request_state"), str)
    }
    presented = [
        e.get("request_state")
        for e in entries
        if e["event"] == "request" and e.get("has_request_state")
    ]
    assert issued, "the app issued no requestState at all"
    assert all(state in issued for state in presented), presented


# ---- through a route with members (federation) ---------------------------------------------


@dataclass(frozen=True)
class Federated:
    """The suite through a route whose only member is the everything server (unprefixed), and
    through a route of several members (the everything server unprefixed, beside the
    TypeScript SDK server under ``ts``)."""

    one: SuiteRun
    many: SuiteRun


@pytest.fixture(scope="module")
def federated(harness: Path, work_dir: Path, everything: Upstream, gateway_key: str) -> Federated:
    leg_dir = work_dir / "federated"
    leg_dir.mkdir()
    py = {"name": "py", "prefix": "", "upstream": everything.url, "era": "modern"}
    with ExitStack() as stack:
        ts = start_ts_server(stack, leg_dir, instance="conformance-member")
        ts_entry = {"name": "ts", "upstream": ts.url, "era": "modern"}
        routes = [
            {"name": "one", "path": "/one", "members": [py]},
            {"name": "many", "path": "/many", "members": [py, ts_entry]},
        ]
        port = free_port(HOST)
        config = write_private(leg_dir / "gateway.yaml", yaml.safe_dump({"routes": routes}))
        argv = [*venv_command("mcp-edge"), "serve", "--config", str(config)]
        argv += ["--host", HOST, "--port", str(port), "--anonymous"]
        env = {"MCP_EDGE_STATE_KEYS": gateway_key}
        stack.enter_context(
            serving("mcp-edge", argv, port=port, log_path=leg_dir / "mcp-edge.log", env=env)
        )
        runs = {
            name: run_server_suite(
                harness, f"http://{HOST}:{port}/{name}", leg_dir / name, label=f"federated-{name}"
            )
            for name in ("one", "many")
        }
    with open(work_dir / "summary.txt", "a") as summary:
        summary.writelines(run.summary() + "\n" for run in runs.values())
    return Federated(**runs)


def test_a_federation_of_one_matches_the_single_upstream_route(
    via_gateway: SuiteRun, federated: Federated
) -> None:
    assert federated.one.scenarios, federated.one.summary()
    assert federated.one.passing == via_gateway.passing, (
        f"{federated.one.explain(via_gateway.passing - federated.one.passing)}\n"
        f"{via_gateway.summary()}\n{federated.one.summary()}"
    )
    _same_as_direct(via_gateway, federated.one, tuple(via_gateway.scenarios))


def test_a_federation_of_several_passes_what_its_members_fixtures_pass(
    via_gateway: SuiteRun, federated: Federated
) -> None:
    """Every scenario whose fixtures the everything server has passes with the TypeScript
    server beside it, check by check as through the single-upstream route. (The scenarios that
    fail on both are the unscored ``tasks-*`` ones: no member has their fixture tools.)"""
    many = federated.many
    required_failing = many.failing & many.required
    assert many.process.returncode == 0 and not required_failing, (
        f"{many.summary()}\n{many.explain(required_failing)}"
    )
    lost = via_gateway.passing - many.passing
    assert not lost, f"{many.explain(lost)}\n{via_gateway.summary()}\n{many.summary()}"
    _same_as_direct(via_gateway, many, tuple(via_gateway.scenarios))
