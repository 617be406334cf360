"""Linear in what a member sends: every path of the federation that loops over member-supplied
items, fed a hostile member's answer of N and of 10N items, and the ratio of the two times (a
linear path gives about 10; a bounded one about 1, the items past its bound never read; a
quadratic one about 100).

    uv run python -m bench.federation_linear [--quick]

Writes ``bench/results/federation-linear.{md,json}``. The acknowledgement of a listen stream is
also run the way it was before (a list-membership test per URI), for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import platform
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson

from mcp_edge.core.federation.cursor import (
    MAX_CURSOR_CHARS,
    CursorRejected,
    member_cursor_ok,
    open_cursor,
)
from mcp_edge.core.federation.discover import merge_discover
from mcp_edge.core.federation.lists import fit_parts, merge_list
from mcp_edge.core.federation.names import ADMIT_MEMO_SIZE, MemberNames, Namespace
from mcp_edge.core.federation.rewrite import federate_call_result, federate_prompt_result
from mcp_edge.core.jsonrpc import Message
from mcp_edge.core.memo import BoundedMemo
from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.core.uri import canonical_uri
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import RequestContext
from mcp_edge.upstream.federation.listen import FanIn
from mcp_edge.upstream.federation.reader import Capture

NS = Namespace([MemberNames("docs", "docs"), MemberNames("web", "web")])
RING = KeyRing([StateKey.from_secret(b"mcp-edge-bench/federation-linear/secret-0123456789")])
RESULTS = Path(__file__).parent / "results"


def best(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` runs, seconds: each run cold (the namespace's memo of
    verdicts emptied: a hostile member sends names it never sent before), the garbage
    collector off while it runs (its passes grow with the heap, whatever the path does)."""
    times = []
    for _ in range(repeat):
        NS._admitted = BoundedMemo(ADMIT_MEMO_SIZE)
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times)


# ---------------------------------------------------------------- the paths


def acknowledgement(n: int) -> Callable[[], Any]:
    """A listen ack naming n made-up URIs and the one the client asked for."""
    request = {
        "jsonrpc": "2.0",
        "id": "s",
        "method": "subscriptions/listen",
        "params": {"notifications": {"resourceSubscriptions": ["docs+file:///asked"]}},
    }
    route = SimpleNamespace(
        seats=[SimpleNamespace(member=SimpleNamespace(name="docs"))], namespace=NS
    )
    fan_in = FanIn(route, {}, None, None, RequestContext(rpc=Message(request)))  # type: ignore[arg-type]
    fan_in._filters()
    uris = [f"file:///made-up/{i}" for i in range(n)] + ["file:///asked"]
    fan_in._acked = {"docs": {"notifications": {"resourceSubscriptions": uris}}}
    return fan_in.honoured


def acknowledgement_before(n: int) -> Callable[[], Any]:
    """The same, read as it was: each URI federated, then a list-membership test."""
    uris = [f"file:///made-up/{i}" for i in range(n)] + ["file:///asked"]

    def run() -> list[str]:
        out: list[str] = []
        for uri in uris:
            federated = NS.federate("resource", "docs", uri)
            if federated is not None and federated not in out:
                out.append(federated)
        return out

    return run


def list_part(n: int) -> Callable[[], Any]:
    """A tools/list page of n items (each a name of its own)."""
    page = {
        "resultType": "complete",
        "tools": [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(n)],
    }
    parts = [("docs", page), ("web", {"resultType": "complete", "tools": []})]
    return lambda: merge_list(
        NS, "tools/list", fit_parts(parts, [1, 1], 1 << 30), max_items=1 << 30
    )


def list_collisions(n: int) -> Callable[[], Any]:
    """A page of n items all of one name (each after the first a collision, reported)."""
    page = {"resultType": "complete", "tools": [{"name": "same"} for _ in range(n)]}
    return lambda: merge_list(NS, "tools/list", [("docs", page)], max_items=1 << 30)


def member_cursor(n: int) -> Callable[[], Any]:
    """A member's nextCursor of n characters (refused past 2048)."""
    cursor = "c" * n
    return lambda: member_cursor_ok(cursor)


def gateway_cursor(n: int) -> Callable[[], Any]:
    """A client's cursor of n characters (refused before decoding past MAX_CURSOR_CHARS)."""
    token = "mcpec1.k." + "A" * n

    def run() -> None:
        with contextlib.suppress(CursorRejected):  # refused, as it must be
            open_cursor(
                RING,
                token,
                audience="a",
                method="tools/list",
                principal_id="p",
                members=("docs",),
                now=0,
            )

    return run


def notifications(n: int) -> Callable[[], Any]:
    """A listen stream of n notifications read and relayed (the reader, the relay)."""
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "file:///a"},
    }
    body = (b"data: " + orjson.dumps(note) + b"\n\n") * n
    seat = SimpleNamespace(member=SimpleNamespace(name="docs", health=None))
    route = SimpleNamespace(
        seats=[seat], namespace=NS, on_list_changed=None, reporter=SimpleNamespace(dropped=None)
    )

    async def sink(message: Any) -> None:
        return None

    def run() -> None:
        fan_in = FanIn(route, {}, None, sink, RequestContext(request_id="s"))  # type: ignore[arg-type]
        fan_in._client_acked.set()

        async def deliver(doc: dict[str, Any]) -> None:
            await fan_in._relay(seat, doc, "own-id")

        held = Reservation(AnswerBudget(1 << 31), kind="fan_in")  # counted, as a route's is
        capture = Capture(None, 1 << 30, reservation=held, deliver=deliver)

        async def go() -> None:
            await capture(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            for start in range(0, len(body), 65536):
                await capture(
                    {
                        "type": "http.response.body",
                        "body": body[start : start + 65536],
                        "more_body": True,
                    }
                )

        asyncio.run(go())

    return run


def discover(n: int) -> Callable[[], Any]:
    """Two members' server/discover, each advertising n extensions (the same ones)."""
    ext = {f"x.example/e{i}": {"v": i} for i in range(n)}
    part = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {}, "extensions": ext},
    }
    parts = [("docs", part), ("web", part)]
    return lambda: merge_discover(NS, parts, server_info={"name": "g"})


def instructions(n: int) -> Callable[[], Any]:
    """A member's instructions of n characters (read up to 4 x 2048, cut to 2048)."""
    part = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {},
        "instructions": "word \u202e " * (n // 8),
    }
    return lambda: merge_discover(NS, [("docs", part)], server_info={"name": "g"})


def call_links(n: int) -> Callable[[], Any]:
    """A routed tools/call result of n resource links (each rewritten)."""
    result = {
        "content": [
            {"type": "resource_link", "uri": f"file:///r/{i}", "name": "r"} for i in range(n)
        ]
    }
    return lambda: federate_call_result(NS, "docs", result)


def prompt_messages(n: int) -> Callable[[], Any]:
    """A routed prompts/get result of n messages, each with an embedded resource."""
    block = {"type": "resource", "resource": {"uri": "web+file:///x", "text": "t"}}
    result = {"messages": [{"role": "user", "content": block} for _ in range(n)]}
    return lambda: federate_prompt_result(NS, "docs", result)


def uri_dots(n: int) -> Callable[[], Any]:
    """A resource URI of n/2 ``a/../`` segments (the canonical form; refused past 8192)."""
    uri = "file:///" + "a/../" * (n // 5)
    return lambda: canonical_uri(uri)


PATHS: list[tuple[str, str, Callable[[int], Callable[[], Any]], int, str]] = [
    (
        "acknowledgement",
        "listen ack: N made-up URIs",
        acknowledgement,
        10_000,
        "a set lookup per URI; at most 65,536 read (10N is past it)",
    ),
    (
        "acknowledgement (before)",
        "the same, as it was",
        acknowledgement_before,
        2_000,
        "list membership per URI",
    ),
    (
        "list part",
        "tools/list page of N items",
        list_part,
        10_000,
        "one pass, a set of names; at most 10,000 items a page",
    ),
    (
        "list collisions",
        "N items of one name",
        list_collisions,
        10_000,
        "each a set lookup and one report",
    ),
    (
        "member cursor",
        "nextCursor of N chars",
        member_cursor,
        200,
        "refused past 2,048 chars without reading it",
    ),
    (
        "client cursor",
        "cursor of N chars",
        gateway_cursor,
        MAX_CURSOR_CHARS // 10,
        "one decode; refused past 256 Ki chars unread",
    ),
    (
        "notifications",
        "listen stream of N notifications",
        notifications,
        5_000,
        "read and relayed once each",
    ),
    (
        "discover",
        "N extensions per member",
        discover,
        10_000,
        "one canonical encoding per extension and member",
    ),
    (
        "instructions",
        "instructions of N chars",
        instructions,
        800,
        "read up to 8,192 chars, cut to 2,048",
    ),
    ("call answer", "N resource links", call_links, 10_000, "one rewrite per link"),
    ("prompt answer", "N messages", prompt_messages, 10_000, "one rewrite per message"),
    (
        "resource URI",
        "URI of N chars of dot segments",
        uri_dots,
        800,
        "one pass; past 8,192 chars refused before it",
    ),
]


def measure(quick: bool) -> list[dict[str, Any]]:
    rows = []
    repeat = 1 if quick else 7
    for name, what, make, n, note in PATHS:
        if quick:  # (a smoke run: a tenth of the sizes, the ratios not meant to be read)
            n = max(1, n // 10)
        small, large = make(n), make(10 * n)
        small()  # warm (memos, imports)
        t1 = best(small, repeat)
        t10 = best(large, repeat)
        rows.append(
            {
                "path": name,
                "input": what,
                "n": n,
                "seconds_n": t1,
                "seconds_10n": t10,
                "ratio": t10 / t1 if t1 else None,
                "note": note,
            }
        )
    return rows


def render(rows: list[dict[str, Any]], head: str) -> str:
    lines = [
        "# Linear in what a member sends",
        "",
        head,
        "",
        "Each path fed a hostile member's answer of N and of 10N items (best of several runs, "
        "each cold: the namespace's memo of verdicts emptied, the garbage collector off; one "
        "process, `uv run python -m bench.federation_linear`). A linear path gives about 10, "
        "a bounded one about 1 (what is past its bound is never read), a quadratic one about 100.",
        "",
        "| path | hostile input | N | time at N | time at 10N | ratio | why |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['path']} | {r['input']} | {r['n']:,} | {r['seconds_n'] * 1000:.3f} ms"
            f" | {r['seconds_10n'] * 1000:.3f} ms | {r['ratio']:.1f} | {r['note']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = measure(args.quick)
    commit = subprocess.run(
        ["git", "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
    ).stdout.strip()
    head = (
        f"This tree: `{commit}`, {datetime.now(UTC).isoformat(timespec='seconds')}; "
        f"Python {platform.python_version()}, {platform.machine()}."
    )
    text = render(rows, head)
    print(text)
    print(json.dumps(rows))
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "federation-linear.md").write_text(text)
        (RESULTS / "federation-linear.json").write_text(
            json.dumps({"head": head, "rows": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
