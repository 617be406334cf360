"""Where a local (stdio) server runs: its user and groups, resource limits, private directory.

A local server is third-party code. When the gateway runs as root it drops each child to an
unprivileged user (``nobody`` unless the route names another) with no supplementary groups, so the
child can read neither the gateway's config and key files (which must not be readable by others,
see ``gateway.server.hardening``) nor its memory. Whatever the user, the child starts with
``no_new_privs``, in a session and process group of its own (the gateway stops the whole group),
with resource limits, a parent-death signal and a fresh private working directory.

**How the child is set up.** The server is started through a tiny exec shim: the gateway's own
interpreter with ``-I -S -c`` (no site, no environment, nothing of the gateway imported), which in
the new, single-threaded process sets the limits, drops the user and group, sets ``no_new_privs``
and the parent-death signal, enters the directory, closes every descriptor but 0-2 and
``exec``\\ s the server's argv. Not
``preexec_fn``: it runs Python in a forked copy of the multi-threaded gateway (a lock held by another
thread at fork stays held for ever) and uvloop does not run it at all. Not asyncio's
``user=``/``group=``: they switch before ``exec``, and nothing sets limits, ``no_new_privs`` or the
parent-death signal. ``setpriv``/``prlimit`` would need util-linux at run time; the interpreter is
always there. The order matters: the parent-death signal is cleared by a change of user, so it is
set after it; a failing step ends the shim with one line on stderr (which reaches the gateway's
log) and exit code 126 (127: the program was not found), before any of the server's code runs.
"""

from __future__ import annotations

import atexit
import contextlib
import grp
import json
import os
import pwd
import shutil
import signal
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

DEFAULT_USER = "nobody"
DIR_PREFIX = "mcp-edge-stdio-"

#: The exec shim (see the module docstring). Its only input is the JSON spec in argv[1].
SHIM = r"""
import json, os, resource, sys, warnings  # all imported now (os.execvpe imports warnings):
if sys.platform == "linux":
    import ctypes  # the interpreter's own files may be out of the child user's reach later
    libc = ctypes.CDLL(None, use_errno=True)
spec = json.loads(sys.argv[1])
inherited_fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
def fail(step, exc, code=126):
    why = getattr(exc, "strerror", None) or exc
    os.write(2, f"mcp-edge sandbox: {step}: {why}\n".encode("utf-8", "replace"))
    os._exit(code)
for name, soft, hard in spec["limits"]:
    try:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    except (OSError, ValueError) as exc:
        fail(name, exc)
try:
    if spec["gid"] is not None:
        os.setgroups([])
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    if spec["uid"] is not None:
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])
except OSError as exc:
    fail("user", exc)
if sys.platform == "linux":
    for step, option, value in (("no_new_privs", 38, 1), ("pdeathsig", 1, 9)):
        if libc.prctl(option, value, 0, 0, 0) != 0:
            fail(step, os.strerror(ctypes.get_errno()))
    if os.getppid() != spec["parent"]:
        os._exit(1)  # the gateway went away before the signal was set
try:
    os.chdir(spec["cwd"])
except OSError as exc:
    fail("cwd", exc)
# Nothing but stdin, stdout and stderr: no descriptor the gateway let through (uvloop leaves
# copies of the child's own pipes, and inheritable ones of the gateway's, open across exec).
os.closerange(3, max(inherited_fds, 1024))
try:
    os.execvpe(spec["argv"][0], spec["argv"], os.environ)
except OSError as exc:
    fail("exec " + spec["argv"][0], exc, 127)
"""


class SandboxError(ValueError):
    """A route's sandbox cannot be set up on this host (phrased for the operator)."""


@dataclass(frozen=True, slots=True)
class Limits:
    memory_bytes: int | None = 2 * 1024**3
    address_space_bytes: int | None = None
    cpu_seconds: int | None = None
    open_files: int | None = 1024
    processes: int | None = 1024


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the children run as: ``uid``/``gid`` None means the gateway's own (no switch)."""

    uid: int | None = None
    gid: int | None = None
    name: str = ""

    @property
    def switches(self) -> bool:
        return self.uid is not None


@dataclass(frozen=True, slots=True)
class Sandbox:
    identity: Identity = field(default_factory=Identity)
    limits: Limits = field(default_factory=Limits)
    #: Where private directories are made (must be reachable by the child's user).
    tmp_root: str = field(default_factory=tempfile.gettempdir)

    def rlimits(self) -> list[tuple[str, int, int]]:
        """(name, soft, hard) for the shim, never above the gateway's own hard limits."""
        import resource

        lim = self.limits
        wanted = [
            ("RLIMIT_DATA", lim.memory_bytes),
            ("RLIMIT_AS", lim.address_space_bytes),
            ("RLIMIT_CPU", lim.cpu_seconds),
            ("RLIMIT_NOFILE", lim.open_files),
        ]
        # Per user, not per process: with the gateway's own user it would count the gateway too.
        if self.identity.switches and self.identity.uid != 0:
            wanted.append(("RLIMIT_NPROC", lim.processes))
        out = []
        for name, value in wanted:
            if value is None:
                continue
            # CPU: SIGXCPU at the soft limit, SIGKILL a few seconds later.
            soft, hard = value, value + 5 if name == "RLIMIT_CPU" else value
            _, current = resource.getrlimit(getattr(resource, name))
            if current != resource.RLIM_INFINITY and os.geteuid() != 0:  # only root can raise it
                soft, hard = min(soft, current), min(hard, current)
            out.append((name, soft, hard))
        return out

    def make_dir(self) -> str:
        """A fresh private directory (0700) owned by the child's user, named after this process
        (see :func:`sweep`)."""
        path = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-", dir=self.tmp_root)
        if self.identity.switches:
            os.chown(path, self.identity.uid, self.identity.gid)  # type: ignore[arg-type]
        return path

    def command(self, argv: tuple[str, ...], cwd: str) -> list[str]:
        """The argv that starts ``argv`` in this sandbox, in ``cwd``."""
        spec = {
            "limits": self.rlimits(),
            "uid": self.identity.uid,
            "gid": self.identity.gid,
            "parent": os.getpid(),
            "cwd": cwd,
            "argv": list(argv),
        }
        return [sys.executable, "-I", "-S", "-c", SHIM, json.dumps(spec)]

    def environment(
        self, env: dict[str, str], home: str, configured: dict[str, str]
    ) -> dict[str, str]:
        """The child's environment: its own directory as HOME and TMPDIR (unless the route sets
        them), its own user's name."""
        env = dict(env)
        for name in ("HOME", "TMPDIR"):
            if name not in configured:
                env[name] = home
        if self.identity.switches:
            for name in ("USER", "LOGNAME"):
                if name not in configured:
                    env[name] = self.identity.name
        return env


def sweep(tmp_root: str) -> None:
    """Remove the private directories a gateway process left when it was killed (SIGKILL leaves
    no way to remove them): those named after a process that no longer exists."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp_root):
            owner = entry.name.removeprefix(DIR_PREFIX).split("-", 1)[0]
            if entry.name.startswith(DIR_PREFIX) and owner.isdigit() and not _alive(int(owner)):
                remove_dir(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dir(path: str) -> None:
    """Remove a child's private directory, whatever modes it left inside."""

    def writable(func: Any, target: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            os.chmod(target, 0o700)
            func(target)

    shutil.rmtree(path, onerror=writable)
    shutil.rmtree(path, ignore_errors=True)


def _lookup_user(user: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        return None


def _lookup_group(group: str) -> int | None:
    if group.isdigit():
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        return None


def resolve_identity(user: str | None, group: str | None, *, euid: int, egid: int) -> Identity:
    """Who a route's children run as. As root: ``user`` (default ``nobody``) and ``group``
    (default its primary group). Not root: the gateway's own user, which is all it can be."""
    if euid != 0:
        me = pwd.getpwuid(euid).pw_name if _lookup_user(str(euid)) else str(euid)
        if user is not None and user not in (me, str(euid)):
            raise SandboxError(
                f"upstream.user: running local servers as {user!r} needs the gateway to run as root "
                f"(it runs as {me}); leave user unset to run them as {me}"
            )
        if group is not None and _lookup_group(group) != egid:
            raise SandboxError(
                f"upstream.group: running local servers in group {group!r} needs the gateway to run "
                "as root; leave group unset"
            )
        return Identity(name=me)
    name = user or DEFAULT_USER
    entry = _lookup_user(name)
    if entry is None and not name.isdigit():
        raise SandboxError(
            f"upstream.user: no user {name!r} on this host; create it (useradd --system "
            f"--no-create-home {name}) or name another unprivileged user"
        )
    uid = entry.pw_uid if entry is not None else int(name)
    gid = entry.pw_gid if entry is not None else uid
    if group is not None:
        found = _lookup_group(group)
        if found is None:
            raise SandboxError(f"upstream.group: no group {group!r} on this host")
        gid = found
    return Identity(uid=uid, gid=gid, name=entry.pw_name if entry is not None else name)


def check_reachable(path: str, identity: Identity) -> None:
    """Private directories are made under ``path``: the child's user must be able to enter it."""
    if not identity.switches:
        return
    current = os.path.realpath(path)
    while True:
        mode = os.stat(current).st_mode
        if not mode & stat.S_IXOTH:
            raise SandboxError(
                f"the temporary directory {path} is not reachable by user {identity.name} "
                f"({current} has mode {stat.filemode(mode)}); set TMPDIR to a directory such as /tmp"
            )
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


# ---------------------------------------------------------------- every child, on any exit

#: Process groups of the children alive now, and their private directories.
_LIVE: dict[int, str] = {}


def track(pgid: int, directory: str) -> None:
    _LIVE[pgid] = directory


def untrack(pgid: int) -> None:
    _LIVE.pop(pgid, None)


@atexit.register
def _kill_leftovers() -> None:
    """Whatever way the interpreter exits (a failed start, an error in the server loop), no
    process group the gateway started outlives it. The orderly path is ``StdioInstance.stop``."""
    for pgid, directory in list(_LIVE.items()):
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            remove_dir(directory)
    _LIVE.clear()
