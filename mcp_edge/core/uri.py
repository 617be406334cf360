"""Resource URIs in one canonical form: what every URI check of the gateway (a member's
``include`` / ``exclude``, routing by prefix, completion refs, the ``uri`` a policy rule reads)
sees, so that no spelling of a URI reaches what another spelling of it may not.

Servers resolve a URI before they look it up: the MCP SDKs parse it as a WHATWG URL (``mcp``
1.x through pydantic's ``AnyUrl``, the TypeScript SDK through ``new URL``), so
``file:///public/../secret/b``, ``file:///public/%2e%2e/secret/b``, ``FILE:///secret/b``,
``file://localhost/secret/b`` and ``file:///public\\..\\secret\\b`` all read ``file:///secret/b``.
A check that matches the URI as it is spelt is stepped over by every one of them.

The canonical form (:func:`canonical_uri`) is RFC 3986 section 6's normalization:

- the scheme in lower case (6.2.2.1);
- percent-escapes of unreserved characters (``A-Z a-z 0-9 - . _ ~``) decoded, the hex digits of
  the others in upper case (6.2.2.1, 6.2.2.2);
- dot segments (``.``, ``..``) removed from the path (6.2.2.3, the algorithm of 5.2.4);

and then the form a WHATWG URL parser gives it (scheme-based normalization, 6.2.3: the host of
``http``, ``https``, ``ws``, ``wss``, ``ftp`` and ``file`` in lower case, their default port
dropped, an empty path ``/``, ``file://localhost/`` as ``file:///``, characters outside the URI
grammar percent-encoded), which must itself be RFC-canonical. A URI has no canonical form
(None) when it has no scheme, holds a backslash (a WHATWG parser reads it as ``/``), a ``%``
that starts no escape, or is one no WHATWG parser takes.

A URI *template* (``resources/templates/list``, a completion's ``ref/resource``; any text
holding ``{`` or ``}``, which no URI holds) keeps its ``{...}`` expressions as they are: it is
canonical when it is RFC-canonical and the WHATWG parser leaves it as it is with each
expression in place of one letter (else it has no canonical form).

The gateway refuses a URI that is not in its canonical form (mcp_edge.core.federation.names,
mcp_edge.policy): what it checks is then exactly what the server resolves.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic_core import Url

from mcp_edge.core.errors import INVALID_PARAMS, RpcError

#: RFC 3986 unreserved characters: their escapes mean the characters themselves.
_UNRESERVED: Final = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
)
_ESCAPE: Final = re.compile(r"%([0-9A-Fa-f]{2})")
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_EXPRESSION: Final = re.compile(r"\{[^{}]*\}")


def _escape(match: re.Match[str]) -> str:
    code = int(match.group(1), 16)
    return chr(code) if code in _UNRESERVED else "%" + match.group(1).upper()


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, on a whole path (linear in its length)."""
    out: list[str] = []
    segments = path.split("/")
    absolute = path.startswith("/")
    if absolute:
        segments = segments[1:]
    last = len(segments) - 1
    for i, segment in enumerate(segments):
        if segment == ".":
            if i == last:
                out.append("")
        elif segment == "..":
            if out:
                out.pop()
            if i == last:
                out.append("")
        else:
            out.append(segment)
    joined = "/".join(out)
    return "/" + joined if absolute else joined


def rfc_normal(uri: str) -> str | None:
    """RFC 3986 section 6.2.2 (case, percent-encoding, dot segments); None when ``uri`` has no
    scheme, holds a backslash or a ``%`` that starts no escape."""
    scheme = _SCHEME.match(uri)
    if scheme is None or "\\" in uri:
        return None
    if "%" in uri:
        if uri.count("%") != len(_ESCAPE.findall(uri)):
            return None
        uri = _ESCAPE.sub(_escape, uri)
    end = scheme.end()
    head = uri[:end].lower()
    rest = uri[end:]
    cut = len(rest)
    for mark in "?#":
        found = rest.find(mark)
        if found != -1 and found < cut:
            cut = found
    hier, tail = rest[:cut], rest[cut:]
    if hier.startswith("//"):
        slash = hier.find("/", 2)
        authority, path = (hier, "") if slash == -1 else (hier[:slash], hier[slash:])
    else:
        authority, path = "", hier
    if "." in path:
        path = remove_dot_segments(path)
    return head + authority + path + tail


def canonical_uri(uri: str) -> str | None:
    """``uri`` in canonical form (see the module), or None when it has none."""
    normal = rfc_normal(uri)
    if normal is None:
        return None
    if "{" in normal or "}" in normal:  # a template
        probe = _EXPRESSION.sub("x", normal)
        try:
            return normal if str(Url(probe)) == probe else None
        except ValueError:
            return None
    for _ in range(2):  # what the URL parser gives must itself be RFC-canonical
        try:
            parsed = str(Url(normal))
        except ValueError:
            return None
        if parsed == normal:
            return normal
        again = rfc_normal(parsed)
        if again is None:
            return None
        normal = again
    return None


def is_canonical(uri: str) -> bool:
    """``uri`` is its own canonical form (what a URI check may be made on)."""
    return canonical_uri(uri) == uri


def not_canonical(uri: str, canonical: str | None) -> RpcError:
    """The answer to a request whose resource URI is not in canonical form (``-32602``, HTTP
    400): ``data.canonical`` is the spelling to use, None when the URI has none."""
    return RpcError(
        INVALID_PARAMS,
        "Resource URI is not in canonical form (RFC 3986 section 6)",
        {"reason": "uri_not_canonical", "uri": uri[:256], "canonical": canonical},
    )
