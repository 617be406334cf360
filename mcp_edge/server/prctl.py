"""This process's own kernel flags (``prctl``), set by the process for itself.

Imported first by every ``mcp-edge`` process (:mod:`mcp_edge.server.entry`), so it imports nothing
but ``ctypes``: whatever it imported would run while the process is still open to its user's
other processes.
"""

from __future__ import annotations

import ctypes
import os
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def make_non_dumpable() -> bool:
    """Close this process's memory, environment, descriptors and ptrace to other processes of its
    user, and its core dump to everyone (Linux; elsewhere a no-op that returns False). The kernel
    keeps the flag across ``fork`` and resets it at ``exec``."""
    if sys.platform != "linux":
        return False
    _prctl(PR_SET_DUMPABLE, 0)
    return True


def die_with_parent(sig: int | None = None) -> None:
    """A worker process: be signalled (SIGTERM by default) when the process that started it dies
    (even SIGKILLed), so it stops its own local servers on the way out."""
    if sys.platform == "linux":
        import signal

        sig = int(signal.SIGTERM) if sig is None else sig
        _prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() == 1:  # the parent went away before the signal was set
            os.kill(os.getpid(), sig)
