"""Everything a local server starts ends with it (and with the gateway).

A server can leave the process group and session it was started in (``setsid``) and its parent
(a double fork): signalling the group misses such a process, and init adopts it. So:

- **The gateway is a child subreaper** (``PR_SET_CHILD_SUBREAPER``, Linux, no privilege needed),
  from the moment it starts its first local server: a process whose parent exits is adopted by
  the gateway instead of init, so all a server starts stays below the gateway, where ``/proc``
  shows it. Such an adopted process (its parent is the gateway, and the gateway did not start it)
  is a *stray*: nothing tells which server it came from, so any server's stop ends every stray
  (where cgroups tell, only its own). The gateway starts no process but its local servers.
- **A cgroup per server, where the gateway can make one** (cgroup v2 with ``cgroup.kill``, Linux
  5.14: a root gateway on a writable cgroup file system, or a gateway given a delegated cgroup).
  The exec shim moves itself into it before the server's program runs; a process of another user
  cannot leave it, and ``cgroup.kill`` ends all of it at once, a process forking meanwhile
  included. Cgroups a killed gateway left are ended at the next start.

Stopping a server: SIGTERM to all of it, its grace period, then SIGKILL in rounds, each over a
fresh snapshot of ``/proc``, until a snapshot finds nothing of it alive (a process forked while
the last round ran is in the next), within a bound. Every signal goes through a pidfd opened on
the process the snapshot saw (never to a pid that was reused since). Strays that have exited are
reaped here, each by its pid: never ``waitpid(-1)``, which would take the exit status of a server
the event loop waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import itertools
import logging
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from mcp_edge.observability.logs import event

PR_SET_CHILD_SUBREAPER = 36
CGROUP_PREFIX = "mcp-edge-"
_CGROUP_NAME = re.compile(rf"{re.escape(CGROUP_PREFIX)}(\d+)-[0-9a-f]{{12}}")
#: How long the SIGKILL rounds may go on, and the pause between two rounds.
KILL_SECONDS = 5.0
_PAUSES = (0.0, 0.005, 0.01, 0.02, 0.05)
_QUICK_PASSES = 50


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as ``/proc/<pid>/stat`` showed it."""

    pid: int
    ppid: int
    state: str
    #: Start time (clock ticks after boot): tells the process seen from one that took its pid since.
    start: int

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def parse_stat(pid: int, text: str) -> Proc | None:
    """A :class:`Proc` from the text of ``/proc/<pid>/stat`` (its name, in parentheses, may hold
    anything, spaces and parentheses included)."""
    try:
        fields = text[text.rindex(")") + 2 :].split()
        return Proc(pid=pid, ppid=int(fields[1]), state=fields[0], start=int(fields[19]))
    except (ValueError, IndexError):
        return None


def below(table: Mapping[int, Proc], roots: Iterable[int]) -> set[int]:
    """The ``roots`` present in ``table`` and every process descended from them."""
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found = {pid for pid in roots if pid in table}
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def strays(table: Mapping[int, Proc], me: int, known: Collection[int]) -> set[int]:
    """Processes adopted by ``me``: its children that it did not start itself."""
    return {p.pid for p in table.values() if p.ppid == me and p.pid not in known}


# ------------------------------------------------------------------ the children, now


@dataclass
class Children:
    """The servers this process started and is still responsible for (pid -> its cgroup, or
    None), and how many are being started right now (their pids not known yet)."""

    cgroups: dict[int, str | None] = field(default_factory=dict)
    starting: int = 0
    subreaper: bool = False
    prepared: bool = False


CHILDREN = Children()


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around the start of a server: until its pid is tracked, a new child of this process may be
    that server, not a stray, so no round takes one for a stray meanwhile."""
    CHILDREN.starting += 1
    try:
        yield
    finally:
        CHILDREN.starting -= 1


def prepare() -> None:
    """Before a server starts: adopt what local servers leave behind (once per process), and say
    in the log how they are contained."""
    if CHILDREN.subreaper or CHILDREN.prepared:
        return
    CHILDREN.prepared = True
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        CHILDREN.subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    event(logging.INFO, "local servers' processes are contained", by=mechanism())


def snapshot() -> dict[int, Proc]:
    """Every process now (Linux ``/proc``; empty elsewhere)."""
    table: dict[int, Proc] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                proc = parse_stat(int(name), f.read())
        except OSError:
            continue
        if proc is not None:
            table[proc.pid] = proc
    return table


def _cgroup_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return None


def _cgroup_members(cgroup: str | None) -> set[int]:
    if cgroup is None:
        return set()
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), encoding="ascii") as f:
            return {int(line) for line in f if line.strip()}
    except (OSError, ValueError):
        return set()


def targets(leader: int, cgroup: str | None, table: Mapping[int, Proc]) -> set[int]:
    """Everything of the server ``leader`` (in its cgroup ``cgroup``) in ``table``: it, all
    below it, its cgroup's members, and the strays no cgroup gives to another live server (none
    while a server is being started: an untracked child may be that server)."""
    known = CHILDREN.cgroups
    mine: set[int] = set()
    if CHILDREN.subreaper and not CHILDREN.starting:
        mine = strays(table, os.getpid(), known)
        others = {os.path.basename(c) for pid, c in known.items() if c and pid != leader}
        if others and mine:
            mine = {pid for pid in mine if os.path.basename(_cgroup_of(pid) or "/") not in others}
    me = os.getpid()
    # The server itself while it is still this process's child (not a process that took its pid).
    server = {leader} if leader in table and table[leader].ppid == me else set()
    return below(table, {*server, *mine, *_cgroup_members(cgroup)})


def _send(proc: Proc, sig: signal.Signals) -> None:
    """Signal the process ``proc`` describes, and never another that took its pid since."""
    try:
        handle = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfds (before Linux 5.3): by pid, checked just before
        if _started(proc.pid) == proc.start:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, sig)
        return
    try:
        if _started(proc.pid) == proc.start:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(handle, sig)
    finally:
        os.close(handle)


def _started(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            proc = parse_stat(pid, f.read())
    except OSError:
        return None
    return proc.start if proc is not None else None


def reap_strays(table: Mapping[int, Proc] | None = None) -> None:
    """Collect the exit status of strays that have exited (each by its pid). Without ``table``,
    only this process's children are read (``/proc/<pid>/task/<tid>/children``), not all."""
    if not CHILDREN.subreaper or CHILDREN.starting:  # an untracked child may be a new server
        return
    table = _children() if table is None else table
    for pid in strays(table, os.getpid(), CHILDREN.cgroups):
        if not table[pid].alive:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def _children() -> dict[int, Proc]:
    me = os.getpid()
    try:
        threads = os.listdir(f"/proc/{me}/task")
        pids: set[int] = set()
        for tid in threads:
            with open(f"/proc/{me}/task/{tid}/children", encoding="ascii") as f:
                pids.update(int(pid) for pid in f.read().split())
    except FileNotFoundError:  # a thread that ended meanwhile, or no such file (kernel option)
        return snapshot()
    except (OSError, ValueError):
        return {}
    table: dict[int, Proc] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
                proc = parse_stat(pid, f.read())
        except OSError:
            continue
        if proc is not None and proc.ppid == me:
            table[pid] = proc
    return table


def terminate(leader: int, cgroup: str | None) -> None:
    """SIGTERM to all of a server (its group first, as before it was contained)."""
    with contextlib.suppress(OSError):
        os.killpg(leader, signal.SIGTERM)
    table = snapshot()
    for pid in targets(leader, cgroup, table):
        _send(table[pid], signal.SIGTERM)


def _kill_rounds(leader: int, cgroup: str | None, seconds: float) -> Iterator[float]:
    """SIGKILL every process of a server, round after round, until one finds none alive; yields
    the pause wanted before the next round."""
    deadline = time.monotonic() + seconds
    for round_ in itertools.count():
        if cgroup is not None:
            _write(os.path.join(cgroup, "cgroup.kill"), "1")
        with contextlib.suppress(OSError):
            os.killpg(leader, signal.SIGKILL)
        # First the gateway's own children, a reading much quicker than all of /proc, again and
        # again while it finds one alive: a process that keeps forking and exiting is adopted by
        # the gateway at each step.
        for _ in range(_QUICK_PASSES):
            children = _children()
            quick = targets(leader, cgroup, children)
            alive = [children[p] for p in quick if children[p].alive]
            for proc in alive:
                _send(proc, signal.SIGKILL)
            if not alive:
                break
        if _nothing_left(leader, cgroup, children, quick):
            break
        table = snapshot()
        found = [table[pid] for pid in targets(leader, cgroup, table)]
        for proc in found:
            if proc.alive:
                _send(proc, signal.SIGKILL)
        reap_strays(table)
        # Done when nothing of it is left, not even one that exited just now (but a server, which
        # the event loop reaps): what it forked as it exited may be missing from this reading.
        busy = [p for p in found if p.alive or p.pid not in CHILDREN.cgroups]
        if (not busy and not CHILDREN.starting) or time.monotonic() > deadline:
            break
        yield _PAUSES[min(round_, len(_PAUSES) - 1)]
    reap_strays()


def _nothing_left(
    leader: int, cgroup: str | None, children: Mapping[int, Proc], quick: set[int]
) -> bool:
    """Whether the gateway's children alone show that nothing of the server is left (the usual
    case, read without all of /proc): the server has exited, and the gateway, which adopts all it
    leaves, has adopted nothing (and its cgroup is empty)."""
    if not CHILDREN.subreaper or CHILDREN.starting or _cgroup_members(cgroup):
        return False
    return quick <= {leader} and not (leader in children and children[leader].alive)


async def kill(leader: int, cgroup: str | None, seconds: float = KILL_SECONDS) -> None:
    for pause in _kill_rounds(leader, cgroup, seconds):
        await asyncio.sleep(pause)


def kill_now(leader: int, cgroup: str | None, seconds: float = KILL_SECONDS) -> None:
    """:func:`kill` without an event loop (the interpreter is exiting)."""
    for pause in _kill_rounds(leader, cgroup, seconds):
        time.sleep(pause)


def _write(path: str, text: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.write(fd, text.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# ------------------------------------------------------------------ cgroups


def _own_cgroup_dir() -> str | None:
    """The directory of this process's cgroup v2 (None without one)."""
    if sys.platform != "linux":
        return None
    relative = _cgroup_of(os.getpid())
    if relative is None:
        return None
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    for line in mounts:
        left, _, right = line.partition(" - ")
        parts = left.split()
        if right.split()[:1] != ["cgroup2"] or len(parts) < 5:
            continue
        root, point = parts[3], parts[4]
        if root != "/" and relative != root and not relative.startswith(root + "/"):
            continue
        inner = relative[len(root) :] if root != "/" else relative
        return os.path.normpath(point + "/" + inner.lstrip("/"))
    return None


@dataclass
class _Cgroups:
    parent: str | None = None
    probed: bool = False


_CGROUPS = _Cgroups()


def _cgroup_parent() -> str | None:
    if not _CGROUPS.probed:
        _CGROUPS.probed = True
        found = _own_cgroup_dir()
        if found is not None and os.access(found, os.W_OK):
            _CGROUPS.parent = found
    return _CGROUPS.parent


def new_cgroup() -> str | None:
    """A fresh cgroup for one server (its directory), or None where this process cannot make
    one that ``cgroup.kill`` ends (then the subreaper alone contains the server)."""
    parent = _cgroup_parent()
    if parent is None:
        return None
    path = os.path.join(parent, f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}")
    try:
        os.mkdir(path)
    except OSError:
        _CGROUPS.parent = None  # read-only, not delegated: not tried again
        return None
    if not os.path.exists(os.path.join(path, "cgroup.kill")):  # before Linux 5.14
        remove_cgroup(path)
        _CGROUPS.parent = None
        return None
    return path


def remove_cgroup(path: str | None) -> None:
    """Remove a server's cgroup once nothing in it is alive (zombies do not count)."""
    if path is None:
        return
    for _ in range(20):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            _write(os.path.join(path, "cgroup.kill"), "1")
            time.sleep(0.01)


def mechanism() -> str:
    """How local servers' processes are contained here (for the log)."""
    if sys.platform != "linux":
        return "process group only (not Linux)"
    parent = _cgroup_parent()
    if parent is not None:
        return f"subreaper and a cgroup per server (under {parent})"
    return "subreaper (no cgroup this process may create)"


def sweep_cgroups(alive: Callable[[int], bool]) -> None:
    """End and remove the cgroups of gateway processes that no longer exist (a gateway that was
    SIGKILLed leaves them, and what ran in them)."""
    parent = _cgroup_parent()
    if parent is None:
        return
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        match = _CGROUP_NAME.fullmatch(name)
        if match is None or alive(int(match[1])):
            continue
        path = os.path.join(parent, name)
        if _write(os.path.join(path, "cgroup.kill"), "1"):
            event(logging.WARNING, "ended what a stopped gateway left in a cgroup", cgroup=path)
        remove_cgroup(path)
