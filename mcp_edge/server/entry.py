"""The ``mcp-edge`` command's entry point.

Its first act closes the process to the other processes of its user (non-dumpable: its
``/proc/<pid>/environ``, which may hold the key ring, included), before the gateway is imported or
anything is read; then :mod:`mcp_edge.server.cli` runs the command. The kernel resets the flag at
every ``exec``, so it cannot be set any earlier than this.
"""

from __future__ import annotations

from mcp_edge.server.prctl import make_non_dumpable


def main() -> int:
    make_non_dumpable()
    from mcp_edge.server.cli import main as run

    return run()
