"""`mcp-edge demo` starts the gateway in front of its embedded upstream and says so only once a
connection to the URL it prints succeeds; `mcp-edge try` completes a full MRTR round trip against
it and sees a tampered retry refused; the demo logs in the gateway's one format, without the
embedded server's lines; Ctrl-C stops it with exit code 130."""

from __future__ import annotations

import json
import re
import signal
import socket

import pytest

from mcp_edge import exits
from tests.support.cli import clean_env, no_traceback
from tests.support.processes import WatchedProcess, run_bounded, venv_command

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

GATEWAY_LINE = re.compile(r"^  gateway:  (http://127\.0\.0\.1:(\d+)/mcp) ")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (INFO|WARNING|ERROR) mcp_edge \S")


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_demo_and_try(log_format: str):
    env = clean_env() if log_format == "text" else clean_env(MCP_EDGE_LOG_FORMAT="json")
    with WatchedProcess([*venv_command("mcp-edge"), "demo", "--port", "0"], env=env) as demo:
        line = demo.wait_for_line("stdout", GATEWAY_LINE.match, timeout=120)
        url, port = GATEWAY_LINE.match(line).groups()  # type: ignore[union-attr]
        socket.create_connection(
            ("127.0.0.1", int(port)), timeout=5
        ).close()  # no retry: listening now
        assert demo.lines["stdout"][0] == "mcp-edge demo listening", demo.output()
        assert f"  uv run mcp-edge try {url}" in demo.lines["stdout"], demo.output()

        out = run_bounded([*venv_command("mcp-edge"), "try", url], timeout=60)
        assert out.returncode == 0, out.output
        assert (
            "round 1: input_required" in out.output and "sealed requestState mcpe1." in out.output
        )
        assert "round 2: complete: Booked a table for 4 on 2026-12-24" in out.output
        assert out.output.splitlines()[-1] == (
            'tampered retry: {"code": -32602, "message": "Invalid or expired requestState", '
            '"data": {"reason": "integrity"}}'
        )
        # The gateway's own line for the tampered retry: everything before it is logged by now.
        demo.wait_for_line("stderr", lambda ln: "requestState rejected" in ln, timeout=30)
        demo.signal_group(signal.SIGINT)
        assert demo.wait(60) == exits.INTERRUPTED, demo.output()
    no_traceback(demo.output())
    *logs, last = demo.lines["stderr"]
    assert last == "mcp-edge: interrupted (Ctrl-C)", demo.output()
    # One format, the gateway's own lines only: no uvicorn lifecycle lines, no SDK lines per
    # request of the embedded server.
    assert any("requestState rejected" in ln for ln in logs), demo.output()
    for ln in logs:
        if log_format == "text":
            assert TEXT_LINE.match(ln), (ln, demo.output())
        else:
            assert json.loads(ln)["logger"] == "mcp_edge", (ln, demo.output())
