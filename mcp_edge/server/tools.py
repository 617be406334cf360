"""``mcp-edge tools digests|accept``: the operator's side of tool definition pinning.

Pins live in the store's Redis (``store.type: redis``), so what is accepted here holds for every
replica (each picks it up within ``mcp_edge.policy.pins.LOCAL_SECONDS``). With the memory store
pins are per process and out of reach: accept a digest in ``policy.accepted_tools`` instead.
"""

from __future__ import annotations

import argparse
import socket

from mcp_edge.core.urls import redact
from mcp_edge.exits import FAILED, UNREACHABLE, CommandError
from mcp_edge.policy.config import DIGEST
from mcp_edge.policy.pins import PinBackend, PinStoreUnavailable
from mcp_edge.policy.wiring import build_pin_backend, pin_scope
from mcp_edge.server.config import ConfigError, GatewayConfig, RouteConfig


def _where(url: str) -> str:
    """The store's URL without its credentials."""
    return repr(redact(url))


def _reason(exc: PinStoreUnavailable, timeout: float) -> str:
    """Why the store did not answer, from the first telling exception in the chain."""
    cause: BaseException | None = exc.__cause__
    while cause is not None:
        if isinstance(cause, TimeoutError) or type(cause).__name__ == "TimeoutError":
            return f"no answer within {timeout:g} s"
        if isinstance(cause, socket.gaierror):
            return "cannot resolve its host name"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        if cause.__cause__ is None and cause.__context__ is None:
            return " ".join(str(cause).split()) or type(cause).__name__
        cause = cause.__cause__ or cause.__context__
    return str(exc)


async def run_tools_command(config: GatewayConfig, args: argparse.Namespace) -> int:
    route = next((r for r in config.routes if r.name == args.route), None)
    if route is None:
        raise ConfigError(
            f"no route named {args.route!r} (routes: {', '.join(r.name for r in config.routes)})"
        )
    if not route.policy.pin_tools:
        raise ConfigError(f"route {route.name!r} does not pin tools (policy.pin_tools: false)")
    if config.store.type != "redis":
        raise ConfigError(
            "pins are kept per process with store.type: memory; accept a digest by listing it in "
            f"routes ({route.name}).policy.accepted_tools instead"
        )
    digest = getattr(args, "digest", None)
    if digest is not None and not DIGEST.fullmatch(digest):
        raise ConfigError(f"--digest: {digest!r} is not a digest (sha256: and 64 hex digits)")
    backend = build_pin_backend(config.store)
    scope = pin_scope(config.gateway.id, route.name)
    try:
        if args.tools_command == "digests":
            return await _digests(backend, scope, route)
        return await _accept(backend, scope, route, args.tool, digest)
    except PinStoreUnavailable as exc:
        assert config.store.url is not None  # a redis store has one
        raise CommandError(
            f"tools: cannot reach the store's Redis at {_where(config.store.url)}: "
            f"{_reason(exc, config.store.timeout_seconds)}",
            UNREACHABLE,
        ) from None
    finally:
        await backend.aclose()


async def _digests(backend: PinBackend, scope: str, route: RouteConfig) -> int:
    states = await backend.all(scope)
    for name in sorted(states):
        st = states[name]
        accepted = set(route.policy.accepted_tools.get(name, ()))
        ok = st.seen is None or st.seen == st.pinned or st.seen in accepted
        print(
            f"{name}\tpinned {st.pinned or '-'}\tlast seen {st.seen or '-'}\t"
            f"{'ok' if ok else 'CHANGED (hidden)'}"
        )
    return 0


async def _accept(
    backend: PinBackend, scope: str, route: RouteConfig, tool: str, digest: str | None
) -> int:
    if digest is None:
        state = (await backend.read(scope, [tool]))[tool]
        if state.seen is None:
            raise CommandError(
                f"tools: no definition of {tool!r} seen on route {route.name!r}", FAILED
            )
        digest = state.seen
    await backend.accept(scope, tool, digest)
    print(f"accepted {tool} {digest} on route {route.name}")
    return 0
