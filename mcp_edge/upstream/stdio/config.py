"""A route's ``upstream:`` when it is a local server: ``{command: [argv...], env: ..., ...}``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from mcp_edge.sections import Section


class StdioLimits(Section):
    """Resource limits of each local server process (``setrlimit``, soft = hard, inherited by
    what it starts). ``null`` leaves a limit as the gateway's. Defaults measured with Node 22
    servers: see docs/legacy-and-stdio.md, "What a local server can reach"."""

    #: Private writable memory (RLIMIT_DATA: heap and anonymous mappings, what a program really
    #: allocates). ``npx`` fetching a package peaks between 256 and 512 MiB.
    memory_bytes: int | None = Field(2 * 1024**3, ge=64 * 1024**2)
    #: Address space (RLIMIT_AS). Off by default: V8 reserves about 10 GiB per WebAssembly memory
    #: (Node's own ``fetch`` uses one), so a bound a Node server survives bounds nothing real.
    address_space_bytes: int | None = Field(None, ge=64 * 1024**2)
    #: CPU seconds a process may use in its life (RLIMIT_CPU); then it is killed and restarted.
    cpu_seconds: int | None = Field(None, ge=1)
    #: Open files (RLIMIT_NOFILE).
    open_files: int | None = Field(1024, ge=16, le=1_048_576)
    #: Processes and threads of the child's user (RLIMIT_NPROC; a Node server uses about 11 per
    #: process). Applied only when children run as a user of their own: the count is per user.
    processes: int | None = Field(1024, ge=16)


class StdioUpstreamConfig(Section):
    """A local MCP server the gateway runs itself, speaking the 2025-era protocol over stdio."""

    #: The program and its arguments (an argv list: no shell is involved).
    command: list[str] = Field(min_length=1)
    #: Environment of the child, on top of a minimal inherited one (PATH, HOME, LANG, ...).
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    #: More variables to inherit from the gateway's environment (never its MCP_EDGE_* ones).
    inherit_env: list[str] = Field(default_factory=list)
    #: Working directory. Default: a fresh private directory owned by the child's user (also its
    #: HOME and TMPDIR unless ``env`` sets them), removed when the process exits.
    cwd: str | None = None
    #: The user (name or number) the processes run as when the gateway runs as root; default
    #: ``nobody``. A gateway that is not root cannot switch users: its children run as itself.
    user: str | None = None
    #: Their group (name or number); default: the user's primary group. No supplementary groups.
    group: str | None = None
    limits: StdioLimits = Field(default_factory=StdioLimits)
    #: Who shares a process, and so the server's session state (roots, log level,
    #: subscriptions): ``principal``, each caller its own processes; ``shared``, every caller the
    #: same ones. Default: ``principal`` when callers authenticate (auth mode jwt or
    #: trusted_header), ``shared`` with anonymous callers (one principal anyway).
    isolation: Literal["principal", "shared"] | None = None
    #: Processes to run (``shared``), or at most per caller (``principal``); each serves one
    #: call that may ask the client at a time.
    instances: int = Field(1, ge=1, le=32)
    #: ``principal`` isolation: processes of the route at most, for all callers together (the
    #: spare kept for the next new caller included).
    max_processes: int = Field(8, ge=1, le=1024)
    #: ``principal`` isolation: a caller's processes are stopped after this long unused.
    idle_seconds: float = Field(300.0, ge=1, le=7 * 24 * 3600)
    #: ``principal`` isolation: a caller's processes are never stopped to make room for another
    #: caller until they have been unused this long (capped at ``idle_seconds``); a new caller
    #: meanwhile is told busy (503). 0: the least recently used idle caller's, at once.
    min_residency_seconds: float = Field(30.0, ge=0, le=7 * 24 * 3600)
    #: What the processes are told the client can do (once, at initialize, for all callers).
    #: Each request is still only asked what it declared itself.
    capabilities: dict[str, Any] = Field(
        default_factory=lambda: {
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
        }
    )
    max_line_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024)
    #: Requests in flight on one process at most (then the caller gets 503).
    max_pending: int = Field(64, ge=1, le=10_000)
    stop_grace_seconds: float = Field(5.0, gt=0, le=120)
    restart_backoff_max: float = Field(30.0, gt=0, le=600)
    #: How long a call waits for a process to be free (all leased to calls awaiting answers).
    acquire_timeout: float = Field(30.0, gt=0, le=600)

    @field_validator("command")
    @classmethod
    def _argv(cls, v: list[str]) -> list[str]:
        if any(not isinstance(a, str) or not a for a in v):
            raise ValueError("every element of the command must be a non-empty string")
        return v

    @field_validator("capabilities")
    @classmethod
    def _caps(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = set(v) - {"elicitation", "sampling", "roots"}
        if unknown:
            raise ValueError(
                f"only elicitation, sampling and roots can be declared, not {sorted(unknown)}"
            )
        return v
