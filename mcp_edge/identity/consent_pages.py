"""The consent endpoints' browser pages and the headers every answer of theirs carries.

Sans-I/O: each function gives ``(status, headers, body)``. Pages are plain HTML with one inline
style allowed by its hash; no script runs on them (``default-src 'none'``), they are never
framed, cached or sent as a referrer, and every text in them that is not the gateway's own is
escaped. A redirect goes only to an authorization endpoint the gateway built from its own
configuration and the server's metadata, never to an address a request names.
"""

from __future__ import annotations

import base64
import hashlib
import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Headers = list[tuple[bytes, bytes]]

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em;"
    "line-height:1.5;color:#222}h1{font-size:1.4em}table{border-collapse:collapse;width:100%}"
    "td,th{text-align:left;padding:.3em .5em;border-bottom:1px solid #ddd}"
    "code{background:#f3f3f3;padding:0 .2em}.muted{color:#666}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()


def csp(form_targets: Sequence[str] = ()) -> str:
    """The pages' Content-Security-Policy. ``form_targets``: origins a form's submission may be
    redirected to (a browser checks every hop of it), besides this gateway's own."""
    targets = " ".join(["'self'", *form_targets])
    return (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action {targets}; "
        "frame-ancestors 'none'; base-uri 'none'"
    )


CSP = csp()

#: On every answer of the consent endpoints, pages and redirects alike.
SECURITY_HEADERS: Headers = [
    (b"cache-control", b"no-store"),
    (b"pragma", b"no-cache"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", CSP.encode()),
]


@dataclass(frozen=True, slots=True)
class Page:
    status: int
    headers: Headers
    body: bytes


def _page(
    status: int,
    title: str,
    paragraphs: Iterable[str],
    extra: Sequence[tuple[bytes, bytes]] = (),
    *,
    policy: str = CSP,
) -> Page:
    """``paragraphs`` are HTML already (built here from escaped parts)."""
    text = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{''.join(paragraphs)}</body></html>"
    )
    body = text.encode("utf-8")
    security = SECURITY_HEADERS
    if policy != CSP:
        security = [*SECURITY_HEADERS[:-1], (b"content-security-policy", policy.encode())]
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", b"%d" % len(body)),
        *security,
        *extra,
    ]
    return Page(status, headers, body)


def _p(text: str, cls: str | None = None) -> str:
    attr = f' class="{cls}"' if cls else ""
    return f"<p{attr}>{html.escape(text)}</p>"


def redirect(location: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> Page:
    """303 to ``location`` (an address the gateway built), with the security headers."""
    headers = [
        (b"location", location.encode("ascii")),
        (b"content-length", b"0"),
        *SECURITY_HEADERS,
        *extra,
    ]
    return Page(303, headers, b"")


#: Each refusal's status, title and what the person can do (see consent_seals.REFUSALS).
_REFUSALS: dict[str, tuple[int, str, str]] = {
    "malformed": (
        400,
        "This link is not valid",
        "The link is damaged or was not made by this gateway. Go back to your application "
        "and try the call again: it gives you a new link.",
    ),
    "expired": (
        400,
        "This link has expired",
        "Authorization links work for a few minutes only. Go back to your application and "
        "try the call again: it gives you a new link.",
    ),
    "used": (
        400,
        "This link was already used",
        "Each authorization link works once. Go back to your application and try the call "
        "again: it gives you a new link.",
    ),
    "no_transaction": (
        400,
        "This sign-in did not start in this browser",
        "The answer of the authorization server reached a browser that did not start the "
        "sign-in (or its cookies were cleared). Open the authorization link again in this "
        "browser.",
    ),
    "state_mismatch": (
        400,
        "This sign-in does not match",
        "The answer of the authorization server does not belong to the sign-in this browser "
        "started. Nothing was stored. Open the authorization link again.",
    ),
    "other_user": (
        403,
        "Signed in as someone else",
        "You signed in as a different person than the one whose application asked for this "
        "authorization. Nothing was stored. Only the person who was asked can give it: if that "
        "is you, sign out at the sign-in page, open the link again and sign in as yourself.",
    ),
    "not_a_user": (
        403,
        "No person to authorize",
        "This request was not made by a person, so nobody can give an authorization for it.",
    ),
    "denied": (
        403,
        "Access was not allowed",
        "The authorization server says access was not allowed. Nothing was stored; the call "
        "that asked will not run.",
    ),
    "bad_request": (
        400,
        "This request is not valid",
        "A parameter is missing, repeated or too long, or the page was asked for in a way it "
        "is not used. Nothing was stored.",
    ),
    "failed": (
        502,
        "The authorization did not complete",
        "The authorization server did not accept the answer it sent, or answered something "
        "this gateway cannot use. Nothing was stored. Try again from your application.",
    ),
    "unavailable": (
        503,
        "Try again in a moment",
        "A service this authorization needs cannot be reached right now. Nothing was stored.",
    ),
}


def refusal(reason: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> Page:
    status, title, text = _REFUSALS[reason]
    return _page(status, title, [_p(text)], extra)


def method_not_allowed(allowed: Sequence[str]) -> Page:
    page = refusal("bad_request")
    return Page(405, [*page.headers, (b"allow", ", ".join(allowed).encode())], page.body)


def granted(member: str, authority: str, extra: Sequence[tuple[bytes, bytes]] = ()) -> Page:
    return _page(
        200,
        "Access granted",
        [
            _p(
                f"The gateway can now call {member} with your account at {authority}. You can "
                "close this window and go back to your application: the call goes on."
            ),
            _p(
                "You can see and withdraw what you granted on this gateway's authorizations page.",
                "muted",
            ),
        ],
        extra,
    )


def not_found_page() -> Page:
    return _page(404, "Not found", [_p("There is no such page.")])


@dataclass(frozen=True, slots=True)
class GrantRow:
    """One line of the authorizations page (no token ever: only what and when)."""

    member: str
    granted: bool
    scope: str = ""
    granted_at: str = ""
    last_used: str = ""


def grants_page(
    subject: str,
    rows: Sequence[GrantRow],
    *,
    csrf: str,
    action: str,
    connect: str,
    form_targets: Sequence[str] = (),
) -> Page:
    """The signed-in person's authorizations: each member that acts with their own account,
    whether they granted it, and a button to withdraw it or a link to grant it."""
    lines = []
    for row in rows:
        member = html.escape(row.member)
        if row.granted:
            state = (
                f"granted {html.escape(row.granted_at)}"
                + (f", last used {html.escape(row.last_used)}" if row.last_used else "")
                + (
                    f"<br><span class=muted>scope {html.escape(row.scope)}</span>"
                    if row.scope
                    else ""
                )
            )
            button = _form(action, csrf, row.member, "Withdraw")
        else:
            state = "not granted"
            button = _form(connect, csrf, row.member, "Grant")
        lines.append(f"<tr><td><code>{member}</code></td><td>{state}</td><td>{button}</td></tr>")
    table = (
        "<table><tr><th>Service</th><th>Authorization</th><th></th></tr>"
        + "".join(lines)
        + "</table>"
        if lines
        else _p("No service on this gateway acts with your own account.")
    )
    return _page(
        200,
        "Your authorizations",
        [
            _p(f"Signed in as {subject}."),
            _p(
                "These services act with your own account when your applications call them "
                "through this gateway. Withdrawing one deletes what the gateway keeps for it; "
                "the next call asks you again.",
                "muted",
            ),
            table,
        ],
        policy=csp(form_targets),
    )


def _form(action: str, csrf: str, member: str, label: str) -> str:
    """A button posting the member and the session's token to ``action`` (the gateway's own)."""
    return (
        f'<form method="post" action="{html.escape(action)}">'
        f'<input type="hidden" name="csrf" value="{html.escape(csrf)}">'
        f'<input type="hidden" name="member" value="{html.escape(member)}">'
        f'<button type="submit">{html.escape(label)}</button></form>'
    )
