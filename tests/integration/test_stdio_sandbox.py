"""Local (stdio) servers run third-party code: they cannot reach the key ring, their crashes
never cost a caller a JSON-RPC answer, and nothing they start outlives the gateway.

Real parts: a hostile server written with the published SDK (tests/servers/sandbox_probe.py,
FastMCP from ``mcp==1.30.0``), the published Node everything server started by ``npx`` through
``sh``, real gateway processes. Run as root (as CI does), the gateway runs its children as
``nobody``: every assertion applies. Run as another user, the children share the gateway's user
and can read its files, so the user and file assertions are left out (CI runs as root, where
they always apply); non-dumpable still closes the gateway's memory and environment to them, and
that part is asserted either way.

What a server does to its directory and what it leaves running is tried on two gateways: one
running as root (children as ``nobody``), one that is not root (run as ``nobody`` when the tests
run as root; children as itself).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.conftest import Running, require, start_gateway
from tests.integration.test_stdio_upstream import everything_launcher, wait_ready
from tests.support.processes import free_port, serving, write_private
from tests.support.sandbox import (
    gateway_is_root,
    nobody_uid,
    public_everything,
    stdio_server_command,
    unprivileged_gateway,
    unprivileged_user,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODERN = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


def probe_server() -> list[str]:
    return stdio_server_command("sandbox_probe.py")


def root_parts() -> bool:
    """Whether the user and file assertions apply: only a root gateway can switch users (CI runs
    as root, so there they always do; elsewhere they are left out, even under REQUIRE_ALL=1)."""
    return gateway_is_root()


def _request(request_id: Any, name: str, arguments: dict | None) -> dict:
    params = {
        "name": name,
        "arguments": arguments or {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    }
    headers = {
        "Accept": ACCEPT,
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return {
        "headers": headers,
        "json": {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params},
    }


def _answer(r: httpx.Response) -> dict:
    return {
        "status": r.status_code,
        "type": r.headers.get("content-type", ""),
        "body": r.text[:300],
        "message": _message(r),
    }


def call(url: str, request_id: Any, name: str, arguments: dict | None = None) -> dict:
    """One tools/call: its status and final JSON-RPC message (None if the answer is not one)."""
    return _answer(httpx.post(url, timeout=60, **_request(request_id, name, arguments)))


def _message(r: httpx.Response) -> dict | None:
    """The response's final JSON-RPC message, or None when it is not JSON-RPC at all."""
    try:
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            events = [
                json.loads(line[5:])
                for line in r.text.splitlines()
                if line.startswith("data:") and line[5:].strip()
            ]
            return next(e for e in reversed(events) if "result" in e or "error" in e)
        doc = r.json()
    except (ValueError, StopIteration):
        return None
    return doc if isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" else None


# ---- what a local server can reach --------------------------------------------------------


def test_a_local_server_cannot_reach_the_key_ring(module_tmp: Path, state_key: str):
    """The probe reads everything it can of the gateway (environment, memory, maps, ptrace) and
    of its config and key files; it gets none of it, and runs boxed in."""
    file_key = generate_key()
    keyfile = write_private(module_tmp / "state-keys", file_key + "\n")
    with ExitStack() as stack:
        routes = [{"name": "probe", "path": "/mcp", "upstream": {"command": probe_server()}}]
        gw = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={
                "auth": {"mode": "anonymous"},
                "state": {"key_files": [str(keyfile)]},
                "routes": routes,
            },
        )
        wait_ready(gw)
        config_path = next(a for a in gw.process.argv if a.endswith(".yaml"))
        pid = gw.process.pid
        answer = call(
            gw.url,
            1,
            "probe",
            {"paths": [config_path, str(keyfile)], "marker": state_key, "gateway_pid": pid},
        )
        report = json.loads(answer["message"]["result"]["content"][0]["text"])
        again = call(
            gw.url, 2, "probe", {"paths": [str(keyfile)], "marker": file_key, "gateway_pid": pid}
        )
        again = json.loads(again["message"]["result"]["content"][0]["text"])
        # Stopped as an operator would, with the time a loaded machine may need: a gateway that
        # ends by itself (its drain done, the SIGTERM raised again; not SIGKILLed) has removed
        # its children's directories.
        code = gw.process.stop(grace=60.0)
        assert code == -signal.SIGTERM, (code, gw.process.log_tail())

    assert list(report["ancestors"]) == [str(gw.process.pid)]  # its parent is the gateway itself
    gateway = report["ancestors"][str(gw.process.pid)]
    for what in ("environ", "maps", "mem", "ptrace"):
        assert not gateway[what]["ok"], (what, gateway[what])
    # Nothing it could read holds either key (the command line is public: nothing secret is ever
    # on it).
    for found in (report, again):
        for pid, attempts in found["ancestors"].items():
            assert not any(a.get("marker") for a in attempts.values()), (pid, attempts)
        assert not any(a.get("marker") for a in found["files"].values()), found["files"]
    assert not [k for k in report["environ_keys"] if k.startswith("MCP_EDGE")]
    # Boxed in: no_new_privs, its own session, its own directory (gone with it), the limits.
    assert report["no_new_privs"] == "1" and report["session_leader"] and report["pgid_is_pid"]
    assert report["cwd"] == report["home"] == report["tmpdir"]
    assert (
        Path(report["cwd"]).name.startswith("mcp-edge-stdio-") and not Path(report["cwd"]).exists()
    )
    assert report["limits"]["RLIMIT_DATA"] == [2 * 1024**3] * 2
    assert report["limits"]["RLIMIT_NOFILE"] == [1024, 1024]
    if root_parts():
        assert report["uid"] == report["euid"] == nobody_uid() and report["groups"] == []
        assert report["limits"]["RLIMIT_NPROC"] == [1024, 1024]
        for path, attempt in {**report["files"], **again["files"]}.items():
            assert not attempt["ok"] and attempt["error"] == "Permission denied", (path, attempt)


# ---- crashes ------------------------------------------------------------------------------


def test_every_answer_is_json_rpc_while_a_server_keeps_crashing(module_tmp: Path, state_key: str):
    """51 crash cycles (exits mid-call; exits right after an answer; loses its stdin, then exits)
    with calls hammering the process as it dies and restarts: every answer is a JSON-RPC message
    with its request's id, and none is the gateway's last-resort internal error (the stdio session
    itself reports a dead process)."""
    with ExitStack() as stack:
        routes = [
            {
                "name": "probe",
                "path": "/mcp",
                "upstream": {"command": probe_server(), "restart_backoff_max": 0.1},
            }
        ]
        gw = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={"auth": {"mode": "anonymous"}, "routes": routes},
        )
        wait_ready(gw)
        answers = asyncio.run(_crash_cycles(gw, cycles=51))
        tail = gw.process.log_tail(20000)
    bad = [a for a in answers if a["message"] is None or a["message"].get("id") != a["id"]]
    assert not bad, bad[:5]
    reasons = {(a["message"].get("error") or {}).get("data", {}).get("reason") for a in answers}
    assert "internal" not in reasons, [a for a in answers if "error" in a["message"]][:5]
    assert "request failed inside the gateway" not in tail
    # Both kinds of answer came: calls the dying process took with it, and calls that ran.
    assert [a for a in answers if "result" in a["message"]] and [
        a for a in answers if a["status"] == 502
    ], reasons


async def _crash_cycles(gw: Running, cycles: int) -> list[dict]:
    answers: list[dict] = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=32)) as http:

        async def one(request_id: str, name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            args = {"text": request_id} if name == "echo" else {}
            answers.append(
                {
                    **_answer(await http.post(gw.url, **_request(request_id, name, args))),
                    "id": request_id,
                }
            )

        for cycle in range(cycles):
            killer = ("crash", "answer_then_exit", "lose_stdin")[cycle % 3]
            calls = [one(f"{cycle}-{killer}", killer, 0)]
            calls += [one(f"{cycle}-echo-{i}", "echo", i * 0.005) for i in range(8)]
            await asyncio.gather(*calls)
    return answers


# ---- nothing outlives the gateway -----------------------------------------------------------


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (process group, parent, start time) of every process now."""
    out: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[2]), int(fields[1]), fields[19])
    return out


def _tree(root: int) -> dict[int, str]:
    """``root`` and every process in its process group or below it: pid -> start time."""
    procs = _processes()
    found = {pid for pid, (pgid, _, _) in procs.items() if pgid == root} | {root}
    grew = True
    while grew:
        more = {pid for pid, (_, ppid, _) in procs.items() if ppid in found} - found
        found |= more
        grew = bool(more)
    return {pid: procs[pid][2] for pid in found if pid in procs}


def _alive(tree: dict[int, str]) -> dict[int, str]:
    procs = _processes()
    return {pid: start for pid, start in tree.items() if pid in procs and procs[pid][2] == start}


def _wait_gone(tree: dict[int, str], timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (left := _alive(tree)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _kill(tree: dict[int, str]) -> None:
    for pid in _alive(tree):
        with suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _npx_through_sh() -> list[str]:
    """``sh`` starts a grandchild that ignores stdin (sleep), then becomes ``npx`` running the
    published everything server (npx starts a shell, which starts node)."""
    require(shutil.which("npx") is not None, "npx (Debian's npm) is needed")
    launcher = everything_launcher()
    require(
        launcher is not None,
        "the Node everything server needs npm (scripts/install-stdio-servers.sh)",
    )
    _, prefix = public_everything(launcher)
    return [
        "sh",
        "-c",
        'sleep 600 & exec npx --prefix "$0" --offline mcp-server-everything stdio',
        prefix,
    ]


def test_sigterm_leaves_no_process_of_a_local_server(module_tmp: Path, state_key: str):
    with ExitStack() as stack:
        routes = [{"name": "npx", "path": "/mcp", "upstream": {"command": _npx_through_sh()}}]
        gw = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={"auth": {"mode": "anonymous"}, "routes": routes},
        )
        child = wait_ready(gw)["routes"]["npx"]["processes"][0]["pid"]
        assert (
            call(gw.url, 1, "echo", {"message": "hi"})["message"]["result"]["content"][0]["text"]
            == "Echo: hi"
        )
        tree = _tree(child)
        try:
            names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in tree}
            assert {"sleep", "node"} <= names and len(tree) >= 4, names  # npm, sleep, sh, node
            gw.process.popen.send_signal(signal.SIGTERM)
            gw.process.popen.wait(timeout=60)
            left = _wait_gone(tree, timeout=10)
            assert not left, {pid: Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left}
        finally:
            _kill(tree)


def test_a_killed_gateway_takes_its_direct_child_with_it(module_tmp: Path, state_key: str):
    """The backstop when the gateway cannot close anything (SIGKILL): the child it started gets
    the parent-death signal. (What that child started is the process group's; with the gateway
    gone nobody signals it, and it ends when its stdin closes: docs/legacy-and-stdio.md, "What a
    local server can reach".)"""
    with ExitStack() as stack:
        command = ["sh", "-c", "sleep 600 & wait"]  # never answers, never reads stdin
        routes = [{"name": "stuck", "path": "/mcp", "upstream": {"command": command}}]
        gw = start_gateway(
            stack,
            module_tmp,
            keys=state_key,
            config={"auth": {"mode": "anonymous"}, "routes": routes},
        )
        deadline = time.monotonic() + 30
        child = None
        while child is None and time.monotonic() < deadline:
            child = httpx.get(gw.base + "/readyz", timeout=5).json()["routes"]["stuck"][
                "processes"
            ][0]["pid"]
            time.sleep(0.1)
        assert child is not None
        tree = _tree(child)
        while len(tree) < 2 and time.monotonic() < deadline:  # sh and its sleep
            time.sleep(0.1)
            tree = _tree(child)
        try:
            gw.process.popen.send_signal(signal.SIGKILL)
            gw.process.popen.wait(timeout=30)
            sh = {child: tree[child]}
            assert not _wait_gone(sh, timeout=10), "the direct child outlived a SIGKILLed gateway"
        finally:
            _kill(tree)


# ---- a hostile server: its directory swapped for a link, processes that leave its tree ---------


@dataclass
class Hostile:
    gw: Running
    #: What a link may point at: a file and a directory of the gateway's user, and the gateway's
    #: TMPDIR (where private directories are made: sticky and world-writable, as /tmp is; a
    #: directory's owner may rename it there).
    targets: dict[str, Path]


def _text(message: dict) -> str:
    return message["result"]["content"][0]["text"]


def _pids(gw: Running) -> set[int] | None:
    """The pids of the route's processes, once all are ready (else None)."""
    processes = httpx.get(gw.base + "/readyz", timeout=5).json()["routes"]["probe"]["processes"]
    if any(p["state"] != "ready" or p["pid"] is None for p in processes):
        return None
    return {p["pid"] for p in processes}


def _wait_restarted(gw: Running, old: set[int], count: int, timeout: float = 60) -> None:
    """Until ``count`` of the ``old`` processes are replaced and every process is ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _pids(gw)
        if now is not None and len(old - now) >= count:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the local servers were not restarted\n{gw.process.log_tail()}")


def _wait_all_ready(gw: Running, timeout: float = 60) -> set[int]:
    deadline = time.monotonic() + timeout
    while (now := _pids(gw)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert now is not None, gw.process.log_tail()
    return now


def _state(targets: dict[str, Path]) -> dict[str, tuple]:
    """Mode and owner of each target; a file's content, a directory's entries (but tmp_root's,
    where the server leaves what it moved)."""
    out: dict[str, tuple] = {}
    for name, path in targets.items():
        st = path.lstat()
        if stat.S_ISREG(st.st_mode):
            inside: Any = path.read_text()
        else:
            inside = sorted(os.listdir(path)) if name != "tmp_root" else None
        out[name] = (stat.filemode(st.st_mode), st.st_uid, st.st_gid, inside)
    return out


def _start_unprivileged(
    stack: ExitStack, place: Path, logs: Path, config: dict, keys: str, env: dict[str, str]
) -> Running:
    """This checkout's gateway as ``nobody``, its config readable by it alone."""
    uid, gid = unprivileged_user()
    home = place / "gateway"
    home.mkdir(mode=0o700)
    os.chown(home, uid, gid)
    port = free_port()
    path = write_private(home / "gateway.yaml", json.dumps(config))
    os.chown(path, uid, gid)
    argv = unprivileged_gateway("serve", "--port", str(port), "--config", str(path))
    process = stack.enter_context(
        serving(
            f"gateway-{port}",
            argv,
            port=port,
            log_path=logs / f"gateway-{port}.log",
            env={"MCP_EDGE_STATE_KEYS": keys, **env},
        )
    )
    return Running(url=f"http://127.0.0.1:{port}/mcp", port=port, process=process)


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def hostile(request: pytest.FixtureRequest, module_tmp: Path, state_key: str) -> Iterator[Hostile]:
    """A gateway running the hostile server in three processes: as root (children as nobody),
    or not root (as nobody when the tests are root; children as itself)."""
    as_root = request.param == "root"
    if as_root and not gateway_is_root():
        pytest.skip("a root gateway needs the tests to run as root (CI does)")
    switch = not as_root and gateway_is_root()
    # Under /tmp, where every user can reach it (pytest's own directories are its user's alone).
    place = Path(tempfile.mkdtemp(prefix="mcp-edge-hostile-", dir="/tmp"))
    try:
        os.chmod(place, 0o755)
        tmp_root = place / "tmp"
        tmp_root.mkdir()
        os.chmod(tmp_root, 0o1777)
        owned = place / "targets"
        owned.mkdir(mode=0o755)
        secret = owned / "file"
        secret.write_text("kept as it is")
        secret.chmod(0o600)
        folder = owned / "dir"
        folder.mkdir(mode=0o755)
        (folder / "inside").write_text("kept")
        if switch:  # the gateway's user's own (its TMPDIR too: what it could change by mistake)
            for path in (tmp_root, secret, folder, folder / "inside"):
                os.chown(path, *unprivileged_user())
        upstream = {
            "command": probe_server(),
            "instances": 3,
            "restart_backoff_max": 0.1,
            "stop_grace_seconds": 2,
        }
        config = {
            "auth": {"mode": "anonymous"},
            "routes": [{"name": "probe", "path": "/mcp", "upstream": upstream}],
        }
        env = {"TMPDIR": str(tmp_root)}
        with ExitStack() as stack:
            if switch:
                gw = _start_unprivileged(stack, place, module_tmp, config, state_key, env)
            else:
                gw = start_gateway(stack, module_tmp, keys=state_key, config=config, env=env)
            _wait_all_ready(gw)
            yield Hostile(gw=gw, targets={"file": secret, "dir": folder, "tmp_root": tmp_root})
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_server_swapping_its_directory_for_a_link_changes_nothing_outside_it(hostile: Hostile):
    """Three processes each rename their directory and leave a link in its place: to a file, a
    directory, and the temporary directory itself. The gateway removes none of them, and changes
    none of their modes."""
    before = _state(hostile.targets)
    gw = hostile.gw
    old = _wait_all_ready(gw)
    exit_file = hostile.targets["tmp_root"] / f"swapped-{secrets.token_hex(4)}"
    homes: dict[str, str] = {}
    for attempt in range(12):  # calls go round the processes: each swaps once
        name, target = next((n, t) for n, t in hostile.targets.items() if n not in homes)
        args = {"target": str(target), "exit_when": str(exit_file)}
        text = _text(call(gw.url, f"swap-{attempt}", "swap_dir", args)["message"])
        if text != "already swapped":
            homes[name] = text
        if len(homes) == 3:
            break
    assert len(set(homes.values())) == 3, homes
    assert {os.readlink(h) for h in homes.values()} == set(map(str, hostile.targets.values()))
    exit_file.touch()
    _wait_restarted(gw, old, count=3)
    assert _state(hostile.targets) == before
    assert "its private directory was replaced" in gw.process.log_tail(20000)


def _marked(marker: str) -> dict[int, str]:
    """Live processes with ``marker`` on their command line (pid -> command line)."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat_text = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and stat_text[stat_text.rindex(")") + 2] != "Z":
            found[int(entry)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[-120:]
    return found


def _wait_none(marker: str, timeout: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while (left := _marked(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_nothing_a_server_starts_outlives_its_restart_or_the_gateway(hostile: Hostile):
    """Processes that leave the server's session and tree (one ignoring SIGTERM, one forking a
    successor on each SIGTERM) end when the server is restarted, and when the gateway is stopped
    with SIGTERM. (This test stops its module's gateway: it runs last.)"""
    marker = f"escapee-{secrets.token_hex(6)}"
    kinds = ["plain", "deaf", "forker"]
    gw = hostile.gw
    try:
        old = _wait_all_ready(gw)
        signal_file = (
            hostile.targets["tmp_root"] / f"{marker}-exit"
        )  # the server exits when it appears
        args = {"marker": marker, "kinds": kinds, "exit_when": str(signal_file)}
        escaped = json.loads(_text(call(gw.url, "escape-1", "escape", args)["message"]))
        assert set(escaped) == set(_marked(marker)), escaped
        signal_file.touch()
        _wait_restarted(gw, old, count=1)
        left = _wait_none(marker, timeout=15)
        assert not left, f"outlived the server's restart: {left}"

        args = {"marker": marker, "kinds": kinds}
        escaped = json.loads(_text(call(gw.url, "escape-2", "escape", args)["message"]))
        assert set(escaped) == set(_marked(marker)), escaped
        gw.process.popen.send_signal(signal.SIGTERM)
        gw.process.popen.wait(timeout=60)
        left = _wait_none(marker, timeout=15)
        assert not left, f"outlived the gateway: {left}"
    finally:
        for pid in _marked(marker):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
