"""Run the official MCP conformance harness against a server URL and read its verdicts.

The harness (`@modelcontextprotocol/conformance`, 0.2.0-alpha line, Node 22) is installed by
`scripts/install-conformance.sh` into `.cache/conformance/`. With `-o DIR` it writes one
`server-<scenario>-<timestamp>/checks.json` per scenario; that file, not the console
output, is what verdicts are computed from.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.processes import REPO_ROOT, Completed, run_bounded

HARNESS_ENV = "MCP_CONFORMANCE_CLI"
DEFAULT_HARNESS = REPO_ROOT / ".cache" / "conformance" / "bin" / "conformance"
INSTALL_HINT = (
    "run scripts/install-conformance.sh (or point MCP_CONFORMANCE_CLI at a conformance CLI)"
)

REVISION = "2026-07-28"

MRTR_SCENARIOS: tuple[str, ...] = (
    "input-required-result-basic-elicitation",
    "input-required-result-basic-sampling",
    "input-required-result-basic-list-roots",
    "input-required-result-request-state",
    "input-required-result-multiple-input-requests",
    "input-required-result-multi-round",
    "input-required-result-missing-input-response",
    "input-required-result-non-tool-request",
    "input-required-result-result-type",
    "input-required-result-unsupported-methods",
    "input-required-result-tampered-state",
    "input-required-result-capability-check",
    "input-required-result-ignore-extra-params",
    "input-required-result-validate-input",
)
HEADER_SCENARIOS: tuple[str, ...] = (
    "http-header-validation",
    "http-custom-header-server-validation",
)
STATELESS_SCENARIO = "server-stateless"
DNS_REBINDING_SCENARIO = "dns-rebinding-protection"

_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:-\d+)?Z$")
# Lines like "  ✗ tasks-lifecycle (extension)" in the "Not scored for <rev>" block.
_NOT_SCORED = re.compile(r"^\s+[✓✗]\s+(?P<scenario>\S+)\s+\((?P<why>[^)]+)\)\s*$")


def find_harness() -> Path | None:
    """The conformance CLI from $MCP_CONFORMANCE_CLI or the default install, if present."""
    configured = os.environ.get(HARNESS_ENV)
    candidate = Path(configured) if configured else DEFAULT_HARNESS
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


@dataclass(frozen=True)
class Check:
    id: str
    status: str  # SUCCESS | FAILURE | WARNING | INFO | SKIPPED
    error_message: str | None
    details: object


@dataclass(frozen=True)
class Scenario:
    name: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """The harness's own rule: a scenario fails when any of its checks is a FAILURE."""
        return all(check.status != "FAILURE" for check in self.checks)

    @property
    def statuses(self) -> dict[str, str]:
        """check id -> status; repeated ids (one per probe) are numbered in order."""
        seen: dict[str, int] = {}
        out: dict[str, str] = {}
        for check in self.checks:
            n = seen.get(check.id, 0)
            seen[check.id] = n + 1
            out[check.id if n == 0 else f"{check.id}#{n + 1}"] = check.status
        return out

    def failures(self) -> list[Check]:
        return [check for check in self.checks if check.status == "FAILURE"]


@dataclass
class SuiteRun:
    """The outcome of one harness invocation."""

    label: str
    url: str
    out_dir: Path
    process: Completed
    scenarios: dict[str, Scenario] = field(default_factory=dict)
    not_scored: set[str] = field(default_factory=set)

    @property
    def passing(self) -> set[str]:
        return {name for name, scenario in self.scenarios.items() if scenario.passed}

    @property
    def failing(self) -> set[str]:
        return set(self.scenarios) - self.passing

    @property
    def required(self) -> set[str]:
        return set(self.scenarios) - self.not_scored

    def verdict(self, name: str) -> str:
        scenario = self.scenarios.get(name)
        if scenario is None:
            return "MISSING"
        return "PASS" if scenario.passed else "FAIL"

    def summary(self) -> str:
        required = self.required
        text = (
            f"{self.label}: {len(self.passing & required)}/{len(required)} required scenarios pass, "
            f"{len(self.passing)}/{len(self.scenarios)} overall (rc={self.process.returncode}"
            f"{', timed out' if self.process.timed_out else ''}; results in {self.out_dir})"
        )
        if not self.scenarios:  # the harness itself failed: show why
            text += "\n" + self.process.output[-1500:]
        return text

    def explain(self, names: Iterable[str] | None = None, max_message: int = 300) -> str:
        """One line per failing check (or missing scenario), for assertion messages."""
        lines: list[str] = []
        for name in sorted(names if names is not None else self.scenarios):
            scenario = self.scenarios.get(name)
            if scenario is None:
                lines.append(f"  {name}: no checks.json (scenario did not run or did not finish)")
                continue
            for check in scenario.failures():
                message = (check.error_message or "").replace("\n", " ")[:max_message]
                lines.append(f"  {name} :: {check.id}: {message}")
        return "\n".join(lines) or "  (no failing checks)"


def parse_results(out_dir: Path) -> dict[str, Scenario]:
    """Read every `server-<scenario>-<timestamp>/checks.json` below `out_dir`.

    If a scenario ran more than once into the same directory, the latest run wins.
    """
    found: dict[str, tuple[str, Scenario]] = {}
    if not out_dir.is_dir():
        return {}
    for checks_file in out_dir.glob("*/checks.json"):
        match = _RESULT_DIR.match(checks_file.parent.name)
        if match is None:
            continue
        try:
            raw = json.loads(checks_file.read_text())
        except (OSError, ValueError):
            continue
        checks = tuple(
            Check(
                id=str(item.get("id")),
                status=str(item.get("status")),
                error_message=item.get("errorMessage"),
                details=item.get("details"),
            )
            for item in raw
            if isinstance(item, dict)
        )
        name = match["scenario"]
        stamp = checks_file.parent.name
        if name not in found or stamp > found[name][0]:
            found[name] = (stamp, Scenario(name, checks))
    return {name: scenario for name, (_, scenario) in found.items()}


def run_server_suite(
    cli: Path,
    url: str,
    out_dir: Path,
    *,
    label: str,
    requirements: str | None = REVISION,
    scenario: str | None = None,
    extra_args: Iterable[str] = (),
    scenario_timeout_ms: int = 15_000,
    timeout: float = 240.0,
) -> SuiteRun:
    """Run `conformance server` once (a requirement set or one scenario) and parse the results.

    A run that overruns `timeout` is killed; whatever scenarios finished are still reported.
    """
    argv = [str(cli), "server", "--url", url, "-o", str(out_dir)]
    if "--timeout" in _server_options(cli):  # alpha.11 has no per-scenario timeout
        argv += ["--timeout", str(scenario_timeout_ms)]
    if scenario is not None:
        argv += ["--scenario", scenario]
    elif requirements is not None:
        argv += ["--requirements", requirements]
    argv += list(extra_args)
    out_dir.mkdir(parents=True, exist_ok=True)
    process = run_bounded(argv, timeout=timeout)
    (out_dir / "console.txt").write_text(process.output)
    not_scored = {
        m["scenario"] for line in process.output.splitlines() if (m := _NOT_SCORED.match(line))
    }
    return SuiteRun(
        label=label,
        url=url,
        out_dir=out_dir,
        process=process,
        scenarios=parse_results(out_dir),
        not_scored=not_scored,
    )


@functools.cache
def _server_options(cli: Path) -> str:
    """The `conformance server --help` text, to feature-test options across versions."""
    return run_bounded([str(cli), "server", "--help"], timeout=60).output


def check_differences(expected: SuiteRun, actual: SuiteRun, names: Iterable[str]) -> list[str]:
    """Per-check status differences between two runs, for the given scenarios."""
    diffs: list[str] = []
    for name in sorted(names):
        want = expected.scenarios.get(name)
        got = actual.scenarios.get(name)
        if want is None or got is None:
            if want is not got:
                diffs.append(
                    f"  {name}: {expected.label}={expected.verdict(name)} {actual.label}={actual.verdict(name)}"
                )
            continue
        want_statuses, got_statuses = want.statuses, got.statuses
        for check_id in sorted(want_statuses.keys() | got_statuses.keys()):
            a, b = want_statuses.get(check_id, "absent"), got_statuses.get(check_id, "absent")
            if a != b:
                message = next(
                    (c.error_message for c in got.checks if c.id == check_id.split("#")[0]), None
                )
                suffix = f": {message[:300]}" if message else ""
                diffs.append(
                    f"  {name} :: {check_id}: {expected.label}={a} {actual.label}={b}{suffix}"
                )
    return diffs
