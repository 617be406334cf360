"""The two CEL bindings on PyPI, side by side, on the gateway's policy workload: ten rules
compiled once, then evaluated in order against one request's context, as a policy route does for
every ``tools/call``.

    uv run --with cel-python python -m bench.cel_bindings [--quick]

``common-expression-language`` (module ``cel``, Rust ``cel-interpreter`` underneath) is a
dependency of the gateway; ``cel-python`` (module ``celpy``, pure Python on ``lark``) is not, so
the command above adds it for the run. A binding that is not installed is reported as such.

Measured per binding: compiling the ten rules (once, at start), one evaluation of a rule, and the
whole ten-rule walk for one request (context conversion included: the context differs per request).
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata
from typing import Any

from bench.micro import timeit

#: Ten rules of the kind docs/policy.md's examples use: claims, method, names, arguments. The request
#: below matches none of the first nine, so a walk evaluates all ten (the worst case for a call).
RULES = [
    '"admins" in claims.groups && name.startsWith("delete_")',
    'method == "tools/call" && name == "drop_table"',
    'name.startsWith("admin_") && !("ops" in claims.groups)',
    'has(arguments.path) && arguments.path.startsWith("/etc/")',
    'claims.tenant != "acme" && name == "export_customers"',
    'method == "resources/read" && uri.startsWith("file:///secret/")',
    'name in ["rm", "shutdown", "format_disk"]',
    "has(arguments.amount) && arguments.amount > 1000",
    '"contractors" in claims.groups && name.endsWith("_write")',
    '"readers" in claims.groups && (name.startsWith("get_") || name.startsWith("list_"))',
]

CONTEXT: dict[str, Any] = {
    "claims": {
        "sub": "alice",
        "iss": "https://idp.example",
        "groups": ["readers", "staff"],
        "tenant": "acme",
        "scope": "mcp:tools",
    },
    "principal": {"id": "https://idp.example alice", "subject": "alice", "scopes": ["mcp:tools"]},
    "method": "tools/call",
    "name": "get_weather",
    "uri": "",
    "arguments": {"city": "Paris", "days": 3},
}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def bench_common_expression_language(min_time: float, repeat: int) -> dict[str, Any]:
    import cel

    programs = [cel.compile(r) for r in RULES]

    def walk_dict() -> bool:
        return any(p.execute(CONTEXT) is True for p in programs)

    def walk_context() -> bool:
        ctx = cel.Context(CONTEXT)  # converted once per request, shared by the ten rules
        return any(p.execute(ctx) is True for p in programs)

    ctx = cel.Context(CONTEXT)
    assert walk_dict() is True and walk_context() is True
    return {
        "version": _version("common-expression-language"),
        "compile_10_rules": timeit(
            lambda: [cel.compile(r) for r in RULES], min_time=min_time, repeat=repeat
        ),
        "one_rule_prebuilt_context": timeit(
            lambda: programs[0].execute(ctx), min_time=min_time, repeat=repeat
        ),
        "walk_10_rules_dict": timeit(walk_dict, min_time=min_time, repeat=repeat),
        "walk_10_rules_context": timeit(walk_context, min_time=min_time, repeat=repeat),
    }


def bench_cel_python(min_time: float, repeat: int) -> dict[str, Any]:
    import celpy

    env = celpy.Environment()
    programs = [env.program(env.compile(r)) for r in RULES]

    def walk() -> bool:
        activation = celpy.json_to_cel(CONTEXT)  # converted once per request
        return any(bool(p.evaluate(activation)) is True for p in programs)

    activation = celpy.json_to_cel(CONTEXT)
    assert walk() is True
    return {
        "version": _version("cel-python"),
        "compile_10_rules": timeit(
            lambda: [env.program(env.compile(r)) for r in RULES], min_time=min_time, repeat=repeat
        ),
        "one_rule_prebuilt_context": timeit(
            lambda: programs[0].evaluate(activation), min_time=min_time, repeat=repeat
        ),
        "walk_10_rules_context": timeit(walk, min_time=min_time, repeat=repeat),
    }


def run(quick: bool = False) -> dict[str, Any]:
    min_time = 0.02 if quick else 0.5
    repeat = 3 if quick else 5
    out: dict[str, Any] = {}
    for name, fn in (
        ("common-expression-language", bench_common_expression_language),
        ("cel-python", bench_cel_python),
    ):
        try:
            out[name] = fn(min_time, repeat)
        except ImportError:
            out[name] = {
                "error": f"not installed (uv run --with {name} python -m bench.cel_bindings)"
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    results = run(args.quick)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        "| binding | version | compile 10 rules µs | one rule µs | 10-rule walk µs (per request) |"
    )
    print("|---|---|--:|--:|--:|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | – | {r['error']} | | |")
            continue
        walk = r.get("walk_10_rules_context") or r["walk_10_rules_dict"]
        print(
            f"| {name} | {r['version']} | {r['compile_10_rules']['median_us']} | "
            f"{r['one_rule_prebuilt_context']['median_us']} | {walk['median_us']} |"
        )
        if "walk_10_rules_dict" in r:
            print(
                f"|   (same, context passed as a dict to each rule) | | | | {r['walk_10_rules_dict']['median_us']} |"
            )


if __name__ == "__main__":
    main()
