"""The URLs a configuration names (upstreams, the store), checked before anything uses them,
and the one way the gateway prints a URL.

Sans-I/O. A URL that a library would refuse later (a port out of range, a bracketed host that is
no IPv6 address, a host no resolver takes) is refused at start with a message naming what is
wrong. Wherever the gateway prints or logs a URL (an error, the start-up line, ``check-config``
and its ``--probe``, a log line's field, a metric's label), it prints :func:`redact` of it: its
credentials are ``***`` whatever characters they hold (a password holding ``/``, ``#``, ``?`` or
``@`` ends a URL's host part early in the standard parsers, which then take part of it for a host
or a port). URLs the gateway publishes or names itself by hold none (:func:`no_credentials`).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import unquote

#: A URL's scheme and ``://`` (RFC 3986 scheme characters).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
#: A query parameter whose value may be a secret (``?password=...`` is taken by Redis clients).
_SECRET_PARAM = re.compile(r"([?&][^=&#]*(?:pass|secret|token|key|auth)[^=&#]*=)[^&#]*", re.I)
#: How much of a URL an error message shows.
MAX_SHOWN = 200


def redact(url: str) -> str:
    """``url`` as the gateway prints it, anywhere: everything before its last ``@`` but the
    scheme (the credentials, whatever characters they hold) is ``***``, and so is the value of a
    query parameter named like a secret; cut past :data:`MAX_SHOWN`. (An error quotes it:
    ``f"{redact(url)!r}"``.)"""
    head, at, tail = url.rpartition("@")
    if at:
        scheme = _SCHEME.match(head)
        url = f"{scheme.group() if scheme else ''}***@{tail}"
    url = _SECRET_PARAM.sub(r"\1***", url)
    if len(url) > MAX_SHOWN:
        url = url[:MAX_SHOWN] + "..."
    return url


#: A URL's credentials inside a text: a scheme, ``://``, then everything up to the last ``@``
#: before the URL ends (a blank, a quote or an angle bracket).
_CREDENTIALS_IN_TEXT = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s\"'<>]*@")


def redact_urls(text: str) -> str:
    """``text`` with the credentials of every URL in it ``***``, as :func:`redact` writes them:
    what a log line or a printed line goes through, whoever wrote its URLs (another library's
    message too)."""
    return _CREDENTIALS_IN_TEXT.sub(r"\1***@", text) if "@" in text else text


def no_credentials(url: str) -> str:
    """A URL the gateway publishes or names itself by (``gateway.public_url``, the replicas'
    ``advertise_url``, the metadata's authorization servers): ValueError if it holds
    credentials, which would be published with it."""
    if split_credentials(url)[1] is not None:
        raise ValueError(f"{redact(url)!r}: holds credentials (user:password@), which it must not")
    return url


def split_credentials(url: str) -> tuple[str | None, str | None, str, str]:
    """``(scheme, userinfo, rest)`` of ``scheme://[userinfo@]rest`` and the scheme's case as
    written: the userinfo is everything up to the *last* ``@``, so a password may hold any
    character. ``scheme`` is None when the URL does not start with one."""
    scheme = _SCHEME.match(url)
    if scheme is None:
        return None, None, url, ""
    body = url[scheme.end() :]
    userinfo, at, rest = body.rpartition("@")
    return scheme.group(1).lower(), (userinfo if at else None), rest, scheme.group(1)


def credentials(userinfo: str | None) -> tuple[str | None, str | None]:
    """``user[:password]``, percent-decoded (either may be None)."""
    if userinfo is None:
        return None, None
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def port_number(text: str) -> int:
    """A port as written in a URL: ASCII digits, 1 to 65535."""
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise ValueError("the port must be a number from 1 to 65535")
    return int(text)


def host_error(host: str, *, bracketed: bool = False) -> str | None:
    """What is wrong with a URL's host (an IPv6 one without its brackets), or None. The
    message quotes nothing of the URL: the caller names it, redacted."""
    if not host:
        return "no host"
    if bracketed:
        try:
            ipaddress.IPv6Address(unquote(host))
        except ValueError:
            return "the host in brackets is not an IPv6 address"
        return None
    if not host.isascii():
        return "the host is not ASCII (write a name in its IDNA form, xn--...)"
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return "the host is not a host name or an IP address"
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host.rstrip("."))
        except ValueError:
            return "the host is not an IPv4 address"
    return None


def split_host_port(authority: str) -> tuple[str, int | None]:
    """``host[:port]`` or ``[v6][:port]`` (no credentials) checked: ValueError naming the fault."""
    if authority.startswith("["):
        host, bracket, tail = authority[1:].partition("]")
        if not bracket or not host:
            raise ValueError("a '[' without its ']' (an IPv6 host is written [::1]:port)")
        if tail and not tail.startswith(":"):
            raise ValueError("something other than :port after the IPv6 host")
        port_text = tail[1:]
    else:
        host, _, port_text = authority.partition(":")
        if ":" in port_text:
            raise ValueError("more than one ':' (an IPv6 host is written in brackets: [::1]:port)")
        if "[" in host or "]" in host:
            raise ValueError("a bracket in the host")
    problem = host_error(host, bracketed=authority.startswith("["))
    if problem is not None:
        raise ValueError(problem)
    return host, port_number(port_text) if port_text else None


def check_http_url(url: str) -> str:
    """An absolute ``http(s)://`` URL that the upstream client can use as written: ASCII
    without spaces or controls, a host name or IP address, a port from 1 to 65535.
    ValueError naming what is wrong (the URL's credentials redacted)."""
    scheme = _SCHEME.match(url)
    try:
        if scheme is None or scheme.group(1).lower() not in ("http", "https"):
            raise ValueError("must be an absolute http(s) URL, e.g. http://127.0.0.1:3001/mcp")
        if not url.isascii() or any(ch <= " " or ch == "\x7f" for ch in url):
            raise ValueError(
                "a space, a control or a non-ASCII character (percent-encode it in the path; "
                "write a host name in its IDNA form, xn--...)"
            )
        authority = re.split(r"[/?#]", url[scheme.end() :], maxsplit=1)[0]
        split_host_port(authority.rpartition("@")[2])
    except ValueError as exc:
        hint = (
            " (credentials holding '/', '?', '#' or '@' are written percent-encoded)"
            if "@" in url
            else ""
        )
        raise ValueError(f"{redact(url)!r}: {exc}{hint}") from None
    return url
