"""Drive the official MCP TypeScript client SDK (`@modelcontextprotocol/client` 2.x) from tests.

`scripts/install-ts-client.sh` installs the SDK (exactly pinned, with the Node 22 that
`scripts/install-conformance.sh` provides) into `.cache/ts-client/` and writes a launcher that
runs `tests/clients/ts_mcp_client.mjs` under Node 22. The driver takes a JSON plan (the URL, the
capabilities to declare, the answers its elicitation / sampling / roots handlers give, the steps
to run) and prints one JSON report; see the driver's header for both formats.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from tests.support.processes import run_bounded
from tests.support.ts_install import TsInstall, installed_launcher

CLIENT = TsInstall(
    "ts-client",
    launcher="ts-mcp-client",
    program=Path("tests") / "clients" / "ts_mcp_client.mjs",
    role="driver",
    launcher_env="MCP_TS_CLIENT",
)
INSTALL_HINT = CLIENT.install_hint

REVISION = "2026-07-28"


def ts_client_launcher() -> Path | None:
    """The driver's launcher: $MCP_TS_CLIENT, else the default install, installing it on first use.

    None when it is not installed and cannot be (no npm, or the install failed).
    """
    return installed_launcher(CLIENT)


class TsClientError(AssertionError):
    """The driver did not produce a report (crashed, bad plan, overran its time limit)."""


def run_ts_client(plan: dict[str, Any], *, timeout: float = 60) -> dict[str, Any]:
    """Run one plan through the TypeScript SDK client and return its report.

    The driver's own time limit (`timeoutMs` in the plan) defaults to a few seconds less than
    `timeout`, so it reports an overrun itself; past `timeout` its process group is killed.
    The report gets the driver's stderr under "stderr". Raises TsClientError when there is no
    report.
    """
    launcher = ts_client_launcher()
    if launcher is None:
        raise TsClientError(f"TypeScript client not installed: {INSTALL_HINT}")
    plan = {"timeoutMs": int(max(1.0, timeout - 5) * 1000), **plan}
    with tempfile.TemporaryDirectory(prefix="ts-client-") as tmp:
        plan_path, stderr_path = Path(tmp) / "plan.json", Path(tmp) / "stderr.txt"
        plan_path.write_text(json.dumps(plan))
        # stdout carries only the report (run_bounded merges the streams): stderr to a file.
        argv = [
            "bash",
            "-c",
            'exec "$0" "$1" 2>"$2"',
            str(launcher),
            str(plan_path),
            str(stderr_path),
        ]
        done = run_bounded(argv, timeout=timeout)
        stderr = stderr_path.read_text(errors="replace") if stderr_path.exists() else ""
    output = f"stdout: {done.output[-2000:]}\nstderr: {stderr[-3000:]}"
    if done.timed_out or done.returncode != 0:
        why = "timed out" if done.timed_out else f"exited with {done.returncode}"
        raise TsClientError(f"ts-mcp-client {why}\n{output}")
    try:
        report = json.loads(done.output.strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise TsClientError(f"ts-mcp-client printed no report ({exc})\n{output}") from exc
    report["stderr"] = stderr
    return report
