"""What per-user consent (``upstream_auth.oauth``) adds to a call that has its grant: the consent
layer's own work, alone, in one process (no sockets, no gateway around it): a small
``tools/call`` through ``ConsentLayer`` to an inner app that answers at once, against the same
call straight to that app, alternating, best of the repeats.

Grant stores: the process's memory (one replica), and Redis (``store.type: redis``, what several
replicas share) when ``redis-server`` is on the machine, read on every call (``consent.
local_seconds: 0``: one ``GET`` of the sealed grant, opened with the key ring) and with the
default window (5 s: the grant kept in memory, the store read once). The access token is
valid for an hour (no renewal in the measured window), its last use written back at most once
an hour (none in the window).

    uv run python -m bench.consent [--calls 5000] [--repeats 7]

Writes ``bench/results/consent.json`` and ``consent.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from bench.report import spread, tree_info, write_report
from mcp_edge.auth.base import Principal
from mcp_edge.core.flow import Flow, FlowRules
from mcp_edge.core.jsonrpc import Message
from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.identity.config import OAuthConfig
from mcp_edge.identity.consent import ConsentLayer, ConsentMember
from mcp_edge.identity.consent_config import ConsentSection
from mcp_edge.identity.consent_wiring import ConsentMetrics
from mcp_edge.identity.grants import Grant, GrantBook
from mcp_edge.identity.vault import MemoryBackend, RedisBackend, SecretVault
from mcp_edge.store import MemoryStore

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RING = KeyRing([StateKey.from_secret(b"\x05" * 32)])
ALICE = Principal(id='["jwt-sub","https://idp.bench","alice"]', display="alice")
ANSWER = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": False}})


async def inner(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": ANSWER})


async def _receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def _send(message: Any) -> None:
    pass


def scope() -> dict[str, Any]:
    params = {
        "name": "whoami",
        "arguments": {"marker": "bench"},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
        },
    }
    raw = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    ctx = RequestContext(
        request_id=1, modern=True, principal=ALICE, rpc=Message(raw), rpc_method="tools/call"
    )
    ctx.flow = Flow(
        FlowRules(ring=RING, audience="b/r"),
        principal_id=ALICE.id,
        method="tools/call",
        params=params,
    )
    return {"type": "http", "method": "POST", "headers": [], SCOPE_KEY: ctx}


def member(vault: SecretVault, local_seconds: float) -> ConsentMember:
    settings = ConsentSection()
    return ConsentMember(
        key="r",
        name="r",
        config=OAuthConfig(issuer="https://as.bench", client={"client_id": "g", "secret_env": "X"}),
        settings=settings,
        server=None,
        grants=GrantBook(
            vault,
            idle_seconds=settings.grant_idle_seconds,
            touch_seconds=settings.touch_seconds,
            outcome_seconds=600,
            local_seconds=local_seconds,
        ),
        spend=MemoryStore().consume,
        ring=RING,
        public_base="https://edge.bench",
        metrics=ConsentMetrics(CollectorRegistry()),
    )


async def cpu_per_call(app: Any, calls: int) -> float:
    """µs of this process's CPU per call."""
    started = time.process_time()
    for _ in range(calls):
        await app(scope(), _receive, _send)
    return (time.process_time() - started) / calls * 1e6


async def measure(
    vault: SecretVault, calls: int, repeats: int, local_seconds: float = 0.0
) -> dict[str, Any]:
    m = member(vault, local_seconds)
    now = time.time()
    await m.grants.put(ALICE.id, Grant("r", "user-token", "rt", now + 3600, "", now, now))
    layer = ConsentLayer(inner, member=m)
    await cpu_per_call(layer, 200)  # warm up
    bare, consent = [], []
    for _ in range(repeats):
        bare.append(await cpu_per_call(inner, calls))
        consent.append(await cpu_per_call(layer, calls))
    ratios = [c / b for b, c in zip(bare, consent, strict=True)]
    added = [c - b for b, c in zip(bare, consent, strict=True)]
    return {
        "bare_us": round(min(bare), 2),
        "consent_us": round(min(consent), 2),
        "added_us": round(min(consent) - min(bare), 2),
        "added_per_repeat": spread(added, 2),
        "ratio_per_repeat": spread(ratios, 2),
    }


@contextlib.contextmanager
def redis_server() -> Any:
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), 0.5),
                ):
                    break
                time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def run(calls: int, repeats: int) -> dict[str, Any]:
    report: dict[str, Any] = {"tree": tree_info(), "calls": calls, "repeats": repeats}
    report["memory, read every call"] = await measure(
        SecretVault(RING, MemoryBackend()), calls, repeats
    )
    with redis_server() as url:
        if url is not None:
            vault = SecretVault(RING, RedisBackend(url, timeout=1.0))
            report["redis, read every call"] = await measure(vault, max(calls // 5, 200), repeats)
            report["redis, kept 5 s (default)"] = await measure(vault, calls, repeats, 5.0)
            await vault.aclose()
    return report


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# What per-user consent adds to a call that has its grant",
        "",
        f"`uv run python -m bench.consent` at {report['tree']['commit'][:10]} "
        f"({report['calls']} calls x {report['repeats']} repeats, best of the repeats; "
        "CPU of this process per call).",
        "",
        "| grant store | straight to the app | through the consent layer | added | added per repeat | ratio per repeat |",
        "|---|---|---|---|---|---|",
    ]

    def span(x: dict[str, float]) -> str:
        return f"{x['min']}–{x['max']} (median {x['median']})"

    for name in ("memory, read every call", "redis, read every call", "redis, kept 5 s (default)"):
        r = report.get(name)
        if r is None:
            continue
        lines.append(
            f"| {name} | {r['bare_us']} µs | {r['consent_us']} µs | {r['added_us']} µs | "
            f"{span(r['added_per_repeat'])} µs | {span(r['ratio_per_repeat'])} |"
        )
    lines += [
        "",
        "The app answers at once, so the ratio is of almost nothing; what matters is the added "
        "CPU per call, against the gateway's own work on a small `tools/call` (about 230 µs in "
        "one process: `bench/results/identity.md`).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    report = asyncio.run(run(args.calls, args.repeats))
    write_report(RESULTS_DIR, "consent", report, markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
