"""Three listeners on one gateway process (``listen``, ``cluster.listen``, ``admin.listen``): each
endpoint answers on its own listener and 404s on the others, with one worker or several (whose
``/metrics`` on the admin port adds up every worker's counts); the admin endpoints read no body,
and no listener reads the body of a request for a path it does not serve;
ports that collide are refused with one line and the configuration error's exit code."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import start_gateway, start_upstream
from tests.support.processes import free_port, run_bounded, venv_command, write_private
from tests.support.raw_http import ACCEPT, MODERN, Conn, rpc

pytestmark = pytest.mark.integration

EXIT_CONFIG = 2
MCP_HEADERS = {
    "Accept": ACCEPT,
    "Content-Type": "application/json",
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tools/list",
}
ADMIN = ("/healthz", "/readyz", "/metrics")
PEER = ("/.mcp-edge/forward", "/.mcp-edge/legacy")
#: Worker processes listen once each has imported and built the whole gateway: under load
#: (2 cores shared with other test processes) that has taken up to a minute.
WORKERS_STARTUP = 150.0


@dataclass
class Gateway:
    public: int
    cluster: int
    admin: int

    def url(self, port: int, path: str) -> str:
        return f"http://127.0.0.1:{port}{path}"


def _wait_ready(http: httpx.Client, url: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if http.get(url).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} never answered 200"
        time.sleep(0.1)


@pytest.fixture(scope="module", params=[1, 2], ids=["one-worker", "two-workers"])
def gateway(request: pytest.FixtureRequest, module_tmp: Path, state_key: str) -> Iterator[Gateway]:
    tmp = module_tmp / f"workers-{request.param}"
    tmp.mkdir()
    with ExitStack() as stack:
        upstream = start_upstream(stack, "streaming.py", tmp)
        cluster, admin = free_port(), free_port()
        config = {
            "cluster": {"listen": {"port": cluster}},
            "admin": {"listen": {"port": admin}},
            "listen": {"workers": request.param},
        }
        public = start_gateway(
            stack,
            tmp,
            upstream=upstream.url,
            keys=state_key,
            config=config,
            startup_timeout=WORKERS_STARTUP,
        )
        gw = Gateway(public.port, cluster, admin)
        with httpx.Client(timeout=10, trust_env=False) as http:
            _wait_ready(http, gw.url(admin, "/readyz"))
        yield gw


def test_each_endpoint_answers_on_its_own_listener_only(gateway: Gateway) -> None:
    with httpx.Client(timeout=10, trust_env=False) as http:
        # Public: the MCP routes and the OAuth metadata, nothing else.
        listed = http.post(
            gateway.url(gateway.public, "/mcp"),
            headers=MCP_HEADERS,
            content=rpc("marker-1", "tools/list"),
        )
        assert (
            listed.status_code == 200
            and listed.json()["id"] == "marker-1"
            and listed.json()["result"]["tools"]
        )
        for path in ADMIN:
            assert http.get(gateway.url(gateway.public, path)).status_code == 404, path
        for path in PEER:
            assert http.post(gateway.url(gateway.public, path), content=b"x").status_code == 404, (
                path
            )
        # Cluster: the replicas' endpoints (refused there for want of a sealed header: served).
        for path in PEER:
            assert http.post(gateway.url(gateway.cluster, path), content=b"x").status_code == 403, (
                path
            )
        for path in ADMIN:
            assert http.get(gateway.url(gateway.cluster, path)).status_code == 404, path
        mcp = http.post(
            gateway.url(gateway.cluster, "/mcp"), headers=MCP_HEADERS, content=rpc(2, "tools/list")
        )
        assert mcp.status_code == 404
        # Admin: the probes and the scraper, nothing else.
        health = http.get(gateway.url(gateway.admin, "/healthz"))
        assert health.status_code == 200 and health.json()["status"] == "ok"
        ready = http.get(gateway.url(gateway.admin, "/readyz"))
        assert ready.status_code == 200 and ready.json()["status"] == "ready"
        assert http.head(gateway.url(gateway.admin, "/healthz")).status_code == 200
        metrics = http.get(gateway.url(gateway.admin, "/metrics"))
        assert metrics.status_code == 200 and "mcp_edge_requests_total" in metrics.text
        mcp = http.post(
            gateway.url(gateway.admin, "/mcp"), headers=MCP_HEADERS, content=rpc(3, "tools/list")
        )
        assert mcp.status_code == 404
        for path in PEER:
            assert http.post(gateway.url(gateway.admin, path), content=b"x").status_code == 404, (
                path
            )
        for path in ("/.well-known/oauth-protected-resource/mcp", "/", "/anything"):
            assert http.get(gateway.url(gateway.admin, path)).status_code == 404, path


def test_metrics_on_the_admin_port_count_every_worker(gateway: Gateway) -> None:
    """Calls on the public port (fresh connections, so every worker takes some) show in
    ``/metrics`` on the admin port, whichever worker answers it."""

    def calls(text: str) -> float:
        lines = [
            line
            for line in text.splitlines()
            if line.startswith("mcp_edge_requests_total{") and 'method="tools/call"' in line
        ]
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines)

    call = {**MCP_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "big"}
    with httpx.Client(timeout=10, trust_env=False) as http:
        before = calls(http.get(gateway.url(gateway.admin, "/metrics")).text)
    for n in range(6):
        with httpx.Client(timeout=20, trust_env=False) as http:
            body = rpc(f"count-{n}", "tools/call", name="big", arguments={"size": 7})
            done = http.post(gateway.url(gateway.public, "/mcp"), headers=call, content=body)
            assert done.status_code == 200 and done.json()["id"] == f"count-{n}", done.text
    for _ in range(6):
        with httpx.Client(timeout=10, trust_env=False) as http:  # fresh connections: any worker
            assert calls(http.get(gateway.url(gateway.admin, "/metrics")).text) == before + 6


@pytest.mark.parametrize(
    ("head", "status"),
    [
        ("POST /healthz HTTP/1.1\r\nContent-Length: 1000000\r\n", 405),
        ("PUT /metrics HTTP/1.1\r\n", 405),
        ("GET /metrics HTTP/1.1\r\nContent-Length: 1000000\r\n", 413),
        ("GET /readyz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n", 413),
    ],
    ids=["post", "put", "get-with-length", "get-chunked"],
)
def test_admin_endpoints_read_no_body(gateway: Gateway, head: str, status: int) -> None:
    """Refused from the head alone: the body is never sent, the answer comes anyway and the
    connection is closed."""
    with Conn.open(gateway.admin, timeout=10) as conn:
        conn.send(f"{head}Host: 127.0.0.1\r\n\r\n".encode())
        answer = conn.read_response()
        assert answer.status == status
        if status == 405:
            assert answer.headers["allow"] == "GET, HEAD"
        assert answer.headers.get("connection") == "close"
        assert conn.wait_closed(5)


#: 50 MB announced, never sent.
LARGE = 50_000_000


@pytest.mark.parametrize(
    ("listener", "method", "path"),
    [
        ("admin", "POST", "/mcp"),
        ("admin", "POST", "/anything"),
        ("admin", "POST", "/.mcp-edge/forward"),
        ("public", "POST", "/unknown"),
        ("public", "POST", "/healthz"),
        ("public", "PUT", "/.mcp-edge/forward"),
        ("public", "POST", "/.well-known/oauth-protected-resource/mcp"),
        ("cluster", "POST", "/mcp"),
        ("cluster", "POST", "/.mcp-edge/nothing-here"),
        ("cluster", "POST", "/metrics"),
    ],
)
def test_a_path_a_listener_does_not_serve_is_refused_without_reading_its_body(
    gateway: Gateway, listener: str, method: str, path: str
) -> None:
    """Only the head of a request announcing a large body is sent: the 404 comes at once, says
    the connection closes, and the server closes it (EOF) instead of reading the body to keep the
    connection for a next request."""
    port = getattr(gateway, listener)
    with Conn.open(port, timeout=10) as conn:
        conn.send(
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {LARGE}\r\n\r\n".encode()
        )
        answer = conn.read_response()
        assert answer.status == 404, answer
        assert answer.headers.get("connection") == "close", answer.headers
        assert conn.wait_closed(5), "the connection was kept open (waiting for the body)"


def _serve(
    tmp: Path, config: dict, env: dict[str, str], state_key: str, *command: str
) -> tuple[int | None, str]:
    path = tmp / "ports.yaml"
    write_private(
        path,
        yaml.safe_dump(
            {
                "auth": {"mode": "anonymous"},
                "routes": [{"name": "a", "upstream": "http://127.0.0.1:1/mcp"}],
                **config,
            }
        ),
    )
    done = run_bounded(
        [*venv_command("mcp-edge"), *command, "--config", str(path)],
        timeout=60,
        env={"MCP_EDGE_STATE_KEYS": state_key, **env},
    )
    return done.returncode, done.output


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        (
            {"listen": {"port": 18461}, "admin": {"listen": {"port": 18461}}},
            {},
            "admin.listen.port: must differ from listen.port",
        ),
        (
            {"cluster": {"listen": {"port": 18462}}, "admin": {"listen": {"port": 18462}}},
            {},
            "admin.listen.port: must differ from cluster.listen.port",
        ),
        (
            {"listen": {"port": 18463}},
            {"MCP_EDGE_ADMIN_PORT": "18463"},
            "admin.listen.port: must differ from listen.port",
        ),
    ],
    ids=["admin-public", "admin-cluster", "env"],
)
@pytest.mark.parametrize("command", [("serve",), ("check-config",)])
def test_listeners_sharing_a_port_are_refused(
    tmp_path: Path,
    state_key: str,
    config: dict,
    env: dict[str, str],
    message: str,
    command: tuple[str, ...],
) -> None:
    code, output = _serve(tmp_path, config, env, state_key, *command)
    assert code == EXIT_CONFIG, output
    lines = output.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("mcp-edge: configuration error:")
        and message in lines[0]
    ), output
    assert "Traceback" not in output


def test_check_config_prints_the_listeners(tmp_path: Path, state_key: str) -> None:
    config = {
        "listen": {"host": "127.0.0.1", "port": 18471},
        "cluster": {"listen": {"port": 18472}},
        "admin": {"listen": {"port": 18473}},
    }
    code, output = _serve(tmp_path, config, {}, state_key, "check-config")
    assert code == 0, output
    assert output.splitlines()[:3] == [
        "listener public: http://127.0.0.1:18471 (MCP routes, OAuth metadata)",
        "listener cluster: http://127.0.0.1:18472 (/.mcp-edge/*)",
        "listener admin: http://127.0.0.1:18473 (/healthz, /readyz, /metrics)",
    ]
    code, output = _serve(
        tmp_path, {"listen": {"host": "127.0.0.1", "port": 18471}}, {}, state_key, "check-config"
    )
    assert code == 0, output
    assert output.splitlines()[0] == (
        "listener public: http://127.0.0.1:18471 (MCP routes, OAuth metadata; /.mcp-edge/*; /healthz, /readyz, /metrics)"
    )
