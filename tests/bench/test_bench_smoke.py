"""The benchmark harness runs end to end in its quick mode and writes well-formed results.

No timing is asserted (CI machines are noisy); what is asserted is that every workload ran on
every path with answers that passed the load generator's checks, and that the report files hold
what they should.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

REPO_ROOT = Path(__file__).resolve().parents[2]
NGINX = Path("/usr/sbin/nginx")
WORKLOADS = ("tools_list", "tools_list_cached", "small_call", "small_call_policy", "big_call", "mrtr", "sse_progress")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out-dir", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, f"bench --quick failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
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
            assert set(row["compare"]) >= {"edge_overhead_p50_ms", "throughput_edge_over_direct",
                                           "throughput_edge_over_nginx"}  # fmt: skip


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
            assert cell["errors"] == 0 and cell["ops"] > 0, f"{workload} at {clients}: {cell['error_samples']}"
        assert row["mrtr_modern"]["ops_per_s"] > 0
    assert "Legacy bridge, MRTR flow" in stdout
