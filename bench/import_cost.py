"""What ``import mcp_edge`` and building an Edge cost a program, beside Starlette's own middleware.

    uv run python -m bench.import_cost [--baseline REF] [--repeats 15]

Each case runs in a fresh interpreter (``python -c``), which times its own imports and
construction (``time.perf_counter``) and counts ``sys.modules`` before and after; the cases are
interleaved, round by round, and reported as the median (and min) over ``--repeats`` rounds:

- ``starlette``: ``CORSMiddleware(app, allow_origins=[...])`` (the reference: what a middleware of
  the developer's stack costs);
- ``import``: ``import mcp_edge``;
- ``edge``: ``Edge(app, anonymous=True)``, memory only (no policy, no Redis, no tracing);
- ``edge+policy``: the same with one CEL ``allow`` rule on the route;
- ``edge+redis``: the same with ``store.url`` a Redis URL (nothing is connected to at construction);
- ``edge+tracing``: the same with OTLP tracing configured (nothing is exported at construction).

``--baseline REF`` runs the same cases against another version's source (``git archive REF``,
first on ``sys.path``) in this environment, side by side. Every third-party distribution is
installed here (the dev environment), so what a case loads is what its code imports, not what
happens to be missing. Results: ``bench/results/import-cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from bench.report import commit_of, git

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"

#: Third-party distributions whose loading the report names (by top-level module).
WATCHED = (
    "aiohttp",
    "cel",
    "cryptography",
    "httptools",
    "jwt",
    "limits",
    "opentelemetry",
    "prometheus_client",
    "prompt_toolkit",
    "pydantic",
    "pygments",
    "redis",
    "rich",
    "starlette",
    "uvicorn",
    "uvloop",
    "yaml",
)

_APP = "async def app(scope, receive, send):\n    pass\n"
CASES: dict[str, str] = {
    "starlette": (
        "from starlette.middleware.cors import CORSMiddleware\n"
        + _APP
        + "CORSMiddleware(app, allow_origins=['https://example.com'])\n"
    ),
    "import": "import mcp_edge\n",
    "edge": "from mcp_edge import Edge\n" + _APP + "Edge(app, anonymous=True)\n",
    "edge+policy": (
        "from mcp_edge import Edge\n"
        + _APP
        + "Edge(app, anonymous=True, routes=[{'name': 'default', 'path': '/mcp',"
        " 'legacy_clients': 'deny', 'policy':"
        " {'rules': [{'when': 'true', 'action': 'allow'}]}}])\n"
    ),
    "edge+redis": (
        "from mcp_edge import Edge\n"
        + _APP
        + "Edge(app, anonymous=True, store={'type': 'redis', 'url': 'redis://127.0.0.1:1/0'})\n"
    ),
    "edge+tracing": (
        "from mcp_edge import Edge\n"
        + _APP
        + "Edge(app, anonymous=True, observability={'tracing': {'enabled': True,"
        " 'endpoint': 'http://127.0.0.1:1/v1/traces'}})\n"
    ),
}

_PROBE = """
import sys, time, json
{path}
before = set(sys.modules)
t0 = time.perf_counter()
exec(compile({code!r}, "<case>", "exec"), {{}})
elapsed = time.perf_counter() - t0
loaded = set(sys.modules) - before
tops = sorted({{m.split(".")[0] for m in loaded}})
origin = getattr(sys.modules.get("mcp_edge"), "__file__", None)
print(json.dumps({{"seconds": elapsed, "modules": len(sys.modules), "loaded": len(loaded),
                  "tops": tops, "origin": origin}}))
"""


def run_case(code: str, source: Path | None, env: dict[str, str]) -> dict[str, Any]:
    path = f"sys.path.insert(0, {str(source)!r})" if source is not None else ""
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE.format(path=path, code=code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tempfile.gettempdir(),  # not the repository: its source is not on the path by accident
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    if source is not None and out["origin"] is not None:
        assert out["origin"].startswith(str(source)), out["origin"]
    return out


def archive(ref: str, into: Path) -> str:
    """The ``mcp_edge`` package of ``ref`` (``git archive``) unpacked into ``into``; its commit."""
    commit = commit_of(ref)
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", commit, "mcp_edge"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return commit


def summarise(samples: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [s for s in samples if "error" in s] or samples
    if "error" in ok[0]:
        return {"error": ok[0]["error"]}
    seconds = [s["seconds"] for s in samples]
    last = samples[-1]
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 1),
        "min_ms": round(min(seconds) * 1000, 1),
        "modules": last["modules"],
        "loaded": last["loaded"],
        "watched": [t for t in last["tops"] if t in WATCHED],
    }


def render(report: dict[str, Any]) -> str:
    versions = report["versions"]
    lines = [
        f"# Import cost ({report['mode']}, {report['when']})",
        "",
        f"{report['repeats']} interleaved rounds, each case in a fresh `python -c` "
        f"(Python {report['python']}); time from the first import to the built middleware, "
        "median (min); modules: `sys.modules` after, total (and loaded by the case). "
        "`× starlette`: the case's median time and loaded modules over the reference's, "
        "measured in the same rounds.",
        "",
    ]
    for name, version in versions.items():
        lines += [
            f"## {name}: {version['label']}",
            "",
            "| case | ms median (min) | modules total (loaded) | × starlette time / modules "
            "| third-party loaded (watched) |",
            "|---|--:|--:|--:|---|",
        ]
        ref = version["cases"]["starlette"]
        for case, row in version["cases"].items():
            if "error" in row:
                lines.append(f"| {case} | error: {row['error']} | | | |")
                continue
            ratio = (
                f"{row['median_ms'] / ref['median_ms']:.2f} / {row['loaded'] / ref['loaded']:.2f}"
            )
            lines.append(
                f"| {case} | {row['median_ms']} ({row['min_ms']}) | {row['modules']} "
                f"({row['loaded']}) | {ratio} | {', '.join(row['watched']) or '-'} |"
            )
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", help="also measure this git ref's mcp_edge, side by side")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="1 round (a smoke run)")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_EDGE_")}
    # A key as ``mcp-edge keys generate`` writes one (32 random bytes, base64url).
    env["MCP_EDGE_STATE_KEYS"] = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="mcp-edge-import-") as tmp:
        sources: dict[str, tuple[Path | None, str]] = {}
        if args.baseline:
            commit = archive(args.baseline, Path(tmp))
            sources["baseline"] = (Path(tmp), f"`{args.baseline}` ({commit[:10]})")
        head = git(REPO, "log", "-1", "--format=%h %s")
        dirty = git(REPO, "status", "--porcelain", "mcp_edge")
        sources["this tree"] = (
            None,
            f"`{head[:70]}`" + (" (uncommitted changes)" if dirty else ""),
        )
        samples: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {case: [] for case in CASES} for name in sources
        }
        for round_ in range(repeats):
            order = list(CASES.items())
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for name, (source, _) in sources.items():
                for case, code in order:
                    samples[name][case].append(run_case(code, source, env))
            print(f"round {round_ + 1}/{repeats}", file=sys.stderr)
    report = {
        "mode": "quick" if args.quick else "full",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "repeats": repeats,
        "python": sys.version.split()[0],
        "versions": {
            name: {
                "label": label,
                "cases": {case: summarise(runs) for case, runs in samples[name].items()},
            }
            for name, (_, label) in sources.items()
        },
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "import-cost.json").write_text(json.dumps(report, indent=2) + "\n")
    md = render(report)
    (args.out_dir / "import-cost.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
