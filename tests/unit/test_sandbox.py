"""The local servers' sandbox and the gateway's own hardening, piece by piece: who children run
as, the exec shim, file modes, non-dumpable, and the guard's last-resort answer."""

from __future__ import annotations

import json
import os
import pwd
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from mcp_edge.core.seal import generate_key
from mcp_edge.edge.last_resort import LastResort
from mcp_edge.edge.responses import ResponseFinished, ResponseInspector
from mcp_edge.server.cli import main
from mcp_edge.server.config import ConfigError, load_config
from mcp_edge.server.hardening import check_file_modes
from mcp_edge.upstream.stdio import containment, sandbox
from mcp_edge.upstream.stdio.sandbox import (
    Identity,
    Limits,
    Sandbox,
    SandboxError,
    resolve_identity,
)
from tests.support.processes import write_private
from tests.support.sandbox import system_python, unprivileged_python, unprivileged_user

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="switching users needs root (CI runs as root)")
linux = pytest.mark.skipif(sys.platform != "linux", reason="prctl is Linux")


# ---- who children run as ------------------------------------------------------------------


def test_root_runs_children_as_nobody_by_default():
    nobody = pwd.getpwnam("nobody")
    assert resolve_identity(None, None, euid=0, egid=0) == Identity(
        uid=nobody.pw_uid, gid=nobody.pw_gid, name="nobody"
    )
    assert resolve_identity("12345", None, euid=0, egid=0) == Identity(
        uid=12345, gid=12345, name="12345"
    )
    assert resolve_identity("nobody", "0", euid=0, egid=0).gid == 0


def test_an_unknown_user_or_group_is_refused_clearly():
    with pytest.raises(SandboxError, match="no user 'no-such-user' on this host; create it"):
        resolve_identity("no-such-user", None, euid=0, egid=0)
    with pytest.raises(SandboxError, match="no group 'no-such-group'"):
        resolve_identity(None, "no-such-group", euid=0, egid=0)


def test_a_gateway_that_is_not_root_runs_children_as_itself():
    me = pwd.getpwuid(os.getuid())
    assert resolve_identity(None, None, euid=me.pw_uid or 4242, egid=1).switches is False
    with pytest.raises(SandboxError, match="needs the gateway to run as root"):
        resolve_identity("nobody", None, euid=4242, egid=4242)


def test_a_route_naming_a_missing_user_stops_the_gateway_at_start(
    tmp_path: Path, capsys, monkeypatch
):
    monkeypatch.setenv("MCP_EDGE_STATE_KEYS", generate_key())
    if not ROOT:
        pytest.skip("as root only: a gateway that is not root refuses any other user")
    cfg = write_private(
        tmp_path / "c.yaml",
        "auth: {mode: anonymous}\nroutes: [{upstream: {command: [x], user: ghost}}]\n",
    )
    assert main(["check-config", "--config", str(cfg)]) == 2
    assert (
        "routes (default): upstream.user: no user 'ghost' on this host" in capsys.readouterr().err
    )


def test_limits_config_defaults():
    route = load_config(None, env={}, flags={"command": "x"}).routes[0].stdio
    assert route is not None and route.user is None and route.cwd is None
    assert Limits(**route.limits.model_dump()) == Limits()
    assert Limits().memory_bytes == 2 * 1024**3 and Limits().address_space_bytes is None


# ---- the exec shim ---------------------------------------------------------------------------


def _run_in(box: Sandbox, argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    home = box.make_dir()
    try:
        env = box.environment({"PATH": "/usr/bin:/bin"}, home.path, {})
        return subprocess.run(
            box.command(tuple(argv), home.path),
            env=env,
            capture_output=True,
            timeout=30,
            start_new_session=True,
        )
    finally:
        assert sandbox.remove_dir(home)
        assert not os.path.exists(home.path)


@linux
def test_the_shim_sets_limits_no_new_privs_and_the_directory(tmp_path: Path):
    identity = resolve_identity(None, None, euid=os.geteuid(), egid=os.getegid())
    box = Sandbox(
        identity=identity,
        limits=Limits(memory_bytes=1024**3, cpu_seconds=100, open_files=64, processes=300),
    )
    out = _run_in(
        box,
        [
            "sh",
            "-c",
            'cat /proc/self/status /proc/self/limits; echo "cwd=$(pwd) $HOME $TMPDIR"; '
            "touch made-here",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    lines = text.splitlines()
    assert "NoNewPrivs:\t1" in lines
    limits = {line[:26].strip(): line[26:].split()[:2] for line in lines if line.startswith("Max ")}
    assert limits["Max data size"] == [str(1024**3)] * 2
    assert limits["Max open files"] == ["64", "64"] and limits["Max cpu time"] == ["100", "105"]
    cwd, home, tmpdir = lines[-1].removeprefix("cwd=").split()
    assert cwd == home == tmpdir and Path(cwd).name.startswith("mcp-edge-stdio-")
    if ROOT:
        status = dict(
            line.split(":", 1) for line in lines if ":" in line and not line.startswith("Max")
        )
        assert (
            status["Uid"].split()[0] == str(pwd.getpwnam("nobody").pw_uid)
            and status["Groups"].strip() == ""
        )
        assert limits["Max processes"] == ["300", "300"]  # only with a user of the children's own


@linux
def test_the_shim_reports_what_fails_in_one_line():
    box = Sandbox(identity=resolve_identity(None, None, euid=os.geteuid(), egid=os.getegid()))
    home = box.make_dir()
    try:
        out = subprocess.run(
            box.command(("no-such-program-anywhere",), home.path),
            env={"PATH": "/usr/bin"},
            capture_output=True,
            timeout=30,
        )
        assert out.returncode == 127
        assert (
            out.stderr.decode().strip()
            == "mcp-edge sandbox: exec no-such-program-anywhere: No such file or directory"
        )
        out = subprocess.run(
            box.command(("true",), home.path + "/missing"), capture_output=True, timeout=30
        )
        assert out.returncode == 126 and out.stderr.decode().startswith("mcp-edge sandbox: cwd: ")
    finally:
        sandbox.remove_dir(home)


def _own_box(root: Path) -> Sandbox:
    return Sandbox(
        identity=resolve_identity(None, None, euid=os.geteuid(), egid=os.getegid()),
        tmp_root=str(root),
    )


@pytest.fixture
def sticky(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    """A temporary directory like /tmp (sticky, world-writable), and what a link may point at:
    a private file, a directory, and that temporary directory itself."""
    root = tmp_path / "tmp"
    root.mkdir()
    root.chmod(0o1777)
    secret = tmp_path / "file"
    secret.write_text("kept")
    secret.chmod(0o600)
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o755)
    (folder / "inside").write_text("kept")
    return root, {"file": secret, "dir": folder, "tmp_root": root}


def _state(targets: dict[str, Path]) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for name, path in targets.items():
        st = path.lstat()
        inside = path.read_text() if path.is_file() else sorted(p.name for p in path.iterdir())
        out[name] = (stat.filemode(st.st_mode), st.st_uid, inside if name != "tmp_root" else None)
    return out


def test_a_private_directory_swapped_for_a_link_or_another_directory_is_left_alone(sticky):
    """What the child's user can do in a sticky /tmp: rename its directory and leave a link (to
    a file, a directory, the temporary directory itself) or a directory of its own in its place.
    The removal touches none of it, nor any mode."""
    root, targets = sticky
    box = _own_box(root)
    before = _state(targets)
    for target in targets.values():
        home = box.make_dir()
        os.rename(home.path, home.path + "-moved")
        os.symlink(target, home.path)
        assert sandbox.remove_dir(home) is False
        assert os.readlink(home.path) == str(target)
    home = box.make_dir()
    os.rename(home.path, home.path + "-moved")
    os.mkdir(home.path)
    Path(home.path, "theirs").write_text("x")
    assert sandbox.remove_dir(home) is False and Path(home.path, "theirs").exists()
    assert _state(targets) == before


def test_whatever_a_child_leaves_in_its_directory_is_removed_and_nothing_outside(sticky):
    """Directories it locked (mode 0, 0500), links out of it, a tree deeper than the removal keeps
    descriptors open for: all gone, and what the links pointed at unchanged."""
    root, targets = sticky
    before = _state(targets)
    home = _own_box(root).make_dir()
    top = Path(home.path)
    (top / "file").write_text("x")
    for name, mode in (("locked", 0o000), ("read-only", 0o500)):
        (top / name / "sub").mkdir(parents=True)
        (top / name / "sub" / "file").write_text("x")
        (top / name).chmod(mode)
    for name, target in targets.items():
        (top / f"link-{name}").symlink_to(target)
    deep = top
    for _ in range(150):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "file").write_text("x")
    (deep.parent).chmod(0o500)
    assert sandbox.remove_dir(home) is True
    assert not top.exists() and _state(targets) == before


def test_directories_left_by_a_killed_gateway_are_swept(sticky):
    """Only real directories (never a link) with the sweep's name, of a process that is gone, owned
    by the children's user. A link any local user planted with that name reaches nothing."""
    root, targets = sticky
    before = _state(targets)
    dead = subprocess.Popen(["true"])  # a pid that has just exited
    dead.wait()
    box = Sandbox(
        identity=resolve_identity(None, None, euid=os.geteuid(), egid=os.getegid()),
        tmp_root=str(root),
    )
    mine = Path(box.make_dir().path)
    left = root / f"{sandbox.DIR_PREFIX}{dead.pid}-abcdefgh"
    (left / "sub").mkdir(parents=True)
    (left / "sub").chmod(0o500)
    for path in (left, left / "sub"):
        os.chown(path, box.owner, -1)  # the children's user's (nobody's, when the tests are root)
    links = []
    for name, target in targets.items():
        links.append(root / f"{sandbox.DIR_PREFIX}{dead.pid}-{name.replace('_', '')}")
        links[-1].symlink_to(target)
    other = root / "mcp-edge-stdio-notapid"
    other.mkdir()
    sandbox.sweep(box)
    assert mine.exists() and other.exists() and not left.exists()
    assert all(link.is_symlink() for link in links) and _state(targets) == before


@needs_root
def test_the_sweep_leaves_a_directory_of_another_user():
    """As root, private directories belong to the children's user (nobody): one with the sweep's
    name owned by anyone else (root here) is not the gateway's to remove."""
    with tempfile.TemporaryDirectory() as place:
        root = Path(place)
        root.chmod(0o1777)
        dead = subprocess.Popen(["true"])
        dead.wait()
        box = Sandbox(identity=resolve_identity(None, None, euid=0, egid=0), tmp_root=place)
        foreign = root / f"{sandbox.DIR_PREFIX}{dead.pid}-rootsown"
        (foreign / "file").parent.mkdir()
        (foreign / "file").write_text("x")
        theirs = root / f"{sandbox.DIR_PREFIX}{dead.pid}-nobodys1"
        theirs.mkdir()
        os.chown(theirs, box.owner, -1)
        sandbox.sweep(box)
        assert (foreign / "file").exists() and not theirs.exists()


#: As the gateway's own user (not root): a directory swapped for a link to that user's file, and
#: a link planted with the sweep's name; then a directory with locked subdirectories.
_UNPRIVILEGED_REMOVAL = """
import json, os, sys
from pathlib import Path
from mcp_edge.upstream.stdio import containment, sandbox
from mcp_edge.upstream.stdio.sandbox import Sandbox, resolve_identity
root, target, dead = sys.argv[1], sys.argv[2], sys.argv[3]
box = Sandbox(identity=resolve_identity(None, None, euid=os.geteuid(), egid=os.getegid()), tmp_root=root)
home = box.make_dir()
os.rename(home.path, home.path + "-moved")
os.symlink(target, home.path)
swapped = sandbox.remove_dir(home)
os.symlink(target, os.path.join(root, f"{sandbox.DIR_PREFIX}{dead}-planted1"))
sandbox.sweep(box)
home = box.make_dir()
for name, mode in (("locked", 0o000), ("read-only", 0o500)):
    Path(home.path, name, "sub").mkdir(parents=True)
    Path(home.path, name, "sub", "file").write_text("x")
    os.chmod(Path(home.path, name, "sub"), mode)
    os.chmod(Path(home.path, name), mode)
os.chmod(home.path, 0o000)
locked = sandbox.remove_dir(home)
print(json.dumps({"swapped": swapped, "locked": locked, "gone": not os.path.exists(home.path)}))
"""


def test_a_gateway_that_is_not_root_follows_no_link_either(tmp_path: Path):
    """The same as the gateway's user when it is not root (as nobody when the tests are root):
    its own file behind a link, and its own temporary directory, keep their modes; what it
    locked in its own directories it still removes."""
    with tempfile.TemporaryDirectory() as place:  # under /tmp: every user reaches it
        root = Path(place) / "tmp"
        root.mkdir()
        root.chmod(0o1777)
        secret = Path(place) / "file"
        secret.write_text("kept")
        secret.chmod(0o600)
        os.chmod(place, 0o755)
        dead = subprocess.Popen(["true"])
        dead.wait()
        args = (str(root), str(secret), str(dead.pid))
        if ROOT:
            for path in (root, secret):
                os.chown(path, *unprivileged_user())
            argv = unprivileged_python(_UNPRIVILEGED_REMOVAL, *args)
        else:
            argv = [sys.executable, "-c", _UNPRIVILEGED_REMOVAL, *args]
        out = subprocess.run(argv, capture_output=True, timeout=60, cwd="/")
        assert out.returncode == 0, out.stderr.decode()
        assert json.loads(out.stdout) == {"swapped": False, "locked": True, "gone": True}
        assert stat.filemode(secret.stat().st_mode) == "-rw-------" and secret.read_text() == "kept"
        assert stat.filemode(root.stat().st_mode) == "drwxrwxrwt"


@needs_root
def test_an_unreachable_temporary_directory_is_refused(tmp_path: Path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(SandboxError, match="is not reachable by user nobody"):
        sandbox.check_reachable(str(private), resolve_identity(None, None, euid=0, egid=0))


# ---- file modes ---------------------------------------------------------------------------


def _config(tmp_path: Path, text: str, mode: int) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def test_key_files_readable_by_others_are_refused(tmp_path: Path):
    keyfile = tmp_path / "keys"
    keyfile.write_text(generate_key())
    keyfile.chmod(0o644)
    config = load_config(None, env={}, flags={"upstream": "http://127.0.0.1:1/mcp"})
    config.state.key_files = [str(keyfile)]
    with pytest.raises(
        ConfigError,
        match=rf"{keyfile} is readable by every user \(mode -rw-r--r--\).*chmod 600 {keyfile}",
    ):
        check_file_modes(config, None)
    keyfile.chmod(0o640)  # the gateway's own group (Kubernetes' fsGroup): fine
    assert check_file_modes(config, None) == []
    keyfile.chmod(0o600)
    assert check_file_modes(config, None) == []


@needs_root
def test_a_key_file_readable_by_another_group_is_refused(tmp_path: Path):
    keyfile = write_private(tmp_path / "keys", generate_key())
    os.chown(keyfile, 0, pwd.getpwnam("nobody").pw_gid)
    keyfile.chmod(0o640)
    config = load_config(None, env={}, flags={"upstream": "http://127.0.0.1:1/mcp"})
    config.state.key_files = [str(keyfile)]
    with pytest.raises(ConfigError, match="is readable by group"):
        check_file_modes(config, None)


def test_a_readable_config_is_refused_when_it_holds_keys_or_runs_local_servers(tmp_path: Path):
    stdio = "auth: {mode: anonymous}\nroutes: [{upstream: {command: [x]}}]\n"
    path = _config(tmp_path, stdio, 0o644)
    with pytest.raises(
        ConfigError, match="the gateway runs local \\(stdio\\) servers; .*chmod 600"
    ):
        check_file_modes(load_config(path, env={}), path)
    path = _config(
        tmp_path,
        f"state: {{keys: [{generate_key()}]}}\nroutes: [{{upstream: 'http://a/mcp'}}]\n",
        0o604,
    )
    with pytest.raises(ConfigError, match="it holds state keys"):
        check_file_modes(load_config(path, env={}), path)
    path = _config(tmp_path, "routes: [{upstream: 'http://a/mcp'}]\n", 0o644)
    assert check_file_modes(load_config(path, env={}), path) == [
        f"config file {path} is readable by every user (mode -rw-r--r--); consider chmod 600 {path}"
    ]
    path = _config(tmp_path, stdio, 0o600)
    assert check_file_modes(load_config(path, env={}), path) == []


def test_check_config_refuses_a_readable_key_file(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.delenv("MCP_EDGE_STATE_KEYS", raising=False)
    keyfile = tmp_path / "keys"
    keyfile.write_text(generate_key())
    keyfile.chmod(0o644)
    route = "{upstream: 'http://127.0.0.1:1/mcp', era: modern}"
    cfg = write_private(
        tmp_path / "c.yaml", f"state: {{key_files: [{keyfile}]}}\nroutes: [{route}]\n"
    )
    assert main(["check-config", "--config", str(cfg)]) == 2
    assert f"chmod 600 {keyfile}" in capsys.readouterr().err


# ---- non-dumpable ---------------------------------------------------------------------------

#: Prints whether this process is dumpable (PR_GET_DUMPABLE) and still has the key variable.
_REPORT = (
    "import ctypes, json, os; print(json.dumps({'dumpable': ctypes.CDLL(None).prctl(3, 0, 0, 0, 0), "
    "'key': 'MCP_EDGE_STATE_KEYS' in os.environ}), flush=True)"
)


@linux
def test_serve_and_every_worker_are_non_dumpable_and_drop_the_key_variable(tmp_path: Path):
    """The real CLI paths, stopped where uvicorn would start serving."""
    env = {**os.environ, "MCP_EDGE_STATE_KEYS": generate_key()}
    serve = (
        f"import uvicorn; uvicorn.Server.run = lambda self, sockets=None: exec({_REPORT!r}); "
        "from mcp_edge.server.cli import main; "
        "main(['serve', '--upstream', 'http://127.0.0.1:1/mcp', '--anonymous', '--port', '0'])"
    )
    out = subprocess.run([sys.executable, "-c", serve], env=env, capture_output=True, timeout=60)
    assert json.loads(out.stdout.decode().splitlines()[-1]) == {"dumpable": 0, "key": False}, (
        out.stderr
    )
    worker = f"from mcp_edge.server.cli import worker_app; worker_app(); exec({_REPORT!r})"
    env["MCP_EDGE__WORKER_ARGS"] = json.dumps(
        {"config": None, "flags": {"upstream": "http://127.0.0.1:1/mcp", "anonymous": True}}
    )
    out = subprocess.run([sys.executable, "-c", worker], env=env, capture_output=True, timeout=60)
    assert json.loads(out.stdout.decode().splitlines()[-1]) == {"dumpable": 0, "key": False}, (
        out.stderr
    )


@linux
@pytest.mark.parametrize("dumpable", [True, False])
def test_non_dumpable_closes_a_process_to_its_own_user(dumpable: bool):
    """What non-dumpable buys: another process of the same user (nobody, when the tests run as
    root) reads the target's environment and maps only while it is dumpable."""
    python = system_python() if ROOT else sys.executable
    if python is None:
        pytest.skip("no system Python that nobody can run")
    who = (
        {
            "user": "nobody",
            "group": pwd.getpwuid(pwd.getpwnam("nobody").pw_uid).pw_gid,
            "extra_groups": [],
        }
        if ROOT
        else {}
    )
    target = (
        "import ctypes, sys, time\n"
        + ("" if dumpable else "ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n")
        + "print('ready', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [python, "-c", target],
        env={"SECRET": "marker-7f3a"},
        stdout=subprocess.PIPE,
        cwd="/",
        **who,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        reader = (
            "import sys\nfor f in ('environ', 'maps'):\n    try:\n        open(f'/proc/{sys.argv[1]}/' + f, 'rb').read()\n"
            "        print(f, 'read')\n    except OSError as e:\n        print(f, e.strerror)"
        )
        out = subprocess.run(
            [python, "-c", reader, str(proc.pid)], capture_output=True, timeout=30, cwd="/", **who
        )
        expected = "read" if dumpable else "Permission denied"
        assert out.stdout.decode().split("\n")[:2] == [f"environ {expected}", f"maps {expected}"], (
            out
        )
    finally:
        proc.kill()
        proc.wait(timeout=10)


# ---- the last-resort answer -----------------------------------------------------------------


def _inspected(send, request_id):
    """``send`` as the flow middleware hands it on for a 2026-07-28 request (not an MRTR method:
    its answers stream through)."""
    return ResponseInspector(
        send,
        request_id=request_id,
        rpc_method="tools/list",
        mrtr_method=False,
        sealer=None,
        max_inspect_bytes=1 << 20,
        on_violation=lambda kind: None,
    )


#: LastResort's ``send``: the client's (a 2025-era request) or the response inspector's.
SENDS = pytest.mark.parametrize("through", ["plain", "inspector"])


async def _run(app, request_id=7, through="plain"):
    from mcp_edge.edge.context import get_context

    sent: list[dict] = []

    async def send(message):
        sent.append(dict(message))

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    scope: dict = {"type": "http", "headers": []}
    get_context(scope).request_id = request_id
    outer = send if through == "plain" else _inspected(send, request_id)
    await LastResort(app, route="r")(scope, receive, outer)
    return sent


@SENDS
async def test_an_exception_before_the_response_becomes_a_json_rpc_error(through):
    async def broken(scope, receive, send):
        raise RuntimeError("unable to perform operation on <WriteUnixTransport closed=True>")

    sent = await _run(broken, request_id="abc", through=through)
    assert sent[0]["status"] == 500 and (b"content-type", b"application/json") in sent[0]["headers"]
    error = {"code": -32603, "message": "Internal error", "data": {"reason": "internal"}}
    assert json.loads(sent[1]["body"]) == {"jsonrpc": "2.0", "id": "abc", "error": error}


def _streaming(content_type: bytes, chunk: bytes, then: BaseException | None = None):
    """An inner app that starts a 200 answer of ``content_type``, sends ``chunk`` with more to
    come, then raises ``then`` (or returns)."""

    async def app(scope, receive, send):
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", content_type)],
            }
        )
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if then is not None:
            raise then

    return app


@SENDS
async def test_an_exception_mid_stream_ends_the_stream(through):
    broken = _streaming(b"text/event-stream", b"data: {}\n\n", ConnectionResetError())
    sent = await _run(broken, through=through)
    assert [m["type"] for m in sent] == [
        "http.response.start",
        "http.response.body",
        "http.response.body",
    ]
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


@SENDS
async def test_a_failure_of_the_outer_send_is_not_the_inner_apps(through):
    class Stop(Exception):
        pass

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def refusing(message):
        raise Stop

    outer = refusing if through == "plain" else _inspected(refusing, 7)
    scope: dict = {"type": "http", "headers": []}
    with pytest.raises(Stop):
        await LastResort(app, route="r")(scope, None, outer)  # type: ignore[arg-type]


async def test_once_the_inspector_ended_the_response_the_inner_app_is_stopped():
    """The inspector refused the answer (and ended the client's response): the inner app's next
    send raises, and that is not taken for a failure of its own (no second answer)."""
    sent: list[dict] = []

    async def send(message):
        sent.append(dict(message))

    app = _streaming(b"application/x-unknown", b"more")
    inspector = _inspected(send, 7)
    scope: dict = {"type": "http", "headers": []}
    with pytest.raises(ResponseFinished):
        await LastResort(app, route="r")(scope, None, inspector)  # type: ignore[arg-type]
    assert inspector.finished and inspector.send_failed
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


# ---- what a local server started ----------------------------------------------------------


def _stat_line(pid: int, name: str, state: str, ppid: int, start: int) -> str:
    rest = [state, str(ppid), str(pid), str(pid)] + ["0"] * 15 + [str(start), "0"]
    return f"{pid} ({name}) " + " ".join(rest)


def test_a_process_is_read_from_proc_whatever_its_name():
    """A process names itself: spaces and parentheses in the name do not shift the fields."""
    text = _stat_line(42, "a) S 1 (b", "S", 7, 1234)
    assert containment.parse_stat(42, text) == containment.Proc(42, 7, "S", 1234)
    assert containment.parse_stat(42, "42 (x") is None
    assert not containment.Proc(1, 0, "Z", 0).alive and containment.Proc(1, 0, "S", 0).alive


def test_a_server_s_processes_are_all_below_it_and_strays_are_the_gateway_s_adopted():
    me = 100
    procs = [
        (200, me),  # a server the gateway started
        (201, 200),
        (202, 201),  # (in a session of its own: still below it)
        (300, me),  # a stray: adopted when its parent (a double fork) exited
        (301, 300),
        (400, me),  # another server
        (401, 400),
        (500, 1),  # nothing of the gateway's
    ]
    table = {pid: containment.Proc(pid, ppid, "S", pid) for pid, ppid in procs}
    assert containment.below(table, {200, 999}) == {200, 201, 202}
    assert containment.strays(table, me, known={200, 400}) == {300}
    assert containment.below(table, {200, 300}) == {200, 201, 202, 300, 301}


def test_no_child_is_taken_for_a_stray_while_a_server_is_being_started(monkeypatch):
    """The pid of a server being started is not tracked yet: meanwhile no round signals or reaps
    a child of the gateway it does not know (and the rounds go on until it is tracked)."""
    me = os.getpid()
    table = {
        1000: containment.Proc(1000, me, "S", 1),  # a server
        1001: containment.Proc(1001, me, "S", 1),  # the new one, or a stray
    }
    monkeypatch.setattr(containment.CHILDREN, "cgroups", {1000: None})
    monkeypatch.setattr(containment.CHILDREN, "subreaper", True)
    assert containment.targets(1000, None, table) == {1000, 1001}
    monkeypatch.setattr(containment.CHILDREN, "starting", 1)
    assert containment.targets(1000, None, table) == {1000}


#: Started by the tracked child: a process in a session of its own, which prints its pid.
_LEAVER = (
    "import os, sys, time\n"
    "os.setsid()\n"
    "print(os.getpid(), flush=True)\n"
    "os.close(1)\n"
    "time.sleep(60)\n"
)


@linux
def test_tracked_children_are_killed_when_the_interpreter_exits(tmp_path: Path):
    """A gateway leaving any other way than its orderly shutdown still takes its children, and
    what they started: a process in a session of its own below a child that is still there, and
    one whose parent already exited (adopted by the gateway)."""
    code = (
        "import subprocess, sys\n"
        "from mcp_edge.upstream.stdio import containment, sandbox\n"
        "containment.prepare()\n"
        "box = sandbox.Sandbox(tmp_root=sys.argv[1])\n"
        "leaver = [sys.executable, '-c', sys.argv[2]]\n"
        "pids = []\n"
        "for then in ('import time; time.sleep(60)', 'pass'):\n"
        "    p = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys; '\n"
        "        'print(subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE).stdout.readline()'\n"
        "        '.decode().strip(), flush=True); ' + then, *leaver],\n"
        "        stdout=subprocess.PIPE, start_new_session=True)\n"
        "    pids += [p.pid, int(p.stdout.readline())]\n"
        "    sandbox.track(p.pid, box.make_dir())\n"
        "print(*pids, flush=True)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), _LEAVER], capture_output=True, timeout=30
    )
    pids = [int(pid) for pid in out.stdout.split()]
    assert len(pids) == 4, out.stderr

    def running() -> list[int]:  # a killed orphan may linger as a zombie until init reaps it
        alive = []
        for pid in pids:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
            except OSError:
                pass
        return alive

    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not running()
        assert list(tmp_path.iterdir()) == []
    finally:
        for pid in running():
            os.kill(pid, 9)
