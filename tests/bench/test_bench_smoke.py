"""The benchmark harness runs end to end in its quick mode and writes well-formed results.

No timing is asserted (CI machines are noisy); what is asserted is that every workload ran on
every path with answers that passed the load generator's checks, and that the report files hold
what they should.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runner import run_bench
from tests.conftest import require

NGINX = Path("/usr/sbin/nginx")
WORKLOADS = (
    "tools_list",
    "tools_list_cached",
    "small_call",
    "small_call_policy",
    "small_call_light",
    "big_call",
    "mrtr",
    "sse_progress",
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench")
    proc = run_bench("bench", "--quick", "--out-dir", str(out))
    return out, proc.stdout


def test_writes_json_and_markdown(quick_run: tuple[Path, str]) -> None:
    out, stdout = quick_run
    assert (out / "latest.json").is_file()
    assert (out / "latest.md").is_file()
    md = (out / "latest.md").read_text()
    assert md in stdout  # the table is printed too
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| workload | clients |")
    rows = [line for line in table[1:] if line.split("|")[1].strip() in WORKLOADS]
    assert {line.split("|")[1].strip() for line in rows} == set(WORKLOADS)
    header_cells = table[0].count("|")
    assert all(line.count("|") == header_cells for line in rows), "ragged table rows"


def test_every_workload_ran_on_every_path_without_errors(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    report = json.loads((out / "latest.json").read_text())
    targets = report["plan"]["targets"]
    assert {"direct", "edge"} <= set(targets)
    require(NGINX.exists(), "nginx (Debian package) for the reverse-proxy comparison")
    assert "nginx" in targets
    assert set(report["results"]) == set(WORKLOADS)
    for workload, by_clients in report["results"].items():
        assert set(by_clients) == {str(c) for c in report["plan"]["clients"]}
        for clients, row in by_clients.items():
            for target in targets:
                cell = row[target]
                where = f"{workload} at {clients} clients via {target}"
                assert cell["errors"] == 0, f"{where}: {cell['error_samples']}"
                assert cell["ops"] > 0 and cell["ops_per_s"] > 0, where
                assert 0 < cell["p50_ms"] <= cell["p99_ms"], where
            assert row["edge"]["proxy_cpu_s_per_1k_ops"] is not None
            assert set(row["compare"]) >= {
                "edge_overhead_p50_ms",
                "throughput_edge_over_direct",
                "throughput_edge_over_nginx",
            }


def test_reports_gateway_memory_micro_and_calibration(quick_run: tuple[Path, str]) -> None:
    out, _ = quick_run
    report = json.loads((out / "latest.json").read_text())
    gw = report["gateway"]
    assert gw["rss_start_bytes"] > 10 * 2**20 and gw["rss_end_bytes"] > 10 * 2**20
    micro = {k: v for k, v in report["micro"].items() if isinstance(v, dict)}
    assert any(k.startswith("seal") for k in micro) and any(k.startswith("open") for k in micro)
    assert any("RS256" in k for k in micro) and any("ES256" in k for k in micro)
    assert all(v["median_us"] > 0 for v in micro.values())
    assert report["calibration"]["loadgen_c1"]["req_per_s"] > 0
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["python"] and machine["cpu_model"]


def test_legacy_bridge_rows_ran_without_errors(quick_run: tuple[Path, str]) -> None:
    """The bridged MRTR flow against 2025-era servers ran at every client count, both strategies."""
    out, stdout = quick_run
    report = json.loads((out / "latest.json").read_text())
    rows = report["legacy_bridge"]
    assert set(rows) == {str(c) for c in report["plan"]["clients"]}
    for clients, row in rows.items():
        for workload in ("mrtr_legacy_resume", "mrtr_legacy_park"):
            cell = row[workload]
            assert cell["errors"] == 0 and cell["ops"] > 0, (
                f"{workload} at {clients}: {cell['error_samples']}"
            )
        assert row["mrtr_modern"]["ops_per_s"] > 0
    assert "Legacy bridge, MRTR flow" in stdout


def test_goal_rows_are_read_off_the_run(quick_run: tuple[Path, str]) -> None:
    """Each performance goal is computed from this run's cells (quick mode: 1 and 4 clients, so
    the 16-client rows are absent) and printed with its bound."""
    out, stdout = quick_run
    report = json.loads((out / "latest.json").read_text())
    by_goal = {(g["goal"], g["workload"], g["clients"]): g for g in report["goals"]}
    r = report["results"]
    edge_cpu = r["small_call"]["1"]["edge"]["proxy_cpu_s_per_1k_ops"]
    nginx_cpu = r["small_call"]["1"]["nginx"]["proxy_cpu_s_per_1k_ops"]
    cpu_goal = by_goal[("edge CPU per call ÷ nginx's", "small_call", 1)]
    assert cpu_goal["value"] == round(edge_cpu / nginx_cpu, 3) and cpu_goal["bound"] == 2.5
    assert cpu_goal["met"] == (cpu_goal["value"] <= 2.5)
    p50 = by_goal[("added p50 at 1 client (ms)", "small_call_light", 1)]
    assert p50["value"] == round(
        r["small_call_light"]["1"]["edge"]["p50_ms"]
        - r["small_call_light"]["1"]["direct"]["p50_ms"],
        3,
    )
    assert ("MRTR round trip CPU ÷ two small calls'", "mrtr", 1) in by_goal
    assert "| goal | workload | clients | measured | bound | met |" in stdout


@pytest.fixture(scope="module")
def layers_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(NGINX.exists(), "nginx (Debian package) for the reverse-proxy comparison")
    out = tmp_path_factory.mktemp("layers")
    run_bench(
        "bench.layers",
        "--quick",
        "--out-dir",
        str(out),
        "--variants",
        "nginx,uvicorn-canned,uvicorn-proxy,gateway-uvicorn,gateway-uvicorn-w2",
    )
    return out


def test_layers_floors_ran_on_every_variant(layers_run: Path) -> None:
    """The floors under the gateway (server alone, server + client) and the gateway with one and
    two workers all served the light upstream's small call without errors."""
    report = json.loads((layers_run / "layers.json").read_text())
    for clients, row in report["results"].items():
        assert set(row) == {
            "direct",
            "nginx",
            "uvicorn-canned",
            "uvicorn-proxy",
            "gateway-uvicorn",
            "gateway-uvicorn-w2",
        }
        for name, cell in row.items():
            assert cell["errors"] == 0 and cell["ops"] > 0, (
                f"{name} at {clients}: {cell['error_samples']}"
            )
            if name != "direct":
                assert cell["proxy_cpu_s_per_1k_ops"] > 0, name
    assert "| variant | ops/s |" in (layers_run / "layers.md").read_text()


def test_peer_rss_runs_and_reports_each_path() -> None:
    """``bench.peer_rss`` in a small size: every caller is answered (here, before its body was
    complete) and the report has a row per path."""
    proc = run_bench("bench.peer_rss", "--connections", "5", "--size-mib", "1", "--seconds", "1")
    rows = json.loads(proc.stdout[proc.stdout.index("\n[") :])
    assert [row["path"] for row in rows] == ["/.mcp-edge/forward", "/.mcp-edge/legacy"]
    for row in rows:
        assert row["answered"] == row["answered_early"] == 5 and row["status_403"] == 5, row
        assert row["peak_rss_mib"] >= row["rss_at_rest_mib"] > 0


def test_federation_linear_runs_every_path() -> None:
    """``bench.federation_linear --quick``: every path runs at both sizes and is reported (its
    ratios are the benchmark's to read, not a test's)."""
    proc = run_bench("bench.federation_linear", "--quick")
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {row["path"] for row in rows} >= {
        "acknowledgement",
        "list part",
        "member cursor",
        "client cursor",
        "notifications",
        "discover",
        "instructions",
        "call answer",
    }
    assert all(row["seconds_n"] > 0 and row["seconds_10n"] > 0 for row in rows)


def test_identity_benchmark_quick(tmp_path: Path) -> None:
    """``bench.identity --quick``: both routes measured with every answer checked, the latency
    part written (no figure asserted)."""
    from tests.support.authserver import require_authserver

    require_authserver()
    run_bench("bench.identity", "--quick", "--out-dir", str(tmp_path))
    report = json.loads((tmp_path / "identity.json").read_text())
    for row in report["results"].values():
        assert set(row) == {"static", "exchange"}
        assert all(cell["errors"] == 0 and cell["ops"] > 0 for cell in row.values())
    assert report["latency"]["exchange"]["n"] > 0
    assert "÷ static" in (tmp_path / "identity.md").read_text()
