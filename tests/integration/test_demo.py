"""`mcp-edge demo` starts the gateway in front of its embedded upstream; `mcp-edge try` completes
a full MRTR round trip against it and sees a tampered retry refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import free_port, run_bounded, serving, venv_command

pytestmark = pytest.mark.integration


def test_demo_and_try(tmp_path: Path):
    port = free_port()
    argv = [*venv_command("mcp-edge"), "demo", "--port", str(port)]
    with serving("demo", argv, port=port, log_path=tmp_path / "demo.log") as demo:
        out = run_bounded([*venv_command("mcp-edge"), "try", f"http://127.0.0.1:{port}/mcp"], timeout=60)
        assert out.returncode == 0, out.output
        assert "round 1: input_required" in out.output and "sealed requestState mcpe1." in out.output
        assert "round 2: complete: Booked a table for 4" in out.output
        assert '"reason": "integrity"' in out.output
        log = demo.log_tail()
        assert "throw-away state key" in log and f"http://127.0.0.1:{port}/mcp" in log
