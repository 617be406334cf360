"""The same wrapped app, ``Edge(app)`` in two uvicorn processes, behind nginx round robin: each
process finishes the MRTR flows the other started.

Both processes read the one key ring (``MCP_EDGE_STATE_KEYS``) and their SDK apps share one
request-state secret (the SDK's own seal, inside the Edge's, must open on the other process
too). Each names itself in the tool's result (``served by p0 x2, p1 x2``); nginx's access log
names the process of each request, found by the flow's marker.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.scale.cluster import NGINX, Nginx
from tests.scale.conftest import require_binary
from tests.scale.flows import SurveyFlow
from tests.support.processes import ManagedProcess, free_port, python_script, wait_for_port
from tests.support.raw_http import new_marker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


class Pair:
    def __init__(self, nginx: Nginx, ports: list[int]) -> None:
        self.nginx = nginx
        self.ports = ports

    @property
    def url(self) -> str:
        return self.nginx.base + "/mcp"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    require_binary(NGINX, "nginx")
    tmp: Path = tmp_path_factory.mktemp("in-process-pair")
    env = {"MCP_EDGE_STATE_KEYS": generate_key()}
    app_key = os.urandom(32).hex()
    ports = [free_port(), free_port()]
    processes: list[ManagedProcess] = []
    nginx: Nginx | None = None
    try:
        for index, port in enumerate(ports):
            argv = python_script(
                "in_process.py",
                "wrapped",
                "--port",
                str(port),
                "--keys",
                app_key,
                "--instance",
                f"p{index}",
            )
            processes.append(
                ManagedProcess(f"p{index}", argv, log_path=tmp / f"p{index}.log", env=env)
            )
        nginx = Nginx(tmp, ports)
        for process, port in zip(processes, ports, strict=True):
            wait_for_port(port, timeout=120, process=process)
        nginx.wait()
        yield Pair(nginx, ports)
    finally:
        if nginx is not None:
            nginx.stop()
        for process in processes:
            process.stop()


async def test_each_process_finishes_the_others_flows(pair: Pair) -> None:
    flows = [SurveyFlow(f"rr{i}", pair.url, marker=new_marker()) for i in range(4)]
    async with httpx.AsyncClient(timeout=15.0, trust_env=False) as client:
        # One flow at a time, so that round robin alternates within each flow.
        for flow in flows:
            await flow.run(client)
    for flow in flows:
        assert flow.completed, (flow.result, flow.error, flow.status)
        assert all(state.startswith("mcpe1.") for state in flow.states)
        # Four requests alternating over two processes: two each, and nginx agrees.
        assert sorted(flow.served_by.split(", ")) == ["p0 x2", "p1 x2"], flow.served_by
        entries = await asyncio.to_thread(pair.nginx.wait_marked, flow.marker, 4)
        backends = {entry.rsplit("upstream=", 1)[1] for entry in entries}
        assert backends == {f"127.0.0.1:{port}" for port in pair.ports}, entries
