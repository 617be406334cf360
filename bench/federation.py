"""Micro-benchmarks of federation's per-request work (``mcp_edge.core.federation``): routing a
call's name or URI to its member (every federated ``tools/call``, ``prompts/get``,
``resources/read``), merging a 500-item list from three members, sealing and opening the list
cursor, merging ``server/discover``, and rewriting the URIs of a tool result.

    uv run python -m bench.federation [--quick]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from bench.micro import timeit
from mcp_edge.core.federation.cursor import open_cursor, seal_cursor
from mcp_edge.core.federation.discover import merge_discover
from mcp_edge.core.federation.lists import merge_list
from mcp_edge.core.federation.names import ItemRules, MemberNames, Namespace
from mcp_edge.core.federation.rewrite import federate_call_result, route_request
from mcp_edge.core.seal import KeyRing, StateKey

NS = Namespace(
    [
        MemberNames(
            "docs",
            "docs",
            tools=ItemRules(
                exclude=("internal-*", "debug?"),
                rename={f"search{i}": f"find{i}" for i in range(20)},
            ),
            resources=ItemRules(include=("file://*", "test://*")),
        ),
        MemberNames("everything", ""),
        MemberNames("mail", "mail", tools=ItemRules(include=("send*", "read*", "t*"))),
    ]
)
RING = KeyRing([StateKey.from_secret(b"mcp-edge-bench/federation/secret-0123456789")])


def _page(key: str, field: str, names: list[str]) -> dict[str, Any]:
    items = [{field: n, "description": "d", "inputSchema": {"type": "object"}} for n in names]
    return {key: items, "ttlMs": 60_000, "cacheScope": "public", "resultType": "complete"}


def _tool_parts() -> list[tuple[str, Any]]:
    return [
        ("docs", _page("tools", "name", [f"tool{i}" for i in range(200)])),
        ("everything", _page("tools", "name", [f"echo{i}" for i in range(200)])),
        ("mail", _page("tools", "name", [f"t{i}" for i in range(100)])),
    ]


def _resource_parts() -> list[tuple[str, Any]]:
    return [
        ("docs", _page("resources", "uri", [f"file:///docs/{i}.md" for i in range(200)])),
        ("everything", _page("resources", "uri", [f"test://static/{i}" for i in range(200)])),
        ("mail", _page("resources", "uri", [f"imap://inbox/{i}" for i in range(100)])),
    ]


def run(quick: bool = False) -> dict[str, dict[str, float]]:
    t = 0.02 if quick else 0.3
    tools, resources = _tool_parts(), _resource_parts()
    cursor = seal_cursor(
        RING,
        audience="edge/tools",
        method="tools/list",
        principal_id="alice",
        pending=[("docs", "c" * 40), ("mail", "m" * 40)],
        private=False,
        now=1_800_000_000,
    )
    discover = {
        "supportedVersions": ["2026-07-28"],
        "capabilities": {"tools": {"listChanged": True}, "resources": {"subscribe": True}},
        "instructions": "Use the tools. " * 20,
        "ttlMs": 0,
        "cacheScope": "private",
        "resultType": "complete",
    }
    call_result = {
        "content": [{"type": "text", "text": "x"}]
        + [
            {"type": "resource_link", "uri": f"file:///docs/{i}.md", "name": str(i)}
            for i in range(10)
        ]
    }
    params = {"name": "docs__tool7", "arguments": {"q": "x"}, "_meta": {}}
    cases = {
        "route_tool prefixed": lambda: NS.route_tool("docs__tool7"),
        "route_tool unprefixed": lambda: NS.route_tool("echo7"),
        "route_tool rename target": lambda: NS.route_tool("find7"),
        "route_tool unknown (mail filter)": lambda: NS.route_tool("mail__nope"),
        "route_uri prefixed": lambda: NS.route_uri("docs+file:///docs/7.md"),
        "route_request tools/call": lambda: route_request(NS, "tools/call", params),
        "merge tools/list 500 items": lambda: merge_list(NS, "tools/list", tools),
        "merge resources/list 500 items": lambda: merge_list(NS, "resources/list", resources),
        "seal cursor (2 members)": lambda: seal_cursor(
            RING,
            audience="edge/tools",
            method="tools/list",
            principal_id="alice",
            pending=[("docs", "c" * 40), ("mail", "m" * 40)],
            private=False,
            now=1_800_000_000,
        ),
        "open cursor": lambda: open_cursor(
            RING,
            cursor,
            audience="edge/tools",
            method="tools/list",
            principal_id="alice",
            members=("docs", "everything", "mail"),
            now=1_800_000_000,
        ),
        "merge server/discover (3)": lambda: merge_discover(
            NS,
            [("docs", discover), ("everything", discover), ("mail", discover)],
            server_info={"name": "mcp-edge", "version": "0"},
        ),
        "federate tools/call result (10 links)": lambda: federate_call_result(
            NS, "docs", call_result
        ),
    }
    return {name: timeit(fn, min_time=t) for name, fn in cases.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = run(args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name, r in results.items():
        print(f"{name:42s} best {r['best_us']:9.2f} µs   median {r['median_us']:9.2f} µs")


if __name__ == "__main__":
    main()
