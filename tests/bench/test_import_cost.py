"""``bench.import_cost`` in its quick mode: it runs, writes its report, and what each case loads
is what its configuration uses (asserted on the modules, never on times). Every extra is
installed here, so a module the light case loads is one the code imports, not one that happens
to be missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.runner import run_bench

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: What a case must not load unless its configuration names the feature.
FEATURES = {"redis": "edge+redis", "cel": "edge+policy", "opentelemetry": "edge+tracing"}
NEVER_IN_PROCESS = {"aiohttp", "httptools", "uvicorn", "uvloop", "jwt", "limits", "yaml"}


def test_each_case_loads_what_its_configuration_uses(tmp_path: Path) -> None:
    proc = run_bench("bench.import_cost", "--quick", "--out-dir", str(tmp_path), timeout=100)
    report = json.loads((tmp_path / "import-cost.json").read_text())
    assert (tmp_path / "import-cost.md").read_text() in proc.stdout
    cases = report["versions"]["this tree"]["cases"]
    assert not [name for name, row in cases.items() if "error" in row], cases
    light = set(cases["edge"]["watched"])
    assert light == {"cryptography", "prometheus_client", "pydantic", "starlette"}, light
    for module, case in FEATURES.items():
        assert module in cases[case]["watched"], (module, case)
        assert module not in light
    assert not NEVER_IN_PROCESS & {m for row in cases.values() for m in row["watched"]}
    assert cases["import"]["loaded"] < cases["starlette"]["loaded"]
