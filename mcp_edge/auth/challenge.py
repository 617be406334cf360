"""``WWW-Authenticate: Bearer`` challenges (RFC 6750 §3, RFC 9728 §5.1) and the AuthErrors
that carry them.

- No token, or not a Bearer one: 401 with ``resource_metadata`` and a ``scope`` hint, no error code.
- A token that fails validation: 401 with ``error="invalid_token"``.
- A malformed request (two Authorization headers, a token in the query string): 400 with
  ``error="invalid_request"``.
- A valid token without the scopes the route needs: 403 with ``error="insufficient_scope"``
  and the needed ``scope``.

``offline_access`` is never put into a challenge. Descriptions are fixed strings written by the
gateway; nothing from the token is echoed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mcp_edge.auth.base import AuthError

INVALID_REQUEST = "invalid_request"
INVALID_TOKEN = "invalid_token"
INSUFFICIENT_SCOPE = "insufficient_scope"

#: Scopes that must not be advertised in a challenge or in ``scopes_supported``.
UNADVERTISED_SCOPES = frozenset({"offline_access"})


def _quote(value: str) -> str:
    # quoted-string (RFC 9110 §5.6.4): escape backslash and quote; drop controls (no header splitting).
    cleaned = "".join(ch for ch in value if ch == "\t" or 0x20 <= ord(ch) < 0x7F)
    return '"' + cleaned.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scope_string(scopes: Iterable[str]) -> str:
    """Space-separated scopes, de-duplicated in first-seen order, without unadvertised ones."""
    seen: dict[str, None] = {}
    for scope in scopes:
        if scope and scope not in UNADVERTISED_SCOPES:
            seen.setdefault(scope, None)
    return " ".join(seen)


def bearer_challenge(
    *,
    resource_metadata: str | None = None,
    scope: Iterable[str] = (),
    error: str | None = None,
    error_description: str | None = None,
) -> str:
    """The value of a ``WWW-Authenticate`` header for the Bearer scheme.

    Parameter order follows the MCP authorization examples: without an error
    ``Bearer resource_metadata="…", scope="…"``; with one
    ``Bearer error="…", scope="…", resource_metadata="…", error_description="…"``.
    """
    scopes = scope_string(scope)
    params: list[tuple[str, str]] = []
    if error:
        params.append(("error", error))
        if scopes:
            params.append(("scope", scopes))
        if resource_metadata:
            params.append(("resource_metadata", resource_metadata))
    else:
        if resource_metadata:
            params.append(("resource_metadata", resource_metadata))
        if scopes:
            params.append(("scope", scopes))
    if error_description:
        params.append(("error_description", error_description))
    if not params:
        return "Bearer"
    return "Bearer " + ", ".join(f"{name}={_quote(value)}" for name, value in params)


_PARAM = re.compile(r'\s*([A-Za-z0-9_\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*(?:,|$)')


def parse_bearer_challenge(value: str) -> dict[str, str]:
    """Parse one ``Bearer`` challenge into its parameters (for tests and clients).

    Raises ValueError if the scheme is not Bearer or the parameters are malformed.
    """
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise ValueError(f"not a Bearer challenge: {value!r}")
    params: dict[str, str] = {}
    pos = 0
    rest = rest.strip()
    while pos < len(rest):
        match = _PARAM.match(rest, pos)
        if not match or match.end() == pos:
            raise ValueError(f"malformed challenge parameters: {rest[pos:]!r}")
        name = match.group(1).lower()
        quoted, token = match.group(2), match.group(3)
        params[name] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else token
        pos = match.end()
    return params


# ------------------------------------------------------------------ AuthError builders


class Challenger:
    """Builds the AuthErrors of one route (it knows the route's metadata URL and scope hint)."""

    def __init__(self, *, resource_metadata: str | None, scope_hint: Iterable[str] = ()) -> None:
        self.resource_metadata = resource_metadata
        self.scope_hint = tuple(scope_hint)

    def missing(self, message: str = "authentication required") -> AuthError:
        """401 for a request that carries no (Bearer) credentials."""
        return AuthError(
            401,
            message,
            bearer_challenge(resource_metadata=self.resource_metadata, scope=self.scope_hint),
        )

    def invalid_token(self, description: str) -> AuthError:
        """401 for a token that was presented but is not acceptable."""
        return AuthError(
            401,
            f"invalid token: {description}",
            bearer_challenge(
                resource_metadata=self.resource_metadata,
                scope=self.scope_hint,
                error=INVALID_TOKEN,
                error_description=description,
            ),
        )

    def invalid_request(self, description: str) -> AuthError:
        """400 for a malformed authentication request."""
        return AuthError(
            400,
            f"invalid request: {description}",
            bearer_challenge(
                resource_metadata=self.resource_metadata,
                error=INVALID_REQUEST,
                error_description=description,
            ),
        )

    def insufficient_scope(self, required: Iterable[str]) -> AuthError:
        """403 for a valid token lacking the scopes this route requires."""
        needed = scope_string(required)
        return AuthError(
            403,
            f"insufficient scope: this endpoint requires {needed}",
            bearer_challenge(
                resource_metadata=self.resource_metadata,
                scope=needed.split(),
                error=INSUFFICIENT_SCOPE,
                error_description="the token lacks a scope this endpoint requires",
            ),
        )


def unavailable(message: str = "authorization keys are temporarily unavailable") -> AuthError:
    """503: the gateway cannot judge the token right now (e.g. the JWKS endpoint is down)."""
    return AuthError(503, message, None)
