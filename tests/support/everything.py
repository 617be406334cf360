"""The published npm ``@modelcontextprotocol/server-everything`` (``scripts/install-stdio-servers.sh``
installs it, exactly pinned, with Node 22, into ``.cache/stdio-servers``).

The installed version serves stdio and, started as ``index.js streamableHttp`` with ``PORT``, a
2025-era Streamable HTTP endpoint at ``/mcp`` (sessions, an in-memory event store, the standalone
GET stream): both are put behind the gateway unmodified.
"""

from __future__ import annotations

import functools
import os
import shutil
from contextlib import AbstractContextManager
from pathlib import Path

from tests.support.processes import REPO_ROOT, ManagedProcess, free_port, run_bounded, serving


@functools.cache
def everything_launcher() -> str | None:
    """The stdio launcher (installing the server on first use), or None without npm."""
    script = REPO_ROOT / "scripts" / "install-stdio-servers.sh"
    if shutil.which("npm") is None:
        return None
    out = run_bounded(["bash", str(script)], timeout=900)
    path = out.output.strip().splitlines()[-1] if out.returncode == 0 and out.output.strip() else ""
    return path if path and os.access(path, os.X_OK) else None


def node_and_entry(launcher: str) -> tuple[str, str]:
    """Node 22 and the server's ``dist/index.js``, as the launcher names them."""
    quoted = [part for part in Path(launcher).read_text().split('"') if part.startswith("/")]
    return quoted[0], quoted[1]


def serving_everything_http(
    launcher: str, log_dir: Path
) -> tuple[str, AbstractContextManager[ManagedProcess]]:
    """``(url, context manager running it)``: the server over Streamable HTTP on a free port."""
    node, entry = node_and_entry(launcher)
    port = free_port()
    return f"http://127.0.0.1:{port}/mcp", serving(
        "everything-http",
        [node, entry, "streamableHttp"],
        port=port,
        log_path=log_dir / f"everything-http-{port}.log",
        env={"PORT": str(port)},
    )
