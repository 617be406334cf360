"""The operator's side of users' grants: list a principal's and revoke them, from the admin
listener (``GET``/``DELETE /grants``) and the command line (``mcp-edge grants``).

A principal is named as its tokens name it: ``issuer`` and ``subject`` (the ``iss`` and ``sub``
of its JWTs), or ``principal``, the gateway's id for it (``["jwt-sub","<iss>","<sub>"]``). A
listing says what and when, never a token. Revoking deletes the grant from the vault (this
process stops using it at once, the other replicas within ``consent.local_seconds``, the time
they keep a grant in memory) and, where the gateway runs with the member's client (the admin
listener), revokes its tokens at the authorization server too (RFC 7009, best effort).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from mcp_edge.auth.base import JWT_SUBJECT, principal_id
from mcp_edge.identity.grants import GrantBook

#: Longest issuer, subject or principal accepted.
MAX_NAME_CHARS = 1024


class BadQuery(ValueError):
    """The request does not name one principal (the message says how to)."""


def principal_of(
    *, issuer: str | None = None, subject: str | None = None, principal: str | None = None
) -> str:
    """The principal id the arguments name."""
    for value in (issuer, subject, principal):
        if value is not None and (
            not value or len(value) > MAX_NAME_CHARS or any(ord(ch) < 0x20 for ch in value)
        ):
            raise BadQuery("issuer, subject and principal must be non-empty printable text")
    if principal is not None:
        if issuer is not None or subject is not None:
            raise BadQuery("give principal, or issuer and subject, not both")
        try:
            doc = orjson.loads(principal)
        except orjson.JSONDecodeError:
            raise BadQuery(
                'principal must be the gateway\'s id, e.g. ["jwt-sub","<iss>","<sub>"]'
            ) from None
        if not (isinstance(doc, list) and doc and all(isinstance(p, str) for p in doc)):
            raise BadQuery('principal must be the gateway\'s id, e.g. ["jwt-sub","<iss>","<sub>"]')
        return orjson.dumps(doc).decode()
    if issuer is None or subject is None:
        raise BadQuery("name the principal: issuer and subject (its tokens' iss and sub)")
    return principal_id(JWT_SUBJECT, issuer, subject)


async def list_grants(book: GrantBook, principal: str) -> list[dict[str, Any]]:
    return [
        {**grant.describe(), "forgotten_at": int(expires)}
        for _, grant, expires in await book.listing(principal)
    ]


async def revoke_grants(
    book: GrantBook,
    principal: str,
    *,
    member: str | None = None,
    members: Mapping[str, Any] | None = None,
) -> int:
    """Delete the principal's grant for ``member`` (every one when None); each deleted grant's
    tokens are revoked at the server too when ``members`` (member key -> ConsentMember) has
    its member. How many were deleted."""
    held = [grant for _, grant, _ in await book.listing(principal)]
    count = 0
    for grant in held:
        if member is not None and grant.member != member:
            continue
        if await book.drop(principal, grant.member):
            count += 1
            owner = (members or {}).get(grant.member)
            if owner is not None:
                await owner.revoke_at_server(grant)
    return count
