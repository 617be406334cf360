"""Shared fixtures: real upstream processes and real gateway processes, always stopped."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml

from mcp_edge.core.seal import generate_key
from tests.support.processes import (
    ManagedProcess,
    free_port,
    python_script,
    serving,
    venv_command,
    write_private,
)

if TYPE_CHECKING:
    from tests.support.authserver import AuthServer

REQUIRE_ALL = os.environ.get("REQUIRE_ALL") == "1"


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C at its default, as at a terminal. A runner started in the background without job
    control ignores SIGINT, and every process the tests start would inherit that: the tests that
    press Ctrl-C on a command would then wait for it in vain."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def require(condition: bool, reason: str) -> None:
    """Skip when a real dependency is missing; in CI (REQUIRE_ALL=1) fail instead."""
    if condition:
        return
    if REQUIRE_ALL:
        pytest.fail(f"required dependency missing: {reason}")
    pytest.skip(reason)


@dataclass
class Running:
    url: str
    port: int
    process: ManagedProcess

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="session")
def state_key() -> str:
    return generate_key()


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    return d


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("module")


def start_upstream(stack: ExitStack, script: str, tmp: Path, *args: str) -> Running:
    port = free_port()
    name = Path(script).stem
    process = stack.enter_context(
        serving(
            name,
            python_script(script, "--port", str(port), *args),
            port=port,
            log_path=tmp / f"{name}-{port}.log",
        )
    )
    return Running(url=f"http://127.0.0.1:{port}/mcp", port=port, process=process)


def start_gateway(
    stack: ExitStack,
    tmp: Path,
    *,
    upstream: str | None = None,
    config: dict | None = None,
    keys: str,
    env: dict[str, str] | None = None,
    anonymous: bool = True,
    startup_timeout: float = 30.0,
) -> Running:
    """A gateway process; ``startup_timeout`` for its first listener to accept (worker processes
    each import and build the whole gateway before any of them listens: slow on a loaded machine)."""
    port = free_port()
    argv = [*venv_command("mcp-edge"), "serve", "--port", str(port)]
    if upstream:
        argv += ["--upstream", upstream]
    if anonymous:
        argv.append("--anonymous")
    if config is not None:
        path = tmp / f"gateway-{port}.yaml"
        write_private(path, yaml.safe_dump(config))
        argv += ["--config", str(path)]
    process = stack.enter_context(
        serving(
            f"gateway-{port}",
            argv,
            port=port,
            log_path=tmp / f"gateway-{port}.log",
            env={"MCP_EDGE_STATE_KEYS": keys, **(env or {})},
            startup_timeout=startup_timeout,
        )
    )
    return Running(url=f"http://127.0.0.1:{port}/mcp", port=port, process=process)


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


GatewayFactory = Callable[..., Running]


@pytest.fixture(scope="module")
def authserver(module_tmp: Path) -> Iterator[AuthServer]:
    """The test authorization server (oidc-provider) with its default users and clients, one per
    test module (tests/support/authserver.py; ``start_authserver`` for other settings)."""
    from tests.support.authserver import start_authserver

    with ExitStack() as stack:
        yield start_authserver(stack, module_tmp / "authserver")
