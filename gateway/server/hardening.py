"""The gateway process's own protection from the programs beside it, local servers included.

- **Non-dumpable** (``prctl(PR_SET_DUMPABLE, 0)``): processes of the same user can no longer read
  its ``/proc/<pid>/environ``, ``mem``, ``maps`` or ``fd``, nor ptrace it, and it leaves no core
  dump. The kernel resets the flag at ``exec``, so each gateway process sets it for itself (serve,
  demo, every worker) before it reads a key. ``/proc/<pid>/cmdline`` stays world-readable: nothing
  secret is ever passed on the command line.
- **File modes**: the state key files, and the config file when it holds keys or when local
  servers run (as another user), must be readable only by the gateway's user (or its own group,
  as Kubernetes mounts Secrets for ``fsGroup``).
- The key ring's variable leaves ``os.environ`` once read, so nothing the process starts later
  can inherit it by accident. The copy the kernel keeps at the top of the initial stack (what
  ``/proc/<pid>/environ`` shows) cannot be erased: non-dumpable is what closes it.
"""

from __future__ import annotations

import ctypes
import grp
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from gateway.server.config import ENV_PREFIX, ConfigError, GatewayConfig

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
KEYS_VARIABLE = ENV_PREFIX + "STATE_KEYS"


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def make_non_dumpable() -> bool:
    """Close this process's memory, environment and ptrace to other processes of its user
    (Linux; elsewhere a no-op that returns False)."""
    if sys.platform != "linux":
        return False
    _prctl(PR_SET_DUMPABLE, 0)
    return True


def die_with_parent(sig: signal.Signals = signal.SIGTERM) -> None:
    """A worker process: be signalled when the process that started it dies (even SIGKILLed),
    so it stops its own local servers on the way out."""
    if sys.platform == "linux":
        _prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() == 1:  # the parent went away before the signal was set
            os.kill(os.getpid(), sig)


def scrub_keys_from_environment() -> None:
    os.environ.pop(KEYS_VARIABLE, None)


def _exposure(path: str) -> str | None:
    """Who else may read ``path``, or None when only the gateway's user (and group) can."""
    st = os.stat(path)
    if st.st_mode & stat.S_IROTH:
        return f"readable by every user (mode {stat.filemode(st.st_mode)})"
    if st.st_mode & stat.S_IRGRP and st.st_gid != os.getegid():
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        return f"readable by group {group} (mode {stat.filemode(st.st_mode)})"
    return None


def _holds_keys(path: str) -> bool:
    try:
        doc: Any = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False
    state = doc.get("state") if isinstance(doc, dict) else None
    return isinstance(state, dict) and bool(state.get("keys"))


def check_file_modes(config: GatewayConfig, config_path: str | None) -> list[str]:
    """Refuse key files, and a config file that holds keys or runs local servers, that other users
    can read; return warnings for anything else worth a line."""
    for file in config.state.key_files:
        try:
            exposure = _exposure(file)
        except OSError:
            continue  # load_key_ring reports the unreadable file
        if exposure is not None:
            raise ConfigError(
                f"state.key_files: {file} is {exposure}; state keys must be readable only by "
                f"the gateway's user: chmod 600 {file}"
            )
    warnings: list[str] = []
    if config_path:
        try:
            exposure = _exposure(config_path)
        except OSError:
            return warnings
        if exposure is not None:
            why = (
                "it holds state keys"
                if _holds_keys(config_path)
                else "the gateway runs local (stdio) servers"
                if any(r.stdio for r in config.routes)
                else None
            )
            if why is not None:
                raise ConfigError(
                    f"config file {config_path} is {exposure} and {why}; it must be readable only "
                    f"by the gateway's user: chmod 600 {config_path}"
                )
            warnings.append(
                f"config file {config_path} is {exposure}; consider chmod 600 {config_path}"
            )
    return warnings
