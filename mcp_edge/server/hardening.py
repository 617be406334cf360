"""The gateway process's own protection from the programs beside it, local servers included.

A local (stdio) server is third-party code. With the key ring it could forge any state, so the
ring must be nowhere it can read:

- **Non-dumpable** (``prctl(PR_SET_DUMPABLE, 0)``): processes of the same user can no longer read
  this process's ``/proc/<pid>/environ``, ``mem``, ``maps`` or ``fd``, nor ptrace it, and it leaves
  no core dump. The kernel resets the flag at ``exec`` (not at ``fork``): every ``mcp-edge`` process
  sets it as its first act (``mcp_edge.server.entry``), before the gateway is imported, and
  ``--workers`` forks its workers, which are therefore closed from their first instruction and get
  the ring in the memory they are forked with, never in an environment. ``/proc/<pid>/cmdline``
  stays world-readable: nothing secret is ever passed on the command line.
- The key ring's variable leaves ``os.environ`` as soon as the configuration is read, before
  anything is started, so nothing the process starts inherits it. The copy the kernel keeps at
  the top of the initial stack (what ``/proc/<pid>/environ`` shows) cannot be erased:
  non-dumpable is what closes it.
- **Files** (:func:`check_file_modes`): the state key files, and the config file when it holds
  keys or when local servers run, must be readable by the gateway's user alone (or its own group,
  as Kubernetes mounts Secrets for ``fsGroup``): not by every user, another group, a group or
  owner a local server runs as, nor anyone a POSIX ACL names. When local servers run as the
  gateway's own user (a gateway that is not root) they can read every file it can: keys then come
  in the environment only.
- **Other processes** (:func:`check_key_exposure`): before any local server starts, the gateway
  looks for its keys on every process's command line (anyone can read those) and, when local
  servers run as its own user, in the environment of every process of that user it can read
  (what it can read, they can): ``uv run``, a shell wrapper or any parent that keeps the variable.
  Either stops it at start with one line naming the process.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcp_edge.server.prctl import die_with_parent, make_non_dumpable

if TYPE_CHECKING:
    from mcp_edge.server.config import GatewayConfig

__all__ = [
    "check_file_modes",
    "check_key_exposure",
    "die_with_parent",
    "key_holders",
    "make_non_dumpable",
    "scrub_keys_from_environment",
]

KEYS_VARIABLE = "MCP_EDGE_STATE_KEYS"
#: A file's POSIX access ACL (what ``setfacl`` writes).
ACL_XATTR = "system.posix_acl_access"
_ACL_USER, _ACL_GROUP_OBJ, _ACL_GROUP, _ACL_MASK = 0x02, 0x04, 0x08, 0x10
_ACL_READ = 0x04
#: Where the docs say what to do.
_DOCS = "docs/legacy-and-stdio.md, What a local server can reach"


def scrub_keys_from_environment() -> None:
    os.environ.pop(KEYS_VARIABLE, None)


# ---- who local servers run as -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LocalUser:
    """Who the processes of one stdio route run as."""

    route: str
    uid: int
    gid: int
    name: str


def local_users(config: GatewayConfig, uid: int, gid: int) -> list[LocalUser]:
    """Who each stdio route's processes run as, for a gateway running as ``uid``/``gid`` (a route
    whose user cannot be resolved is left out: building the gateway reports it)."""
    from mcp_edge.upstream.stdio.sandbox import SandboxError, resolve_identity

    found = []
    for route in config.routes:
        if route.stdio is None:
            continue
        try:
            who = resolve_identity(route.stdio.user, route.stdio.group, euid=uid, egid=gid)
        except (SandboxError, KeyError):
            continue
        if who.switches:
            found.append(LocalUser(route.name, who.uid, who.gid, who.name))  # type: ignore[arg-type]
        else:
            found.append(LocalUser(route.name, uid, gid, who.name))
    return found


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


# ---- files --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acl:
    """What a POSIX access ACL lets read, beyond the owner and every user (which the mode shows)."""

    users: tuple[int, ...]  # named users that may read
    groups: tuple[int, ...]  # named groups that may read
    owning_group: bool  # the file's own group may read
    #: The entries as ``setfacl`` spells them (for the message), by id.
    spelled: dict[tuple[str, int], str]


def parse_acl(raw: bytes) -> Acl:
    """The ``system.posix_acl_access`` value (version 2: little-endian ``tag u16, perm u16,
    id u32`` entries); ValueError for anything else."""
    if len(raw) < 4 or (len(raw) - 4) % 8 or int.from_bytes(raw[:4], "little") != 2:
        raise ValueError("not a version 2 POSIX ACL")
    entries = [
        (
            int.from_bytes(raw[i : i + 2], "little"),
            int.from_bytes(raw[i + 2 : i + 4], "little"),
            int.from_bytes(raw[i + 4 : i + 8], "little"),
        )
        for i in range(4, len(raw), 8)
    ]
    mask = next((perm for tag, perm, _ in entries if tag == _ACL_MASK), 0o7)

    def reads(perm: int) -> bool:
        return bool(perm & mask & _ACL_READ)

    spelled = {}
    for tag, perm, ident in entries:
        if tag in (_ACL_USER, _ACL_GROUP) and reads(perm):
            kind = "user" if tag == _ACL_USER else "group"
            name = _user_name(ident) if tag == _ACL_USER else _group_name(ident)
            bits = "".join(c if perm & b else "-" for c, b in (("r", 4), ("w", 2), ("x", 1)))
            spelled[(kind, ident)] = f"{kind}:{name}:{bits}"
    return Acl(
        users=tuple(i for t, p, i in entries if t == _ACL_USER and reads(p)),
        groups=tuple(i for t, p, i in entries if t == _ACL_GROUP and reads(p)),
        owning_group=any(t == _ACL_GROUP_OBJ and reads(p) for t, p, _ in entries),
        spelled=spelled,
    )


def _acl(path: str) -> Acl | None:
    """The file's access ACL, or None when it has none (or the file system keeps none)."""
    try:
        raw = os.getxattr(path, ACL_XATTR)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise
    return parse_acl(raw)


def _exposure(path: str, uid: int, gid: int, users: Sequence[LocalUser]) -> tuple[str, str] | None:
    """Who else may read ``path`` and the command that stops it, or None when only the gateway's
    user (and its own group, when no local server runs in it as another user) can."""
    st = os.stat(path)
    mode = stat.filemode(st.st_mode)
    if st.st_mode & stat.S_IROTH:
        return f"readable by every user (mode {mode})", f"chmod 600 {path}"
    # Routes whose processes run as another user (those running as the gateway's own can read
    # whatever it can: check_file_modes deals with them).
    others = [u for u in users if u.uid != uid]
    try:
        acl = _acl(path)
    except ValueError:
        return "guarded by a POSIX ACL the gateway cannot read", f"setfacl -b {path}"
    if acl is not None:
        for user in acl.users:
            if user not in (uid, 0):
                return (
                    f"opened to user {_user_name(user)} by a POSIX ACL "
                    f"({acl.spelled[('user', user)]})",
                    f"setfacl -b {path}",
                )
        for group in acl.groups:
            if group != gid or any(u.gid == group for u in others):
                return (
                    f"opened to group {_group_name(group)} by a POSIX ACL "
                    f"({acl.spelled[('group', group)]})",
                    f"setfacl -b {path}",
                )
    group_reads = acl.owning_group if acl is not None else bool(st.st_mode & stat.S_IRGRP)
    if group_reads:
        name = _group_name(st.st_gid)
        if st.st_gid != gid:
            return f"readable by group {name} (mode {mode})", f"chmod 600 {path}"
        runs_in = [u for u in others if u.gid == st.st_gid]
        if runs_in:
            return (
                f"readable by group {name} (mode {mode}), the group the local servers of route "
                f"{runs_in[0].route} run as",
                f"chmod 600 {path}",
            )
    owners = [u for u in others if u.uid == st.st_uid]
    if owners and st.st_mode & stat.S_IRUSR:
        return (
            f"owned by user {owners[0].name}, whom the local servers of route {owners[0].route} "
            "run as",
            f"chown {_user_name(uid)} {path}",
        )
    return None


def _holds_keys(path: str) -> bool:
    import yaml

    try:
        doc: Any = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return False
    state = doc.get("state") if isinstance(doc, dict) else None
    return isinstance(state, dict) and bool(state.get("keys"))


def _sharing(users: Sequence[LocalUser], uid: int) -> LocalUser | None:
    """The first route whose processes run as the gateway's own user (it is not root)."""
    return next((u for u in users if u.uid == uid and uid != 0), None)


def check_file_modes(
    config: GatewayConfig,
    config_path: str | None,
    *,
    uid: int | None = None,
    gid: int | None = None,
) -> list[str]:
    """Refuse key files, and a config file that holds keys or runs local servers, that anyone but
    the gateway's user can read (or, when local servers run as that user, any key file and a
    config file holding keys); return warnings for anything else worth a line. ``uid``/``gid``:
    the gateway's (default: this process's effective ones)."""
    from mcp_edge.server.config import ConfigError

    uid = os.geteuid() if uid is None else uid
    gid = os.getegid() if gid is None else gid
    users = local_users(config, uid, gid)
    shared = _sharing(users, uid)
    holds_keys = bool(config_path) and _holds_keys(config_path)  # type: ignore[arg-type]
    if shared is not None:
        who = (
            f"the local servers of route {shared.route} run as {shared.name}, the gateway's own "
            "user (it is not root), and can read every file it can"
        )
        fix = f"give the keys in {KEYS_VARIABLE}, to the gateway process alone ({_DOCS})"
        if config.state.key_files:
            raise ConfigError(f"state.key_files: {who}, {config.state.key_files[0]} too: {fix}")
        if holds_keys:
            raise ConfigError(f"config file {config_path} holds state keys and {who}: {fix}")
    for file in config.state.key_files:
        try:
            found = _exposure(file, uid, gid, users)
        except OSError:
            continue  # load_key_ring reports the unreadable file
        if found is not None:
            exposure, fix = found
            raise ConfigError(
                f"state.key_files: {file} is {exposure}; state keys must be readable only by "
                f"the gateway's user: {fix}"
            )
    warnings: list[str] = []
    if config_path:
        try:
            found = _exposure(config_path, uid, gid, users)
        except OSError:
            return warnings
        if found is not None:
            exposure, fix = found
            why = (
                "it holds state keys"
                if holds_keys
                else "the gateway runs local (stdio) servers"
                if users
                else None
            )
            if why is not None:
                raise ConfigError(
                    f"config file {config_path} is {exposure} and {why}; it must be readable only "
                    f"by the gateway's user: {fix}"
                )
            warnings.append(f"config file {config_path} is {exposure}; consider {fix}")
    return warnings


# ---- other processes ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Holder:
    """A process whose environment or command line holds a state key."""

    pid: int
    name: str
    place: str  # "environment" or "command line"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # gone, or closed to this process (another user, non-dumpable)
        return b""


def key_holders(secrets: Sequence[str], *, environments: bool, proc: str = "/proc") -> list[Holder]:
    """Every other process whose command line holds one of ``secrets``, and with
    ``environments`` every other process of this user whose environment does and that this
    process can read, by pid."""
    needles = [s.encode() for s in secrets if s]
    me, uid = os.getpid(), os.geteuid()
    found = []
    try:
        entries = sorted(int(e.name) for e in os.scandir(proc) if e.name.isdigit())
    except OSError:
        return []
    for pid in entries:
        if pid == me:
            continue
        base = f"{proc}/{pid}"
        places = [("command line", "cmdline")]
        if environments:
            try:
                if os.stat(base).st_uid == uid:
                    places.append(("environment", "environ"))
            except OSError:
                continue
        for place, name in places:
            data = _read(f"{base}/{name}")
            if data and any(n in data for n in needles):
                comm = _read(f"{base}/comm").decode("utf-8", "replace").strip() or "?"
                found.append(Holder(pid, comm, place))
                break
    return found


def _ancestors(proc: str) -> list[int]:
    """This process's parent, its parent's parent, ... (bounded)."""
    line: list[int] = []
    pid = os.getppid()
    while pid > 1 and len(line) < 64:
        line.append(pid)
        stat_line = _read(f"{proc}/{pid}/stat")
        try:  # "pid (comm) state ppid ...": comm may hold anything but its last ")"
            pid = int(stat_line[stat_line.rindex(b")") + 2 :].split()[1])
        except (ValueError, IndexError):
            break
    return line


def secret_text(spec: str) -> str:
    """What a key spec (``<secret>`` or ``<kid>:<secret>``) is secret for: its secret part."""
    return spec.strip().split(":", 1)[-1].strip()


def check_key_exposure(config: GatewayConfig, *, proc: str = "/proc") -> None:
    """Before any local server starts: refuse when a process the local servers can read holds a
    state key (see the module's docstring)."""
    from mcp_edge.edge.config import key_specs
    from mcp_edge.server.config import ConfigError

    users = local_users(config, os.geteuid(), os.getegid())
    if not users:
        return
    shared = _sharing(users, os.geteuid())
    secrets = [secret_text(spec) for _, spec in key_specs(config.state)]
    holders = key_holders(secrets, environments=shared is not None, proc=proc)
    if not holders:
        return
    line = _ancestors(proc)  # the nearest of the gateway's own ancestors is named first
    holders.sort(key=lambda h: line.index(h.pid) if h.pid in line else len(line))
    first = holders[0]
    more = f" (and {len(holders) - 1} more process(es))" if len(holders) > 1 else ""
    if first.place == "environment" and shared is not None:
        raise ConfigError(
            f"the key ring is in the environment of process {first.pid} ({first.name}){more}, "
            f"which the local servers of route {shared.route}, running as {shared.name} like the "
            f"gateway, can read: start the gateway itself with {KEYS_VARIABLE} (e.g. "
            f"{KEYS_VARIABLE}=... exec .venv/bin/mcp-edge serve ...), not under uv run or another "
            f"process that keeps it ({_DOCS})"
        )
    raise ConfigError(
        f"the key ring is on the command line of process {first.pid} ({first.name}){more}, which "
        f"every local server can read: give the keys in {KEYS_VARIABLE}, never as an argument "
        f"({_DOCS})"
    )
