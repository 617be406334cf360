"""Configuration precedence, validation messages and the CLI's exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mcp_edge.core.seal import generate_key
from mcp_edge.server.cli import main
from mcp_edge.server.config import ConfigError, load_config, load_key_ring


def test_precedence_file_env_flags(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "listen: {port: 9001}\nroutes: [{name: a, path: /mcp, upstream: 'http://127.0.0.1:1/mcp'}]\n"
    )
    assert load_config(str(cfg), env={}).listen.port == 9001
    assert load_config(str(cfg), env={"MCP_EDGE_PORT": "9002"}).listen.port == 9002
    assert (
        load_config(str(cfg), env={"MCP_EDGE_PORT": "9002"}, flags={"port": 9003}).listen.port
        == 9003
    )
    c = load_config(str(cfg), env={}, flags={"upstream": "http://127.0.0.1:2/mcp"})
    assert c.routes[0].upstream == "http://127.0.0.1:2/mcp" and c.routes[0].name == "a"


def test_kubernetes_service_links_are_ignored():
    c = load_config(
        None, env={"MCP_EDGE_PORT": "tcp://10.0.0.1:80", "MCP_EDGE_UPSTREAM": "http://u:1/mcp"}
    )
    assert c.listen.port == 8080


@pytest.mark.parametrize(
    "flags,field",
    [
        ({"upstream": "ftp://x"}, "routes.0.upstream"),
        ({"upstream": "http://x/mcp", "port": 70000}, "listen.port"),
        ({}, "no route configured"),
    ],
)
def test_errors_name_the_field(flags, field):
    with pytest.raises(ConfigError) as info:
        load_config(None, env={}, flags=flags)
    assert field in str(info.value)


def test_unknown_keys_are_rejected(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("listen: {prot: 1}\nroutes: [{upstream: 'http://x/mcp'}]\n")
    with pytest.raises(ConfigError, match="listen.prot"):
        load_config(str(cfg), env={})


def test_key_ring_sources(tmp_path):
    k1, k2 = generate_key(), generate_key()
    keyfile = tmp_path / "keys"
    keyfile.write_text(f"{k1}\n{k2}\n")
    c = load_config(None, env={"MCP_EDGE_UPSTREAM": "http://x/mcp"})
    with pytest.raises(ConfigError, match="no state key"):
        load_key_ring(c.state)
    c.state.key_files = [str(keyfile)]
    ring = load_key_ring(c.state)
    assert len(ring.keys) == 2
    c = load_config(
        None, env={"MCP_EDGE_UPSTREAM": "http://x/mcp", "MCP_EDGE_STATE_KEYS": f"{k2},{k1}"}
    )
    assert load_key_ring(c.state).current.kid == ring.keys[1].kid
    c.state.keys = ["c2hvcnQ"]
    with pytest.raises(ConfigError, match="at least 32 bytes"):
        load_key_ring(c.state)


def test_cli_exit_codes(monkeypatch, capsys):
    monkeypatch.delenv("MCP_EDGE_STATE_KEYS", raising=False)
    assert main(["serve", "--upstream", "http://127.0.0.1:1/mcp", "--anonymous"]) == 2
    assert "no state key" in capsys.readouterr().err
    monkeypatch.setenv("MCP_EDGE_STATE_KEYS", generate_key())
    assert main(["serve", "--upstream", "http://127.0.0.1:1/mcp"]) == 2
    assert "--anonymous" in capsys.readouterr().err
    assert main(["keys", "generate", "--count", "2"]) == 0
    assert len(capsys.readouterr().out.split()) == 2


def test_version_and_help_on_every_command():
    for args in (
        ["--version"],
        ["--help"],
        ["serve", "--help"],
        ["demo", "--help"],
        ["keys", "--help"],
        ["keys", "generate", "--help"],
        ["try", "--help"],
        ["check-config", "--help"],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "mcp_edge", *args], capture_output=True, text=True, timeout=30
        )
        assert out.returncode == 0, (args, out.stderr)
        assert "mcp-edge" in out.stdout


CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


@pytest.mark.parametrize(
    "path", sorted(str(p) for p in CONFIG_DIR.glob("*.yaml")), ids=lambda p: Path(p).name
)
def test_every_example_config_builds(path, monkeypatch):
    """The documented examples load, validate and build a gateway (secrets they name are set)."""
    from mcp_edge.server.app import GatewayApp

    for name in (
        "UPSTREAM_TOKEN",
        "EDGE_SHARED_SECRET",
        "UPSTREAM_SHARED_SECRET",
        "EXCHANGE_CLIENT_SECRET",
        "CONSENT_SECRET",
        "DRIVE_SECRET",
    ):
        monkeypatch.setenv(name, "x" * 40)
    config = load_config(path, env={"MCP_EDGE_STATE_KEYS": generate_key()})
    GatewayApp(config, load_key_ring(config.state))


def test_empty_section_means_defaults(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("security:\nlimits:\nroutes: [{upstream: 'http://x/mcp'}]\n")
    assert load_config(str(cfg), env={}).limits.max_body_bytes == 4 * 1024 * 1024
