"""Local (stdio) servers run third-party code: they cannot reach the key ring, their crashes
never cost a caller a JSON-RPC answer, and nothing they start outlives the gateway.

Real parts: a hostile server written with the published SDK (tests/servers/sandbox_probe.py,
FastMCP from ``mcp==1.30.0``), the published Node everything server started by ``npx`` through
``sh``, real gateway processes. Run as root (as CI does), the gateway runs its children as
``nobody``: every assertion applies. Run as another user, the children share the gateway's user
and can read its files, so the user and file assertions are left out (CI runs as root, where
they always apply); non-dumpable still closes the gateway's memory and environment to them, and
that part is asserted either way.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.core.seal import generate_key
from tests.conftest import Running, require, start_gateway
from tests.integration.test_stdio_upstream import everything_launcher, wait_ready
from tests.support.processes import write_private
from tests.support.sandbox import (
    gateway_is_root,
    nobody_uid,
    public_everything,
    stdio_server_command,
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
