"""Where the key ring may not be, piece by piece: files a local server's user or group may read
(modes, POSIX ACLs, any file when it shares the gateway's user), other processes' environments and
command lines, and the ``mcp-edge`` command's first act (non-dumpable, before any import).

The real-process proof (a hostile server reading every process of its user while an unprivileged
gateway starts, serves and respawns workers) is tests/integration/test_stdio_key_ring.py."""

from __future__ import annotations

import errno
import json
import os
import pwd
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mcp_edge.core.seal import generate_key
from mcp_edge.server import hardening
from mcp_edge.server.cli import main
from mcp_edge.server.config import ConfigError, load_config
from mcp_edge.server.hardening import check_file_modes
from tests.conftest import require
from tests.support.processes import write_private

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="running children as another user needs root")
NOBODY = pwd.getpwnam("nobody")
UNDEFINED = 0xFFFFFFFF
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


def acl(
    *named: tuple[int, int, int], owner: int = 6, group: int = 0, mask: int | None = None
) -> bytes:
    """A ``system.posix_acl_access`` value: the owner's, the owning group's and others' entries
    around ``named`` (tag, perm, id) ones, in the order the kernel wants."""
    entries = [(USER_OBJ, owner, UNDEFINED)]
    entries += sorted(e for e in named if e[0] == USER)
    entries.append((GROUP_OBJ, group, UNDEFINED))
    entries += sorted(e for e in named if e[0] == GROUP)
    if named or mask is not None:
        entries.append((MASK, 7 if mask is None else mask, UNDEFINED))
    entries.append((OTHER, 0, UNDEFINED))
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)


def set_acl(path: Path, value: bytes) -> None:
    try:
        os.setxattr(path, "system.posix_acl_access", value)
    except OSError as exc:
        require(exc.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP), f"no POSIX ACLs on {path}")
        raise


def http_config(**state: object):
    config = load_config(None, env={}, flags={"upstream": "http://127.0.0.1:1/mcp"})
    for name, value in state.items():
        setattr(config.state, name, value)
    return config


def stdio_config(tmp_path: Path, upstream: str, extra: str = "") -> tuple:
    text = f"auth: {{mode: anonymous}}\n{extra}routes: [{{name: local, upstream: {upstream}}}]\n"
    path = write_private(tmp_path / "gateway.yaml", text)
    return load_config(str(path), env={}), str(path)


# ---- POSIX ACLs -----------------------------------------------------------------------------


def test_an_acl_is_read_as_the_kernel_applies_it():
    parsed = hardening.parse_acl(acl((USER, 4, 1001), (USER, 6, 1002), (GROUP, 4, 2001), mask=2))
    assert parsed.users == () and parsed.groups == ()  # the mask takes read from every one
    parsed = hardening.parse_acl(acl((USER, 4, 1001), (USER, 2, 1002), (GROUP, 5, 2001), group=4))
    assert parsed.users == (1001,) and parsed.groups == (2001,) and parsed.owning_group
    for bad in (b"", b"\x01\x00\x00\x00", acl()[:-3]):
        with pytest.raises(ValueError):
            hardening.parse_acl(bad)


def test_a_key_file_opened_by_an_acl_is_refused_like_a_world_readable_one(tmp_path: Path):
    """Mode 600, but an ACL lets another user (or group) read it: refused, naming the entry and
    the fix (its mode alone looks fine: group bits r, group its own)."""
    keyfile = write_private(tmp_path / "keys", generate_key())
    config = http_config(key_files=[str(keyfile)])
    set_acl(keyfile, acl((USER, 4, NOBODY.pw_uid)))
    with pytest.raises(ConfigError) as refused:
        check_file_modes(config, None)
    assert str(refused.value) == (
        f"state.key_files: {keyfile} is opened to user nobody by a POSIX ACL (user:nobody:r--); "
        f"state keys must be readable only by the gateway's user: setfacl -b {keyfile}"
    )
    set_acl(keyfile, acl((GROUP, 4, NOBODY.pw_gid)))
    with pytest.raises(ConfigError, match=r"opened to group \S+ by a POSIX ACL \(group:\S+:r--\)"):
        check_file_modes(config, None)
    set_acl(keyfile, acl((USER, 4, NOBODY.pw_uid), mask=0))  # masked: reads nothing
    assert check_file_modes(config, None) == []
    set_acl(keyfile, acl((USER, 6, os.geteuid())))  # the gateway's own user
    assert check_file_modes(config, None) == []


def test_a_config_holding_keys_opened_by_an_acl_is_refused(tmp_path: Path, capsys):
    path = write_private(
        tmp_path / "c.yaml",
        f"state: {{keys: [{generate_key()}]}}\nroutes: [{{upstream: 'http://a/mcp', era: modern}}]\n"
        "auth: {mode: anonymous}\n",
    )
    set_acl(path, acl((USER, 4, NOBODY.pw_uid)))
    assert main(["check-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"mcp-edge: configuration error: config file {path} is opened to user nobody by a POSIX "
        f"ACL (user:nobody:r--) and it holds state keys; it must be readable only by the "
        f"gateway's user: setfacl -b {path}"
    ]


# ---- the group and user local servers run as (a root gateway) -----------------------------


@needs_root
def test_a_key_file_readable_by_the_group_a_local_server_runs_in_is_refused(tmp_path: Path):
    """The gateway's own group may read a key file (Kubernetes' fsGroup), unless a local server
    runs in it; and a file a local server's user owns is refused too."""
    keyfile = write_private(tmp_path / "keys", generate_key())
    os.chown(keyfile, 0, os.getegid())
    keyfile.chmod(0o640)
    state = f"state: {{key_files: [{keyfile}]}}\n"
    config, _ = stdio_config(tmp_path, "{command: [x], user: nobody}", state)
    assert check_file_modes(config, None) == []  # its own group; the server runs in nogroup
    config, _ = stdio_config(
        tmp_path, f"{{command: [x], user: nobody, group: '{os.getegid()}'}}", state
    )
    with pytest.raises(
        ConfigError, match=r"the group the local servers of route local run as; .*chmod 600"
    ):
        check_file_modes(config, None)
    keyfile.chmod(0o600)
    os.chown(keyfile, NOBODY.pw_uid, os.getegid())
    config, _ = stdio_config(tmp_path, "{command: [x], user: nobody}", state)
    with pytest.raises(
        ConfigError, match="owned by user nobody, whom the local servers of route local run as"
    ):
        check_file_modes(config, None)


# ---- local servers that share the gateway's user (a gateway that is not root) ---------------


def test_sharing_the_gateways_user_no_key_file_and_no_keys_in_the_config(tmp_path: Path):
    """They can read every file the gateway can: a key file, or a config holding keys, is
    refused whatever its mode; a config without keys in the gateway's own group is fine
    (Kubernetes' sidecar-stdio)."""
    me = {"uid": 4242, "gid": 4242}  # a gateway that is not root
    keyfile = write_private(tmp_path / "keys", generate_key())
    config, _ = stdio_config(tmp_path, "{command: [x]}", f"state: {{key_files: [{keyfile}]}}\n")
    with pytest.raises(ConfigError) as refused:
        check_file_modes(config, None, **me)
    assert str(refused.value) == (
        "state.key_files: the local servers of route local run as 4242, the gateway's own user "
        f"(it is not root), and can read every file it can, {keyfile} too: give the keys in "
        "MCP_EDGE_STATE_KEYS, to the gateway process alone (docs/legacy-and-stdio.md, What a "
        "local server can reach)"
    )
    config, path = stdio_config(
        tmp_path, "{command: [x]}", f"state: {{keys: [{generate_key()}]}}\n"
    )
    with pytest.raises(
        ConfigError, match=f"config file {path} holds state keys and the local servers"
    ):
        check_file_modes(config, path, **me)
    config, path = stdio_config(tmp_path, "{command: [x]}")
    os.chmod(path, 0o640)  # its group: the gateway's own (the server's too, as its user's)
    assert check_file_modes(config, path, uid=4242, gid=os.getegid()) == []
    # Without local servers, a key file is fine.
    assert check_file_modes(http_config(key_files=[str(keyfile)]), None, **me) == []


# ---- other processes ------------------------------------------------------------------------


def fake_proc(tmp_path: Path, processes: dict[int, tuple[str, bytes, bytes]]) -> str:
    """A /proc with pid -> (comm, cmdline, environ)."""
    for pid, (comm, cmdline, environ) in processes.items():
        d = tmp_path / "proc" / str(pid)
        d.mkdir(parents=True)
        (d / "comm").write_text(comm + "\n")
        (d / "cmdline").write_bytes(cmdline)
        (d / "environ").write_bytes(environ)
        (d / "stat").write_text(f"{pid} ({comm}) S 1 0 0\n")
    return str(tmp_path / "proc")


def test_key_holders_read_command_lines_and_environments(tmp_path: Path):
    key = generate_key()
    proc = fake_proc(
        tmp_path,
        {
            10: (
                "uv",
                b"uv\0run\0mcp-edge\0",
                b"HOME=/x\0MCP_EDGE_STATE_KEYS=kid:" + key.encode() + b"\0",
            ),
            11: ("sudo", b"sudo\0K=" + key.encode() + b"\0", b""),
            12: ("bash", b"bash\0", b"SOMETHING=else\0"),
            os.getpid(): ("python", b"python\0", key.encode()),  # itself: never
        },
    )
    holders = hardening.key_holders([key], environments=True, proc=proc)
    assert [(h.pid, h.name, h.place) for h in holders] == [
        (10, "uv", "environment"),
        (11, "sudo", "command line"),
    ]
    assert [h.pid for h in hardening.key_holders([key], environments=False, proc=proc)] == [11]
    assert hardening.key_holders([generate_key()], environments=True, proc=proc) == []


def test_key_exposure_is_refused_only_when_local_servers_run(tmp_path: Path):
    key = generate_key()
    proc = fake_proc(
        tmp_path, {10: ("sudo", b"sudo\0MCP_EDGE_STATE_KEYS=" + key.encode() + b"\0", b"")}
    )
    hardening.check_key_exposure(
        http_config(keys=[key]), proc=proc
    )  # no local server: nothing to fear
    config, _ = stdio_config(tmp_path, "{command: [x]}", f"state: {{keys: ['k1:{key}']}}\n")
    with pytest.raises(ConfigError) as refused:
        hardening.check_key_exposure(config, proc=proc)
    assert str(refused.value).startswith(
        "the key ring is on the command line of process 10 (sudo), which every local server can read"
    )
    assert key not in str(refused.value)


# ---- the command's first act ----------------------------------------------------------------

#: Records, for each module imported, whether the process was still dumpable (PR_GET_DUMPABLE).
_RECORDER = """
import ctypes, json, sys
libc = ctypes.CDLL(None)
seen = []
class Recorder:
    def find_spec(self, name, path=None, target=None):
        seen.append((name, libc.prctl(3, 0, 0, 0, 0)))
sys.meta_path.insert(0, Recorder())
sys.argv = ["mcp-edge", "keys", "generate"]
from mcp_edge.server.entry import main
main()
print(json.dumps(seen))
"""


@pytest.mark.skipif(sys.platform != "linux", reason="prctl is Linux")
def test_the_command_is_non_dumpable_before_it_imports_the_gateway():
    out = subprocess.run(
        [sys.executable, "-c", _RECORDER], capture_output=True, timeout=60, check=True
    )
    seen = json.loads(out.stdout.decode().splitlines()[-1])
    open_to_its_user = [name for name, dumpable in seen if dumpable]
    assert (
        "mcp_edge.server.prctl" in open_to_its_user
        and "mcp_edge.server.cli" not in open_to_its_user
    )
    # Only the entry point and what setting the flag takes come first.
    assert {n for n in open_to_its_user if n.startswith("mcp_edge")} == {
        "mcp_edge",
        "mcp_edge.version",
        "mcp_edge.server",
        "mcp_edge.server.entry",
        "mcp_edge.server.prctl",
    }
    assert not {"pydantic", "yaml", "uvicorn", "asyncio", "argparse"} & set(open_to_its_user)
