"""``mcp-edge tools digests|accept``: the operator's side of tool definition pinning.

Pins live in the store's Redis (``store.type: redis``), so what is accepted here holds for every
replica (each picks it up within ``gateway.policy.pins.LOCAL_SECONDS``). With the memory store
pins are per process and out of reach: accept a digest in ``policy.accepted_tools`` instead.
"""

from __future__ import annotations

import argparse
import sys

from gateway.policy.config import DIGEST
from gateway.policy.wiring import build_pin_backend, pin_scope
from gateway.server.config import ConfigError, GatewayConfig

EXIT_NOT_FOUND = 1


async def run_tools_command(config: GatewayConfig, args: argparse.Namespace) -> int:
    route = next((r for r in config.routes if r.name == args.route), None)
    if route is None:
        raise ConfigError(f"no route named {args.route!r} (routes: {', '.join(r.name for r in config.routes)})")
    if not route.policy.pin_tools:
        raise ConfigError(f"route {route.name!r} does not pin tools (policy.pin_tools: false)")
    if config.store.type != "redis":
        raise ConfigError(
            "pins are kept per process with store.type: memory; accept a digest by listing it in "
            f"routes ({route.name}).policy.accepted_tools instead"
        )
    backend = build_pin_backend(config.store)
    scope = pin_scope(config.gateway.id, route.name)
    try:
        if args.tools_command == "digests":
            states = await backend.all(scope)
            for name in sorted(states):
                st = states[name]
                accepted = set(route.policy.accepted_tools.get(name, ()))
                ok = st.seen is None or st.seen == st.pinned or st.seen in accepted
                print(f"{name}\tpinned {st.pinned or '-'}\tlast seen {st.seen or '-'}\t"
                      f"{'ok' if ok else 'CHANGED (hidden)'}")  # fmt: skip
            return 0
        digest = args.digest
        if digest is not None and not DIGEST.fullmatch(digest):
            raise ConfigError(f"--digest: {digest!r} is not a digest (sha256: and 64 hex digits)")
        if digest is None:
            state = (await backend.read(scope, [args.tool]))[args.tool]
            if state.seen is None:
                print(f"mcp-edge: no definition of {args.tool!r} seen on route {route.name!r}", file=sys.stderr)
                return EXIT_NOT_FOUND
            digest = state.seen
        await backend.accept(scope, args.tool, digest)
        print(f"accepted {args.tool} {digest} on route {route.name}")
        return 0
    finally:
        await backend.aclose()
