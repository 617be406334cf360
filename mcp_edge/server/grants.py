"""``mcp-edge grants list|revoke``: the operator's side of users' grants at upstreams (routes
with ``upstream_auth.oauth``), read from the store's Redis with the gateway's key ring (the
grants' names and seals are made with it).

With the memory store grants live in each gateway process and are out of reach here: use the
admin listener's ``/grants`` of each process.
"""

from __future__ import annotations

import argparse
import json

from mcp_edge.core.seal import KeyRing
from mcp_edge.core.urls import redact
from mcp_edge.exits import UNREACHABLE, CommandError
from mcp_edge.identity.grant_admin import BadQuery, list_grants, principal_of, revoke_grants
from mcp_edge.identity.grants import GrantBook
from mcp_edge.identity.vault import VaultUnavailable, build_vault
from mcp_edge.server.config import ConfigError, GatewayConfig


async def run_grants_command(config: GatewayConfig, ring: KeyRing, args: argparse.Namespace) -> int:
    if config.store.type != "redis":
        raise ConfigError(
            "grants are kept per process with store.type: memory; list and revoke them on each "
            "process's admin listener (GET/DELETE /grants)"
        )
    try:
        principal = principal_of(issuer=args.issuer, subject=args.subject, principal=args.principal)
    except BadQuery as exc:
        raise ConfigError(f"grants: {exc}") from None
    consent = config.consent
    book = GrantBook(
        build_vault(config.store, ring),
        idle_seconds=consent.grant_idle_seconds,
        touch_seconds=consent.touch_seconds,
        outcome_seconds=60,
    )
    try:
        if args.grants_command == "list":
            for row in await list_grants(book, principal):
                print(json.dumps(row, sort_keys=True))
            return 0
        count = await revoke_grants(book, principal, member=getattr(args, "member", None))
        print(f"revoked {count} grant(s)")
        return 0
    except VaultUnavailable:
        assert config.store.url is not None
        raise CommandError(
            f"grants: cannot reach the store's Redis at {redact(config.store.url)}", UNREACHABLE
        ) from None
    finally:
        await book.vault.aclose()
