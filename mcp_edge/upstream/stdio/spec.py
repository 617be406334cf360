"""What a stdio route runs: the command, its environment, its bounds and how its processes are
shared (:class:`StdioSpec`), built from the route's ``upstream: {command: ...}`` section."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_edge.upstream.stdio import sandbox

#: Environment variables a child inherits from the gateway (everything else must be configured):
#: what a program needs to run and to reach the network through the host's proxy and CAs.
INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
#: Capabilities declared to a process by default: all the bridge can relay. A request is
#: still only ever asked what it declared itself (see the module docstring).
ALL_CAPABILITIES: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {},
    "roots": {},
}


@dataclass(frozen=True, slots=True)
class StdioSpec:
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    instances: int = 1
    inherit_env: tuple[str, ...] = ()
    capabilities: dict[str, Any] = field(default_factory=lambda: dict(ALL_CAPABILITIES))
    max_line_bytes: int = 4 * 1024 * 1024
    max_pending: int = 64
    stop_grace_seconds: float = 5.0
    restart_backoff_max: float = 30.0
    acquire_timeout: float = 30.0
    initialize_timeout: float = 60.0
    sandbox: sandbox.Sandbox = field(default_factory=sandbox.Sandbox)
    #: ``shared``: ``instances`` processes for every caller; ``principal``: up to ``instances``
    #: for each principal, ``max_processes`` in all, stopped after ``idle_seconds`` unused.
    isolation: Literal["principal", "shared"] = "shared"
    max_processes: int = 8
    idle_seconds: float = 300.0
    #: ``principal``: how long a caller's processes are kept from eviction after their last use.
    min_residency: float = 30.0

    def child_env(self) -> dict[str, str]:
        names = (*INHERITED_ENV, *self.inherit_env)
        env = {k: os.environ[k] for k in names if k in os.environ and not k.startswith("MCP_EDGE_")}
        env.update(self.env)
        return env


def build_spec(config: Any, *, authenticated: bool = True) -> StdioSpec:
    """A :class:`StdioSpec` from the route's ``upstream: {command: ...}`` section (raises
    :class:`sandbox.SandboxError` when its user, group or directories do not work here).
    ``authenticated``: callers are told apart (auth mode jwt or trusted_header), so each gets
    processes of its own unless the route says ``isolation: shared``."""
    identity = sandbox.resolve_identity(
        config.user, config.group, euid=os.geteuid(), egid=os.getegid()
    )
    box = sandbox.Sandbox(identity=identity, limits=sandbox.Limits(**config.limits.model_dump()))
    sandbox.check_reachable(box.tmp_root, identity)
    return StdioSpec(
        command=tuple(config.command),
        env=dict(config.env),
        cwd=config.cwd,
        instances=config.instances,
        inherit_env=tuple(config.inherit_env),
        capabilities=dict(config.capabilities),
        max_line_bytes=config.max_line_bytes,
        max_pending=config.max_pending,
        stop_grace_seconds=config.stop_grace_seconds,
        restart_backoff_max=config.restart_backoff_max,
        acquire_timeout=config.acquire_timeout,
        sandbox=box,
        isolation=config.isolation or ("principal" if authenticated else "shared"),
        max_processes=config.max_processes,
        idle_seconds=config.idle_seconds,
        min_residency=min(config.min_residency_seconds, config.idle_seconds),
    )
