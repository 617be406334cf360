"""Credentials and identity the gateway presents to an upstream MCP server.

Default: nothing. The client's ``Authorization`` is never forwarded (MCP forbids token
passthrough), nor are the headers the authentication mode consumed. A route may add:

- a static credential: one header (``Authorization: Bearer …`` by default, or e.g.
  ``X-Api-Key``) whose value is read once at start from an environment variable or a file;
- ``forward_client_token``: the client's own, already validated, bearer token. Defensible only
  when gateway and upstream are one logical resource validating the same audience;
- a bearer token obtained for this caller and this upstream (``bearer_from_context``: the
  identity layer, mcp_edge.identity, exchanged or looked it up and put it in the request's
  context); a request that reaches the upstream side without it raises
  :class:`MissingUpstreamCredential` rather than going without;
- a principal header (e.g. ``X-MCP-Principal``) carrying the authenticated caller, so the upstream
  can bind its own state or authorise per user. Whatever the client sent under that name (or
  another spelling of it, ``X_MCP_Principal``: see ``mcp_edge.core.headers``) is dropped first, so
  the client cannot assert an identity.

Values that are not printable ASCII are sent as ``=?base64?<utf-8 base64>?=`` (the MCP header
convention for non-ASCII values).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from starlette.datastructures import Headers

from mcp_edge.auth.base import Principal

RawHeaders = Sequence[tuple[bytes, bytes]]

#: Always dropped from what the client sent, whatever the route says.
ALWAYS_DROPPED = frozenset({"authorization", "proxy-authorization"})

#: Header names a route may not use for credentials or identity (the gateway or HTTP owns them).
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "accept",
        "accept-encoding",
        "cookie",
        "origin",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "mcp-session-id",
        "last-event-id",
    }
)

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def check_header_name(name: str, what: str) -> str:
    """A header name a route may set upstream (lower-cased), or ValueError."""
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{what}: {name!r} is not a valid header name")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith("mcp-param-"):
        raise ValueError(f"{what}: {name!r} is managed by the gateway and cannot be used here")
    return lowered


def header_safe(value: str) -> str:
    """The value as is if it is printable ASCII, else ``=?base64?…?=`` of its UTF-8 bytes."""
    if value and all(0x20 <= ord(ch) < 0x7F for ch in value) and value == value.strip(" \t"):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def read_secret(
    *,
    env: str | None,
    file: str | os.PathLike[str] | None,
    what: str,
    environ: Mapping[str, str] | None = None,
) -> str:
    """Read a credential once, from an environment variable or a file (trailing newline
    removed). Raises ValueError with an operator-facing message; never includes the value."""
    environ = os.environ if environ is None else environ
    if (env is None) == (file is None):
        raise ValueError(f"{what}: set exactly one of value_env or value_file")
    if env is not None:
        value = environ.get(env)
        if value is None or value == "":
            raise ValueError(f"{what}: environment variable {env} is not set or empty")
    else:
        try:
            value = Path(file).read_text(encoding="utf-8")  # type: ignore[arg-type]
        except OSError as exc:
            raise ValueError(f"{what}: cannot read {file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{what}: {file} is not UTF-8 text") from None
        value = value.rstrip("\r\n")
        if not value:
            raise ValueError(f"{what}: {file} is empty")
    if any(ord(ch) < 0x20 or ord(ch) >= 0x7F for ch in value):
        raise ValueError(f"{what}: the value must be printable ASCII on one line")
    return value


@dataclass(frozen=True, slots=True)
class UpstreamHeaderPlan:
    """What changes between the client's request headers and the upstream's."""

    #: Lower-case names of client request headers not to forward.
    drop: frozenset[str]
    #: Headers to add (after dropping), as ``(lower-case name, value)``.
    extra: tuple[tuple[str, str], ...]

    def apply(self, headers: RawHeaders) -> list[tuple[bytes, bytes]]:
        """Raw ASGI headers with the plan applied (for callers not using the edge header rules)."""
        drop = {name.encode("latin-1") for name in self.drop}
        out = [(k, v) for k, v in headers if k.lower() not in drop]
        out.extend((k.encode("latin-1"), v.encode("latin-1")) for k, v in self.extra)
        return out

    def __repr__(self) -> str:  # the extra headers hold credentials
        return f"UpstreamHeaderPlan(drop={sorted(self.drop)}, extra=[{', '.join(k for k, _ in self.extra)}])"


class MissingUpstreamCredential(RuntimeError):
    """A caller's request reached the upstream side of a route whose upstream needs the caller's
    own bearer token, without one: it is not sent (the identity layer answers before this)."""


class UpstreamCredentials:
    """Per-route upstream header policy, with any static credential already loaded."""

    def __init__(
        self,
        *,
        consumed_headers: Iterable[str] = (),
        static_header: tuple[str, str] | None = None,
        forward_client_token: bool = False,
        principal_header: str | None = None,
        principal_value: Literal["display", "id"] = "display",
        bearer_from_context: bool = False,
    ) -> None:
        drop = set(ALWAYS_DROPPED) | {h.lower() for h in consumed_headers}
        self._static: tuple[str, str] | None = None
        if static_header is not None:
            name = check_header_name(static_header[0], "upstream credential header")
            self._static = (name, static_header[1])
            drop.add(name)
        if forward_client_token and self._static and self._static[0] == "authorization":
            raise ValueError(
                "forward_client_token and a static Authorization credential exclude each other"
            )
        if bearer_from_context and (
            forward_client_token or (self._static and self._static[0] == "authorization")
        ):
            raise ValueError(
                "an exchanged or granted token excludes forward_client_token and a static "
                "Authorization credential"
            )
        self._forward = forward_client_token
        self._bearer = bearer_from_context
        self._principal_header = None
        if principal_header is not None:
            self._principal_header = check_header_name(principal_header, "principal_header")
            if self._static and self._principal_header == self._static[0]:
                raise ValueError("principal_header must differ from the credential header")
            if self._principal_header == "authorization":
                raise ValueError("principal_header cannot be Authorization")
            drop.add(self._principal_header)
        self._principal_value = principal_value
        self._drop = frozenset(drop)

    @property
    def forwards_client_token(self) -> bool:
        return self._forward

    @property
    def bearer_from_context(self) -> bool:
        """The upstream's ``Authorization`` is the caller's token for it (mcp_edge.identity)."""
        return self._bearer

    @property
    def drop_headers(self) -> frozenset[str]:
        """Client request headers never forwarded on this route (lower-case names)."""
        return self._drop

    def extra_headers(
        self,
        principal: Principal | None,
        client_token: str | None = None,
        upstream_bearer: str | None = None,
    ) -> list[tuple[str, str]]:
        """Headers to add to one upstream request.

        ``client_token`` is the caller's validated bearer token; it is used only when the route
        forwards it (see :func:`client_bearer_token`). ``upstream_bearer`` is the token obtained
        for this caller at this upstream, used only with ``bearer_from_context``: a caller's
        request (``principal`` set) without it raises :class:`MissingUpstreamCredential`. The
        gateway's own requests (``principal`` None: era and health probes) go without.
        """
        extra: list[tuple[str, str]] = []
        if self._forward and client_token:
            extra.append(("authorization", f"Bearer {client_token}"))
        if self._bearer:
            if upstream_bearer:
                extra.append(("authorization", f"Bearer {upstream_bearer}"))
            elif principal is not None:
                raise MissingUpstreamCredential(
                    "no upstream credential was obtained for this request"
                )
        if self._static is not None:
            extra.append(self._static)
        if self._principal_header is not None and principal is not None:
            value = (
                (principal.display or principal.id)
                if self._principal_value == "display"
                else principal.id
            )
            extra.append((self._principal_header, header_safe(value)))
        return extra

    def plan(
        self,
        principal: Principal | None,
        client_token: str | None = None,
        upstream_bearer: str | None = None,
    ) -> UpstreamHeaderPlan:
        """Both halves for one upstream request: what to drop and what to add."""
        return UpstreamHeaderPlan(
            drop=self._drop,
            extra=tuple(self.extra_headers(principal, client_token, upstream_bearer)),
        )

    def __repr__(self) -> str:
        return (
            f"UpstreamCredentials(static={self._static[0] if self._static else None!r}, "
            f"forward_client_token={self._forward}, bearer_from_context={self._bearer}, "
            f"principal_header={self._principal_header!r})"
        )


def client_bearer_token(headers: Headers) -> str | None:
    """The bearer token of a request with exactly one ``Authorization: Bearer`` header."""
    values = headers.getlist("authorization")
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip(" ")
    if scheme.lower() != "bearer" or not token:
        return None
    return token
