"""The admin listener (``admin.listen``): its configuration, the roles it takes from the public
listener, and the admin endpoints' refusal of methods and bodies they never read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_edge.cluster.listeners import ADMIN, CLUSTER, PUBLIC, Listener, Roles, admin_refusal
from mcp_edge.server.config import ConfigError, load_config

ROUTE = [{"name": "a", "upstream": "http://127.0.0.1:1/mcp"}]


def write(tmp_path: Path, doc: dict[str, Any]) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump({"routes": ROUTE, **doc}))
    return str(path)


def test_admin_listener_config(tmp_path: Path):
    config = load_config(
        write(
            tmp_path,
            {
                "listen": {"host": "10.0.0.5", "port": 8080},
                "cluster": {"listen": {"port": 9090}},
                "admin": {"listen": {"host": "0.0.0.0", "port": 9100}},
            },
        ),
        env={},
    )
    assert [(x.role, x.host, x.port) for x in config.listeners()] == [
        (PUBLIC, "10.0.0.5", 8080),
        (CLUSTER, "10.0.0.5", 9090),
        (ADMIN, "0.0.0.0", 9100),
    ]
    env = load_config(write(tmp_path, {}), env={"MCP_EDGE_ADMIN_PORT": "9191"})
    assert [(x.role, x.host, x.port) for x in env.listeners()][1:] == [(ADMIN, "127.0.0.1", 9191)]
    links = load_config(write(tmp_path, {}), env={"MCP_EDGE_ADMIN_PORT": "tcp://10.0.0.1:9"})
    assert links.admin.listen is None  # a Kubernetes service link, not a setting
    assert load_config(write(tmp_path, {}), env={}).listeners() == [
        Listener(PUBLIC, "127.0.0.1", 8080)
    ]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"listen": {"port": 9100}, "admin": {"listen": {"port": 9100}}},
            "admin.listen.port: must differ from listen.port",
        ),
        (
            {"cluster": {"listen": {"port": 9100}}, "admin": {"listen": {"port": 9100}}},
            "admin.listen.port: must differ from cluster.listen.port",
        ),
        ({"admin": {"listen": {"port": 0}}}, "admin.listen.port"),
    ],
)
def test_admin_listener_ports_are_its_own(tmp_path: Path, doc: dict[str, Any], message: str):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, doc), env={})
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_admin_listener_takes_the_admin_endpoints():
    roles = Roles(
        [
            Listener(PUBLIC, "0.0.0.0", 8080),
            Listener(CLUSTER, "0.0.0.0", 9090),
            Listener(ADMIN, "0.0.0.0", 9100),
        ]
    )
    public, cluster, admin = ({"server": ("10.0.0.1", port)} for port in (8080, 9090, 9100))
    for path in ("/healthz", "/readyz", "/metrics"):
        assert roles.allows({**admin, "path": path})
        assert not roles.allows({**public, "path": path}) and not roles.allows(
            {**cluster, "path": path}
        )
    for path in ("/mcp", "/.well-known/oauth-protected-resource/mcp", "/.mcp-edge/forward", "/"):
        assert not roles.allows({**admin, "path": path}), path
    assert roles.allows({**public, "path": "/mcp"}) and roles.allows(
        {**cluster, "path": "/.mcp-edge/forward"}
    )
    # Only an admin listener: the replicas' endpoints stay on the public one.
    two = Roles([Listener(PUBLIC, "0.0.0.0", 8080), Listener(ADMIN, "0.0.0.0", 9100)])
    assert two.allows({**public, "path": "/.mcp-edge/forward"}) and not two.allows(
        {**public, "path": "/metrics"}
    )


@pytest.mark.parametrize(
    ("method", "headers", "status"),
    [
        ("GET", [], None),
        ("HEAD", [(b"content-length", b"0")], None),
        ("POST", [], 405),
        ("DELETE", [], 405),
        ("GET", [(b"content-length", b"1")], 413),
        ("GET", [(b"transfer-encoding", b"chunked")], 413),
    ],
)
def test_admin_endpoints_take_no_body(
    method: str, headers: list[tuple[bytes, bytes]], status: int | None
):
    assert admin_refusal({"method": method, "headers": headers}) == status
