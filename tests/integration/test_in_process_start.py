"""``mcp_edge.Edge`` in real uvicorn processes, where the lifespan decides: a wrapped app whose
own start fails, an Edge its host app builds (``Middleware(Edge)``) without a key ring, under
uvicorn's default ``--lifespan auto`` and with ``--lifespan off``; and the edge cache of an Edge
whose app gets the client's ``Host``, under several allowed hosts.

Servers: ``tests/servers/in_process.py`` (shapes ``failing``, ``host-page``, ``cached``), each in
its own process, stopped by its test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import (
    ManagedProcess,
    free_port,
    python_script,
    run_bounded,
    wait_for_port,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MODERN = "2026-07-28"
#: No key ring for the Edge: an empty MCP_EDGE_STATE_KEYS is no key (the variable unset).
NO_KEY = {"MCP_EDGE_STATE_KEYS": ""}


def mcp_request(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {**(params or {}), "_meta": meta},
    }


def mcp_headers(method: str, **extra: str) -> dict[str, str]:
    return {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **extra,
    }


def lines_with(output: str, text: str) -> list[str]:
    return [line for line in output.splitlines() if text in line]


def test_an_app_that_fails_to_start_is_reported_by_its_cause_in_one_line(state_key: str) -> None:
    """uvicorn prints the Edge's one line, which ends with the app's exception (not inside the
    traceback Starlette's router sends), and exits."""
    argv = python_script("in_process.py", "failing", "--port", str(free_port()))
    done = run_bounded(argv, timeout=60, env={"MCP_EDGE_STATE_KEYS": state_key})
    assert done.returncode == 3, done.output  # uvicorn: the application's start-up failed
    (line,) = lines_with(done.output, "mcp-edge:")
    assert line.endswith(
        "mcp-edge: the wrapped app did not start: RuntimeError: database is down "
        "(postgres://db.internal:5432: connection refused)"
    ), done.output
    assert "Traceback" not in done.output


def test_no_key_ring_under_middleware_stops_the_server_under_lifespan_auto() -> None:
    """uvicorn's default takes an exception in the lifespan for "no lifespan support" and serves
    on: the Edge its host app builds reports its error by the lifespan's answer instead, which
    stops the server, in one line that names the option."""
    argv = python_script(
        "in_process.py", "host-page", "--port", str(free_port()), "--lifespan", "auto"
    )
    done = run_bounded(argv, timeout=60, env=NO_KEY)
    assert done.returncode == 3, done.output
    (line,) = lines_with(done.output, "mcp-edge: ")
    assert "mcp-edge: no state key: pass state_keys=" in line, done.output
    assert "Traceback" not in done.output


@pytest.fixture
def keyless_host(tmp_path: Path) -> Iterator[tuple[str, ManagedProcess]]:
    port = free_port()
    argv = python_script("in_process.py", "host-page", "--port", str(port), "--lifespan", "off")
    with ManagedProcess("host-page", argv, log_path=tmp_path / "host.log", env=NO_KEY) as proc:
        wait_for_port(port, timeout=60, process=proc)
        yield f"http://127.0.0.1:{port}", proc


def test_no_key_ring_without_a_lifespan_refuses_mcp_and_serves_the_hosts_pages(
    keyless_host: tuple[str, ManagedProcess],
) -> None:
    base, proc = keyless_host
    with httpx.Client(base_url=base, timeout=10, trust_env=False) as client:
        page = client.get("/hello")
        assert (page.status_code, page.text) == (200, "hello from the host app")
        answer = client.post(
            "/mcp", json=mcp_request("tools/list"), headers=mcp_headers("tools/list")
        )
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["data"] == {"reason": "not_started"}
        assert client.get("/hello").status_code == 200
    log = proc.log_tail(20_000)
    assert len(lines_with(log, "mcp-edge could not start: no state key: pass state_keys=")) == 1
    assert "Traceback" not in log


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory, state_key: str) -> Iterator[str]:
    port = free_port()
    argv = python_script(
        "in_process.py", "cached", "--port", str(port), "--keys", os.urandom(32).hex()
    )
    log = tmp_path_factory.mktemp("cached") / "cached.log"
    with ManagedProcess("cached", argv, log_path=log, env={"MCP_EDGE_STATE_KEYS": state_key}) as p:
        wait_for_port(port, timeout=60, process=p)
        yield f"http://127.0.0.1:{port}"


def test_the_cache_keys_on_the_host_the_app_gets(cached: str) -> None:
    """An answer filled for one Host is never a hit for another: each allowed host's first list
    reaches the app (which gets that Host), and its second is the cache's."""

    def tools_list(client: httpx.Client, host: str) -> None:
        answer = client.post(
            "/mcp", json=mcp_request("tools/list"), headers=mcp_headers("tools/list", Host=host)
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["tools"]

    with httpx.Client(base_url=cached, timeout=10, trust_env=False) as client:
        for host in ("evil.example", "app.example", "tenant-b.example", "app.example"):
            tools_list(client, host)
        reached = client.get("/stats").json()["hosts"]
    assert reached == {"evil.example": 1, "app.example": 1, "tenant-b.example": 1}
