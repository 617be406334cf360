"""Alerting as code: deploy/prometheus (rules, their promtool unit tests, the README), the Grafana
dashboard (deploy/grafana) and the prometheus-operator component (deploy/kubernetes/components).

Offline: ``promtool check rules`` and ``promtool test rules``, every alert unit-tested both firing
and silent, carrying a severity, a runbook line and a ``for:``, and documented; the dashboard's JSON.

Live: a real gateway (a real upstream, Redis, a policy route, rate limits, the edge cache, a
single-use route, a stdio route, an unreachable upstream) and a second one exchanging callers'
tokens at the test authorization server are driven until they have produced every series, then
a real Prometheus scrapes them and evaluates the rules; every metric and label the
rules and the dashboard read must be in what it scraped, and every rule must evaluate cleanly.

Without promtool/prometheus (Debian's ``prometheus`` package) or redis-server these tests skip,
unless REQUIRE_ALL=1 (then they fail)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mcp_edge.core.seal import generate_key
from tests.conftest import require
from tests.deploy.promql import reads
from tests.scale.cluster import (
    REDIS_SERVER,
    RedisServer,
    Replica,
    Upstream,
    find_binary,
    gateway_config,
)
from tests.scale.flows import HEADERS, tool_call
from tests.support.processes import (
    ManagedProcess,
    free_port,
    run_bounded,
    wait_for_port,
    write_private,
)

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
RULE_TESTS = PROMETHEUS_DIR / "rules.test.yml"
SCRAPE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
RULES_README = PROMETHEUS_DIR / "README.md"
DASHBOARD = REPO / "deploy" / "grafana" / "mcp-edge.json"
COMPONENT = REPO / "deploy" / "kubernetes" / "components" / "prometheus"
K8S_BASE = REPO / "deploy" / "kubernetes" / "base"

PROMTOOL = find_binary("promtool", "/usr/bin/promtool")
PROMETHEUS = find_binary("prometheus", "/usr/bin/prometheus")
SEVERITIES = ("critical", "warning", "info")
#: The job the rules and the example scrape config name the gateways.
JOB = "mcp-edge"

pytestmark = pytest.mark.timeout(240)


def _tool(name: str, path: str | None) -> str:
    require(path is not None, f"{name} is not installed (apt-get install prometheus)")
    assert path is not None
    return path


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules_of(kind: str) -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if kind in rule]


def recorded() -> set[str]:
    return {rule["record"] for rule in rules_of("record")}


def recorded_labels(name: str) -> set[str]:
    """The labels a recording rule's series carry: what it groups by, plus what label_replace adds."""
    rule = next(r for r in rules_of("record") if r["record"] == name)
    added = re.findall(r',\s*"(\w+)",\s*"[^"]*",\s*"[^"]*",\s*"[^"]*"\)', rule["expr"])
    return reads(rule["expr"]).grouping - {"le"} | set(added)


def duration_seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text}"
    return sum(int(n) * units[u] for n, u in parts)


# ================================================================ rules, offline


def test_promtool_checks_the_rules() -> None:
    promtool = _tool("promtool", PROMTOOL)
    out = run_bounded([promtool, "check", "rules", str(RULES)], timeout=60)
    assert out.returncode == 0, out.output
    assert f"SUCCESS: {len(rules_of('record')) + len(rules_of('alert'))} rules found" in out.output


def test_promtool_unit_tests_pass() -> None:
    promtool = _tool("promtool", PROMTOOL)
    out = run_bounded([promtool, "test", "rules", str(RULE_TESTS)], timeout=180, cwd=PROMETHEUS_DIR)
    assert out.returncode == 0, out.output
    assert "SUCCESS" in out.output


def test_every_alert_is_unit_tested_firing_and_silent() -> None:
    """Each alert has a case where it fires, with its labels and annotations rendered, and one
    where it must not (not yet for long enough, or below its threshold)."""
    doc = yaml.safe_load(RULE_TESTS.read_text())
    assert doc["rule_files"] == [RULES.name]
    firing: dict[str, int] = {}
    silent: dict[str, int] = {}
    for case in (c for test in doc["tests"] for c in test.get("alert_rule_test", [])):
        name = case["alertname"]
        if case["exp_alerts"]:
            firing[name] = firing.get(name, 0) + 1
            for alert in case["exp_alerts"]:
                assert set(alert["exp_annotations"]) == {"summary", "description"}, name
        else:
            silent[name] = silent.get(name, 0) + 1
    alerts = {rule["alert"] for rule in rules_of("alert")}
    assert sorted(alerts - set(firing)) == [], "alerts never seen firing"
    assert sorted(alerts - set(silent)) == [], "alerts never seen staying silent"
    assert set(firing) | set(silent) <= alerts, "tests of alerts that do not exist"


def test_every_alert_has_a_severity_a_runbook_line_and_a_for() -> None:
    alerts = rules_of("alert")
    assert len({a["alert"] for a in alerts}) == len(alerts), "alert names are unique"
    for alert in alerts:
        name = alert["alert"]
        assert name.startswith("McpEdge"), name
        assert alert["labels"]["severity"] in SEVERITIES, name
        annotations = alert["annotations"]
        assert annotations["summary"].strip() and "\n" not in annotations["summary"], name
        assert "Check first:" in annotations["description"], f"{name}: what to check first"
        assert 60 <= duration_seconds(alert["for"]) <= 3600, f"{name}: for {alert['for']}"


def test_rules_read_recorded_series_only_after_recording_them() -> None:
    """A recording rule used by an alert (or a later recording rule) is defined in the file, in
    a group evaluated no later than its reader's."""
    seen: set[str] = set()
    for group in rule_groups():
        defined_here = {r["record"] for r in group["rules"] if "record" in r}
        for rule in group["rules"]:
            for metric in reads(rule["expr"]).metrics:
                if ":" in metric:
                    assert metric in seen | defined_here, f"{metric} is not recorded before use"
        seen |= defined_here
    for name in recorded():
        assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", name), (
            f"level:metric:operations: {name}"
        )


def test_readme_documents_every_alert() -> None:
    text = RULES_README.read_text()
    documented = re.findall(r"^### (McpEdge\w+)$", text, re.MULTILINE)
    alerts = [rule["alert"] for rule in rules_of("alert")]
    assert sorted(documented) == sorted(alerts), "one section per alert, no stale ones"
    sections = re.split(r"^### ", text, flags=re.MULTILINE)
    for section in sections[1:]:
        name = section.split("\n", 1)[0]
        if name not in alerts:
            continue
        alert = next(a for a in rules_of("alert") if a["alert"] == name)
        assert f"`{alert['for']}`" in section, f"{name}: the README states its for: duration"
        assert alert["labels"]["severity"] in section, f"{name}: the README states its severity"
        assert re.search(r"\*\*Why (this|these)\s+thresholds?", section), (
            f"{name}: threshold justified"
        )
        assert re.search(r"\*\*Check\s+first", section), f"{name}: what to check first"


def test_example_scrape_config_loads_the_rules() -> None:
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    assert config["rule_files"] == [RULES.name]
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert JOB in jobs
    promtool = _tool("promtool", PROMTOOL)
    out = run_bounded(
        [promtool, "check", "config", str(SCRAPE_CONFIG)], timeout=60, cwd=PROMETHEUS_DIR
    )
    assert out.returncode == 0, out.output


# ================================================================ dashboard, offline


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def all_panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in doc["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def dashboard_expressions(doc: dict[str, Any]) -> list[str]:
    """Every PromQL expression the dashboard sends: its targets, and its variables' queries
    (``label_values(<selector>, <label>)`` read as the selector)."""
    exprs = [t["expr"] for p in all_panels(doc) for t in p.get("targets", [])]
    for variable in doc["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = (
            variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        )
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
        assert match, f"variable {variable['name']}: {query}"
        exprs.append(match.group(1))
    return exprs


def test_dashboard_is_well_formed() -> None:
    doc = dashboard()
    assert doc["uid"] == "mcp-edge" and doc["title"]
    panels = all_panels(doc)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "job", "route"} <= variables
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for dx in range(grid["w"]):
            for dy in range(grid["h"]):
                cell = (grid["x"] + dx, grid["y"] + dy)
                assert cell not in cells, f"{panel['title']} overlaps another panel"
                cells.add(cell)
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            used = set(re.findall(r"\$\{?(\w+)", target["expr"])) - {
                "__rate_interval",
                "__range",
                "__interval",
            }
            assert used <= variables, f"{panel['title']}: unknown variables {used - variables}"
            assert reads(target["expr"]).metrics, f"{panel['title']}: reads no metric"
    titles = " ".join(p["title"] for p in panels).lower()
    for topic in (
        "requests",
        "error",
        "overhead",
        "mrtr",
        "rejections",
        "parked",
        "rate-limit",
        "cache",
        "upstream errors",
        "stdio",
    ):
        assert topic in titles, f"the dashboard shows {topic}"


# ================================================================ prometheus-operator component


def test_prometheus_rule_component_carries_the_rules() -> None:
    """The PrometheusRule's groups are rules.yml's, exactly (regenerate with
    ``uv run python -m tests.deploy.test_alerting`` after editing the rules)."""
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    assert rule["apiVersion"] == "monitoring.coreos.com/v1" and rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == rule_groups(), "stale: regenerate the PrometheusRule"


def test_prometheus_component_renders_with_the_base(tmp_path: Path) -> None:
    """Added to the base as a kustomize component: a PrometheusRule, and a PodMonitor that
    scrapes the gateway pods' /metrics on their http port under the job the rules expect."""
    from tests.deploy.test_manifests import _kubectl_path, gateway_container

    kubectl = _tool("kubectl", _kubectl_path())
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(K8S_BASE, overlay)],
                "components": [os.path.relpath(COMPONENT, overlay)],
            }
        )
    )
    out = run_bounded([kubectl, "kustomize", str(overlay)], timeout=120)
    assert out.returncode == 0, out.output
    docs = [d for d in yaml.safe_load_all(out.output) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds.count("PrometheusRule") == 1 and kinds.count("PodMonitor") == 1
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == rule_groups()
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for p in gateway_container(deployment["spec"]["template"]["spec"])["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    relabel = {r["targetLabel"]: r.get("replacement") for r in endpoint.get("relabelings", [])}
    assert relabel.get("job") == JOB, "the rules select job=mcp-edge"
    # The PrometheusRule's groups are what promtool checked; check the rendered copy too.
    promtool = _tool("promtool", PROMTOOL)
    rendered = tmp_path / "rendered-rules.yml"
    rendered.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    check = run_bounded([promtool, "check", "rules", str(rendered)], timeout=60)
    assert check.returncode == 0, check.output


# ================================================================ live: a gateway scraped by Prometheus


@dataclass
class Scraped:
    prometheus: str
    gateway: Replica
    query: Callable[..., Any]

    def series(self, metric: str) -> list[dict[str, str]]:
        result: list[dict[str, str]] = self.query("/api/v1/series", {"match[]": metric})
        return result


def _post(client: httpx.Client, url: str, message: dict[str, Any]) -> httpx.Response:
    name = message.get("params", {}).get("name", "")
    headers = {**HEADERS, "Mcp-Method": message["method"], "Mcp-Name": name}
    if not name:
        del headers["Mcp-Name"]
    return client.post(url, json=message, headers=headers)


def _request(method: str, params: dict[str, Any] | None = None, marker: str = "") -> dict[str, Any]:
    params = dict(params or {})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "dev.mcp-edge.test/marker": marker,
    }
    return {"jsonrpc": "2.0", "id": f"{method}-{marker}", "method": method, "params": params}


def _wait(
    what: str,
    check: Callable[[], Any],
    timeout: float = 60.0,
    process: ManagedProcess | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        if process is not None and not process.running:
            raise RuntimeError(f"{process.name} exited:\n{process.log_tail()}")
        last = check()
        if last:
            return last
        time.sleep(0.1)
    tail = process.log_tail() if process is not None else ""
    raise TimeoutError(f"{what}: not after {timeout:.0f} s (last: {last!r})\n{tail}")


def _samples(base: str) -> str:
    return httpx.get(f"{base}/metrics", timeout=5.0, trust_env=False).text


def _has(text: str, sample_prefix: str) -> bool:
    return any(line.startswith(sample_prefix) for line in text.splitlines())


def _stdio_pid(replica: Replica) -> int | None:
    """The pid of the stdio route's process, from the gateway's "stdio upstream started" line."""
    pids = []
    for path in replica.log_lines():
        for line in Path(path).read_text(errors="replace").splitlines():
            if "stdio upstream started" in line:
                with_pid = re.search(r'"pid":\s*(\d+)', line)
                if with_pid:
                    pids.append(int(with_pid.group(1)))
    return pids[-1] if pids else None


def _drive(replica: Replica, redis: RedisServer) -> None:
    """Requests that make the gateway produce every series the rules and the dashboard read."""
    base = replica.base
    marker = os.urandom(4).hex()
    with httpx.Client(timeout=15.0, trust_env=False) as client:
        # An MRTR flow to its end: rounds issued, retries accepted, a flow completed.
        state, responses = None, None
        for _ in range(6):
            doc = _post(
                client, f"{base}/mcp", tool_call("survey", {"topic": marker}, responses, state)
            ).json()
            result = doc["result"]
            if result.get("resultType") != "input_required":
                break
            (key,) = result["inputRequests"]
            state = result["requestState"]
            responses = {key: {"action": "accept", "content": {"answer": f"{marker}-{key}"}}}
        assert "content" in result, doc
        # A refused state (malformed), on the same route.
        refused = _post(
            client, f"{base}/mcp", tool_call("survey", {"topic": marker}, responses, "not-a-state")
        )
        assert refused.json()["error"]["data"]["reason"] == "malformed", refused.text
        # A body over limits.max_body_bytes: 413.
        big = client.post(
            f"{base}/mcp", content=b" " * 70_000, headers={**HEADERS, "Mcp-Method": "tools/list"}
        )
        assert big.status_code == 413, big.text
        # The edge cache: a miss, then a hit.
        for expected in ("miss", "hit"):
            listed = _post(client, f"{base}/cached", _request("tools/list", marker=marker))
            assert listed.headers.get("x-mcp-edge-cache") == expected, (expected, listed.headers)
        # Rate limits: the fourth call in a minute is refused (429).
        statuses = [
            _post(client, f"{base}/limited", tool_call("whoami", {}, None, None)).status_code
            for _ in range(4)
        ]
        assert statuses == [200, 200, 200, 429], statuses
        # Policy: tool definitions pinned (in Redis), a call refused by a rule.
        assert (
            _post(client, f"{base}/policy", _request("tools/list", marker=marker)).status_code
            == 200
        )
        denied = _post(client, f"{base}/policy", tool_call("whoami", {}, None, None)).json()
        assert "error" in denied, denied
        # Single use: a first round whose state will be retried once Redis is gone.
        first = _post(
            client, f"{base}/once", tool_call("survey", {"topic": marker}, None, None)
        ).json()["result"]
        (key,) = first["inputRequests"]
        once_retry = tool_call(
            "survey",
            {"topic": marker},
            {key: {"action": "accept", "content": {"answer": "x"}}},
            first["requestState"],
        )
        # An unreachable upstream.
        down = _post(client, f"{base}/down", tool_call("whoami", {}, None, None))
        assert down.status_code == 502, down.text
        # The replicas' endpoint, without a seal.
        peer = client.post(
            f"{base}/.mcp-edge/forward", content=b"{}", headers={"Content-Type": "application/json"}
        )
        assert peer.status_code == 403, peer.text

        # The stdio route's process dies once and is restarted.
        pid = _wait("the stdio process's pid in the log", lambda: _stdio_pid(replica))
        os.kill(pid, signal.SIGKILL)
        _wait(
            "a stdio restart counted",
            lambda: _has(_samples(base), 'mcp_edge_stdio_restarts_total{route="local"} 1.0'),
        )
        _wait(
            "the stdio route ready again",
            lambda: httpx.get(f"{base}/readyz", trust_env=False).status_code == 200,
        )

        # Redis goes away: every feature that uses it counts its failures.
        redis.kill()
        assert _post(client, f"{base}/once", once_retry).status_code == 503
        gone = f"{marker}-gone"
        _post(client, f"{base}/cached", _request("tools/list", marker=gone))
        assert _post(
            client, f"{base}/limited", tool_call("whoami", {}, None, None)
        ).status_code in (200, 429)
        _post(client, f"{base}/policy", tool_call(f"never-seen-{gone}", {}, None, None))
    text = _samples(base)
    for produced in (
        "mcp_edge_state_store_unavailable_total",
        "mcp_edge_cache_backend_errors_total",
        "mcp_edge_policy_pin_store_unavailable_total",
        'mcp_edge_rate_limit_requests_total{decision="store_unavailable_allowed"',
    ):
        assert _has(text, produced), f"{produced} not produced:\n{text[-3000:]}"


IDENTITY_GATEWAY_AUD = "https://gateway.alerting/mcp"
IDENTITY_UPSTREAM_AUD = "https://upstream.alerting/mcp"


def _identity_gateway(stack: ExitStack, tmp: Path, upstream: Upstream) -> Replica:
    """A second gateway, in jwt mode, whose routes exchange the caller's token at the test
    authorization server (one it allows, one it refuses), driven so that the token-exchange
    series exist: one exchange ok, one failed."""
    from tests.support.authserver import start_authserver

    auth = start_authserver(
        stack, tmp / "as", allowed_audiences={"gateway-basic": [IDENTITY_UPSTREAM_AUD]}
    )
    secret = write_private(tmp / "exchange-secret", str(auth.basic.secret))

    def exchanged(name: str, path: str, audience: str) -> dict[str, Any]:
        return {
            "name": name,
            "path": path,
            "upstream": upstream.url,
            "era": "modern",
            "upstream_auth": {
                "token_exchange": {
                    "issuer": auth.issuer,
                    "client": {"client_id": "gateway-basic", "secret_file": str(secret)},
                    "audience": audience,
                }
            },
        }

    config = {
        "gateway": {"id": "mcp-edge-identity"},
        "auth": {
            "mode": "jwt",
            "jwt": {
                "issuer": auth.issuer,
                "jwks_url": auth.jwks_uri,
                "algorithms": ["RS256"],
                "audience": [IDENTITY_GATEWAY_AUD],
            },
        },
        "logging": {"format": "json", "level": "info"},
        "routes": [
            exchanged("exchanged", "/mcp", IDENTITY_UPSTREAM_AUD),
            exchanged("exchange-refused", "/refused", "https://not-allowed.alerting/mcp"),
        ],
    }
    replica = Replica(1, tmp, config)
    stack.callback(replica.stop)
    replica.start(generate_key())
    _wait(
        "the identity gateway ready",
        lambda: _ready(replica.base),
        timeout=120,
        process=replica.process,
    )
    token = auth.user_token("alice", audience=IDENTITY_GATEWAY_AUD)
    headers = {**HEADERS, "Mcp-Name": "whoami", "Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=15.0, trust_env=False) as client:
        for path, status in (("/mcp", 200), ("/refused", 502)):
            answer = client.post(
                replica.base + path, json=tool_call("whoami", {}, None, None), headers=headers
            )
            assert answer.status_code == status, answer.text
    return replica


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    prometheus = _tool("prometheus", PROMETHEUS)
    require(
        REDIS_SERVER is not None, "redis-server is not installed (apt-get install redis-server)"
    )
    from tests.support.sandbox import stdio_server_command

    tmp = tmp_path_factory.mktemp("alerting")
    stdio = stdio_server_command("legacy_server.py", "--stdio")
    with ExitStack() as stack:
        redis = RedisServer(tmp)
        stack.callback(redis.stop)
        redis.start()
        upstream = Upstream(tmp, "--ephemeral", "--list-ttl-ms", "60000")
        stack.callback(upstream.stop)
        redis.wait()
        upstream.wait()
        dead = f"http://127.0.0.1:{free_port()}/mcp"
        config = gateway_config(
            [
                {"name": "default", "path": "/mcp", "upstream": upstream.url},
                {"name": "once", "path": "/once", "upstream": upstream.url, "single_use": True},
                {
                    "name": "cached",
                    "path": "/cached",
                    "upstream": upstream.url,
                    "cache": {"enabled": True},
                },
                {
                    "name": "limited",
                    "path": "/limited",
                    "upstream": upstream.url,
                    "rate_limits": {"per_principal": "3/minute"},
                },
                {
                    "name": "policy",
                    "path": "/policy",
                    "upstream": upstream.url,
                    "legacy_clients": "deny",
                    "policy": {
                        "pin_tools": True,
                        "rules": [{"when": 'name == "whoami"', "action": "deny"}],
                    },
                },
                {"name": "down", "path": "/down", "upstream": dead},
                {"name": "local", "path": "/local", "upstream": {"command": stdio}},
                {
                    "name": "fed",
                    "path": "/fed",
                    "members": [
                        {"name": "up", "upstream": upstream.url, "era": "modern"},
                        {"name": "gone", "upstream": dead, "era": "modern"},
                    ],
                },
            ],
            store={"type": "redis", "url": redis.url, "timeout_seconds": 0.5},
        )
        config["cache"] = {"backend": "redis"}
        config["cluster"] = {"max_parked": 64}
        config["limits"] = {"max_body_bytes": 65536}
        replica = Replica(0, tmp, config)
        stack.callback(replica.stop)
        replica.start(generate_key())
        _wait(
            "the gateway ready", lambda: _ready(replica.base), timeout=120, process=replica.process
        )
        _drive(replica, redis)
        identity = _identity_gateway(stack, tmp, upstream)

        port = free_port()
        scrape = yaml.safe_load(SCRAPE_CONFIG.read_text())
        scrape["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        scrape["rule_files"] = [str(RULES)]
        job = next(j for j in scrape["scrape_configs"] if j["job_name"] == JOB)
        job["static_configs"] = [
            {"targets": [f"127.0.0.1:{replica.port}", f"127.0.0.1:{identity.port}"]}
        ]
        scrape["scrape_configs"] = [job]
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(scrape))
        server = stack.enter_context(
            ManagedProcess(
                "prometheus",
                [
                    prometheus,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                log_path=tmp / "prometheus.log",
            )
        )
        wait_for_port(port, timeout=60, process=server)
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0, trust_env=False)
        stack.callback(api.close)

        def query(path: str, params: dict[str, Any] | None = None) -> Any:
            response = api.get(path, params=params)
            doc = response.json()
            assert doc["status"] == "success", (path, params, doc)
            return doc["data"]

        # Scraped once: everything the gateway exports is there (the first scrape carries it all).
        _wait(
            "Prometheus scraped the gateway",
            lambda: (
                _ready_http(api)
                and len(query("/api/v1/query", {"query": f'up{{job="{JOB}"}} == 1'})["result"]) == 2
            ),
            timeout=60,
            process=server,
        )
        yield Scraped(f"http://127.0.0.1:{port}", replica, query)


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=2.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


def _ready_http(api: httpx.Client) -> bool:
    try:
        return api.get("/-/ready").status_code == 200
    except httpx.HTTPError:
        return False


def _check_reads(scraped: Scraped, exprs: list[str], where: str) -> None:
    """Every metric the expressions read was scraped (or is recorded by rules.yml) with every
    label their matchers use, and every label they group by is on one of their metrics."""
    labels_of: dict[str, set[str]] = {}
    problems = []
    for expr in exprs:
        found = reads(expr)
        union: set[str] = set()
        for selector in found.selectors:
            metric = selector.metric
            if metric in recorded():
                labels = recorded_labels(metric)
                if not selector.labels <= labels:
                    problems.append(
                        f"{metric}: recorded without {sorted(selector.labels - labels)}"
                    )
                union |= labels
                continue
            if metric not in labels_of:
                series = scraped.series(metric)
                labels_of[metric] = {name for s in series for name in s}
                if not series:
                    problems.append(f"{metric}: not in the scraped data")
            missing = selector.labels - labels_of[metric]
            if labels_of[metric] and missing:
                problems.append(f"{metric}: no label {sorted(missing)}")
            union |= labels_of[metric]
        if union and not found.grouping <= union:
            problems.append(
                f"{expr!r}: groups by {sorted(found.grouping - union)}, which none of its metrics has"
            )
    assert not problems, f"{where}:\n" + "\n".join(problems)


def test_prometheus_scraped_every_metric_and_label_the_rules_read(scraped: Scraped) -> None:
    exprs = [rule["expr"] for rule in rules_of("record") + rules_of("alert")]
    _check_reads(scraped, exprs, "rules.yml")
    # The series the gateway exports with labels of its own values the rules rely on.
    assert {s["reason"] for s in scraped.series("mcp_edge_state_rejections_total")} >= {"malformed"}
    assert {s["reason"] for s in scraped.series("mcp_edge_body_refused_total")} >= {"size"}
    assert {s["kind"] for s in scraped.series('mcp_edge_upstream_errors_total{route="down"}')} >= {
        "unreachable"
    }
    assert {
        (s["endpoint"], s["reason"]) for s in scraped.series("mcp_edge_peer_refused_total")
    } >= {("forward", "seal")}
    assert {s["outcome"] for s in scraped.series("mcp_edge_token_exchanges_total")} >= {
        "ok",
        "failed",
    }
    first = f'instance="127.0.0.1:{scraped.gateway.port}"'
    capacity = scraped.query(
        "/api/v1/query", {"query": f"mcp_edge_bridge_parked_capacity{{{first}}}"}
    )["result"]
    assert [float(r["value"][1]) for r in capacity] == [64.0], "cluster.max_parked, exported"
    era = scraped.query(
        "/api/v1/query", {"query": 'max by (route) (mcp_edge_upstream_era{route="down"})'}
    )["result"]
    assert [float(r["value"][1]) for r in era] == [0.0], (
        "an unreachable upstream's era stays unknown"
    )
    members = scraped.query("/api/v1/query", {"query": 'mcp_edge_member_up{route="fed"}'})
    assert {r["metric"]["member"]: float(r["value"][1]) for r in members["result"]} == {
        "up": 1.0,
        "gone": 0.0,
    }, "a federated route's members, each up or down"


def test_every_rule_evaluates_in_prometheus(scraped: Scraped) -> None:
    """Each recording rule's expression runs through the query API; Prometheus's own rule
    manager evaluates every rule of the file without an error."""
    for rule in rules_of("record"):
        data = scraped.query("/api/v1/query", {"query": rule["expr"]})
        assert data["resultType"] == "vector", rule["record"]

    def evaluated() -> list[dict[str, Any]] | None:
        groups = scraped.query("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        done = rules and all(r.get("lastEvaluation", "").startswith("2") for r in rules)
        return rules if done else None

    rules = _wait("every rule evaluated", evaluated, timeout=60)
    assert len(rules) == len(rules_of("record")) + len(rules_of("alert"))
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # Recorded series appear for what was driven (the refused state, the upstream errors).
    _wait(
        "recorded rejections",
        lambda: scraped.query(
            "/api/v1/query",
            {
                "query": 'route_reason:mcp_edge_state_rejections:rate5m{route="default", reason="malformed"}'
            },
        )["result"],
        timeout=60,
    )


def test_dashboard_reads_only_scraped_metrics(scraped: Scraped) -> None:
    _check_reads(scraped, dashboard_expressions(dashboard()), "deploy/grafana/mcp-edge.json")
    for expr in dashboard_expressions(dashboard()):
        promql = expr.replace("$__rate_interval", "1m").replace("$job", JOB).replace("$route", ".*")
        scraped.query("/api/v1/query", {"query": promql})


# ================================================================ regenerating the PrometheusRule


def write_prometheus_rule() -> None:
    """deploy/kubernetes/components/prometheus/prometheusrule.yaml from rules.yml."""
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "mcp-edge", "labels": {"app.kubernetes.io/name": "mcp-edge"}},
        "spec": {"groups": rule_groups()},
    }

    class Dumper(yaml.SafeDumper):
        pass

    def text_block(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        return dumper.represent_scalar(
            "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
        )

    Dumper.add_representer(str, text_block)
    header = "# Generated from deploy/prometheus/rules.yml: uv run python -m tests.deploy.test_alerting\n"
    text = yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=120, allow_unicode=True)
    (COMPONENT / "prometheusrule.yaml").write_text(header + text)


if __name__ == "__main__":
    write_prometheus_rule()
