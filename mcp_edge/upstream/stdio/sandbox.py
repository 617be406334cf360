"""Where a local (stdio) server runs: its user and groups, resource limits, private directory.

A local server is third-party code. When the gateway runs as root it drops each child to an
unprivileged user (``nobody`` unless the route names another) with no supplementary groups, so the
child can read neither the gateway's config and key files (which must not be readable by others,
see ``mcp_edge.server.hardening``) nor its memory. Whatever the user, the child starts with
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
import errno
import grp
import json
import os
import pwd
import re
import secrets
import stat
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mcp_edge.upstream.stdio import containment

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
def say(step, exc):
    why = getattr(exc, "strerror", None) or exc
    os.write(2, f"mcp-edge sandbox: {step}: {why}\n".encode("utf-8", "replace"))
def fail(step, exc, code=126):
    say(step, exc)
    os._exit(code)
if spec["cgroup"]:  # first: whatever the server starts is in it (the subreaper holds it otherwise)
    try:
        fd = os.open(spec["cgroup"] + "/cgroup.procs", os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)
    except OSError as exc:
        say("cgroup (contained without it)", exc)
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

    @property
    def owner(self) -> int:
        """The user who owns the private directories (the children's)."""
        return self.identity.uid if self.identity.uid is not None else os.geteuid()

    def make_dir(self) -> PrivateDir:
        """A fresh private directory (0700) owned by the child's user, named after this process
        (see :func:`sweep`)."""
        root = os.open(self.tmp_root, _ROOT_FLAGS)
        try:
            for _ in range(100):
                name = f"{DIR_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
                try:
                    os.mkdir(name, 0o700, dir_fd=root)
                    break
                except FileExistsError:
                    continue
            else:
                raise FileExistsError(f"no free private directory name in {self.tmp_root}")
            fd = os.open(name, _DIR_FLAGS, dir_fd=root)
            try:
                made = os.fstat(fd)
                if self.identity.switches:
                    os.fchown(fd, self.identity.uid, self.identity.gid)  # type: ignore[arg-type]
            finally:
                os.close(fd)
        finally:
            os.close(root)
        return PrivateDir(self.tmp_root, name, made.st_dev, made.st_ino)

    def command(self, argv: tuple[str, ...], cwd: str, cgroup: str | None = None) -> list[str]:
        """The argv that starts ``argv`` in this sandbox, in ``cwd`` (and in ``cgroup``)."""
        spec = {
            "limits": self.rlimits(),
            "uid": self.identity.uid,
            "gid": self.identity.gid,
            "parent": os.getpid(),
            "cgroup": cgroup,
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


@dataclass(frozen=True, slots=True)
class PrivateDir:
    """A child's private directory: ``name`` in ``root``, known by the device and inode it had
    when it was made. The child owns it, and in a sticky ``/tmp`` may rename it and leave a
    symbolic link (to anything) in its place: nothing done to it later follows a link or leaves
    it."""

    root: str
    name: str
    device: int
    inode: int

    @property
    def path(self) -> str:
        return os.path.join(self.root, self.name)


_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS = _ROOT_FLAGS | os.O_NOFOLLOW
#: Deeper directories are moved up to the top before they are emptied (bounded descriptors).
_MAX_DEPTH = 64
REMOVE_SECONDS = 30.0


def remove_dir(directory: PrivateDir, seconds: float = REMOVE_SECONDS) -> bool:
    """Remove a child's private directory, whatever it left inside; False when what has its name
    is not that directory any more (left alone) or it could not be emptied in ``seconds``."""
    try:
        root = os.open(directory.root, _ROOT_FLAGS)
    except OSError:
        return False
    try:
        return _remove_verified(root, directory.name, directory.device, directory.inode, seconds)
    finally:
        os.close(root)


def _remove_verified(root: int, name: str, device: int, inode: int, seconds: float) -> bool:
    """Remove ``name`` in the directory open as ``root`` if it is still the directory
    ``device``/``inode``: opened without following a link, checked, emptied by descriptor."""
    try:
        top = _open_dir(root, name, expect=(device, inode))
    except (OSError, _NotOurs):
        return False
    try:
        emptied = _empty(top, top, device, 0, time.monotonic() + seconds)
    except (OSError, TimeoutError):
        emptied = False
    finally:
        os.close(top)
    if not emptied:
        return False
    try:  # (what has the name now is checked once more; rmdir only removes an empty directory)
        now = os.stat(name, dir_fd=root, follow_symlinks=False)
        if (now.st_dev, now.st_ino) != (device, inode):
            return False
        _writable(root, lambda: os.rmdir(name, dir_fd=root), own=False)
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return True


class _NotOurs(Exception):
    pass


def _open_dir(parent: int, name: str, expect: tuple[int, int] | None = None) -> int:
    """``name`` in the directory open as ``parent``, opened as a directory, never through a link
    (and, with ``expect``, only if it is that device and inode). One its owner cannot read (a
    child may leave any mode) is made 0700 first, through a descriptor of that very directory."""
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        if not hasattr(os, "O_PATH"):
            raise
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        try:
            _check(handle, expect)
            os.chmod(f"/proc/self/fd/{handle}", 0o700)  # the inode the descriptor holds
            fd = os.open(".", _ROOT_FLAGS, dir_fd=handle)
        finally:
            os.close(handle)
    try:
        _check(fd, expect)
    except _NotOurs:
        os.close(fd)
        raise
    return fd


def _check(fd: int, expect: tuple[int, int] | None) -> None:
    if expect is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != expect:
            raise _NotOurs


def _writable(fd: int, action: Callable[[], object], own: bool = True) -> None:
    """``action`` on an entry of the directory open as ``fd``; if it is refused, once more after
    making that directory 0700 (only a directory of the child's tree: ``own``)."""
    try:
        action()
    except PermissionError:
        if not own:
            raise
        os.fchmod(fd, 0o700)
        action()


def _empty(fd: int, top: int, device: int, depth: int, deadline: float) -> bool:
    """Remove everything in the directory open as ``fd`` (at ``depth`` below ``top``): entries
    are unlinked by descriptor, subdirectories entered with :func:`_open_dir` (so never through a
    link, nor into another file system). Directories deeper than _MAX_DEPTH are moved up into
    ``top`` first. False when something has to stay."""
    kept: set[str] = set()
    while names := [n for n in os.listdir(fd) if n not in kept]:
        for name in names:
            if time.monotonic() > deadline:
                raise TimeoutError
            if not _remove_entry(fd, name, top, device, depth, deadline):
                kept.add(name)
    return not kept


def _remove_entry(fd: int, name: str, top: int, device: int, depth: int, deadline: float) -> bool:
    """Remove (or move up) one entry; False when it has to stay."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            _writable(fd, lambda: os.unlink(name, dir_fd=fd))
            return True
        if st.st_dev != device:
            return False  # a file system mounted here: never entered
        if depth >= _MAX_DEPTH:
            flat = f".flat-{secrets.token_hex(8)}"
            _writable(fd, lambda: os.rename(name, flat, src_dir_fd=fd, dst_dir_fd=top))
            return True
        sub = _open_dir(fd, name, expect=(st.st_dev, st.st_ino))
        try:
            emptied = _empty(sub, top, device, depth + 1, deadline)
        finally:
            os.close(sub)
        if emptied:
            _writable(fd, lambda: os.rmdir(name, dir_fd=fd))
        return emptied
    except FileNotFoundError:
        return True  # gone meanwhile
    except _NotOurs:
        return True  # replaced meanwhile: looked at again in the next pass
    except OSError as exc:
        # Replaced meanwhile (by a link, a file, a directory; or written to): the next pass
        # looks again. Anything else (refused, a read-only file system): it stays.
        return exc.errno in _RACES


_RACES = {errno.ELOOP, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY}


#: ``mcp-edge-stdio-<pid of the gateway process>-<random>``
_DIR_NAME = re.compile(rf"{re.escape(DIR_PREFIX)}(\d+)-[A-Za-z0-9_]{{1,32}}")


def sweep(box: Sandbox) -> None:
    """Remove the private directories a gateway process left when it was killed (SIGKILL leaves
    no way to remove them): those named after a process that no longer exists, and only real
    directories (never a link) owned by the children's user; and end the cgroups it left."""
    with contextlib.suppress(OSError):
        root = os.open(box.tmp_root, _ROOT_FLAGS)
        try:
            for name in os.listdir(root):
                match = _DIR_NAME.fullmatch(name)
                if match is None or _alive(int(match[1])):
                    continue
                try:
                    st = os.stat(name, dir_fd=root, follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and st.st_uid == box.owner:
                    _remove_verified(root, name, st.st_dev, st.st_ino, REMOVE_SECONDS)
        finally:
            os.close(root)
    containment.sweep_cgroups(_alive)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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

#: The children alive now (pid -> private directory).
_LIVE: dict[int, PrivateDir] = {}


def track(pid: int, directory: PrivateDir, cgroup: str | None = None) -> None:
    _LIVE[pid] = directory
    containment.CHILDREN.cgroups[pid] = cgroup


def untrack(pid: int, directory: PrivateDir) -> None:
    """Forget a child (if ``pid`` is still that child's: a pid may have been reused since)."""
    if _LIVE.get(pid) == directory:
        del _LIVE[pid]
        containment.CHILDREN.cgroups.pop(pid, None)


@atexit.register
def _kill_leftovers() -> None:
    """Whatever way the interpreter exits (a failed start, an error in the server loop), nothing
    a local server started outlives it. The orderly path is ``StdioInstance.stop``."""
    for pid, directory in list(_LIVE.items()):
        cgroup = containment.CHILDREN.cgroups.get(pid)
        with contextlib.suppress(OSError):
            containment.kill_now(pid, cgroup, seconds=2.0)
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)
        with contextlib.suppress(OSError):
            remove_dir(directory, seconds=2.0)
        containment.remove_cgroup(cgroup)
    _LIVE.clear()
    containment.CHILDREN.cgroups.clear()
