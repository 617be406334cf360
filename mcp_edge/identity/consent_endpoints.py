"""The consent endpoints, browser pages on the public listener under ``/.mcp-edge/consent/``:

``GET  start?t=<ticket>``  a consent round's link: the ticket checked (sealed, unexpired, spent
                           once), then the browser signed in at the gateway's identity provider
                           (unless this browser's session already names the caller), then sent
                           to the member's authorization server;
``GET  callback``          where both authorization servers send the browser back: the
                           ``state`` must match the transaction cookie this browser holds for
                           it (spent once); after the sign-in, the person must be the caller
                           whose request asked; after the grant, the code is redeemed and the
                           grant stored, sealed, for that caller and member;
``GET  /.mcp-edge/consent/``  the signed-in person's authorizations (signing in first);
``POST revoke``, ``POST connect``  withdraw one, or grant one from that page (a form carrying
                           the session's token against cross-site requests).

Every request is hostile input: only the methods above; no body is read but a small form's;
the query is bounded, each parameter at most once and bounded; nothing is stored unless the
whole flow checks out, and every refusal is a page saying why (mcp_edge.identity.consent_pages).
No address is ever taken from a request: the only redirects go to the authorization endpoints
the gateway builds from its configuration and the servers' metadata, and back to its own pages.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from mcp_edge.core import headers as h
from mcp_edge.core.errors import RpcError
from mcp_edge.core.seal import KeyRing, StateRejected
from mcp_edge.edge.asgi import Receive, Scope, Send
from mcp_edge.edge.body import BodyBudget, BodyRefused, Reservation, read_body
from mcp_edge.identity import consent_pages as pages
from mcp_edge.identity import consent_seals as cs
from mcp_edge.identity.asclient import ASUnavailable
from mcp_edge.identity.consent import ConsentMember
from mcp_edge.identity.consent_config import (
    CALLBACK_PATH,
    CONNECT_PATH,
    GRANTS_PATH,
    REVOKE_PATH,
    START_PATH,
    ConsentSection,
)
from mcp_edge.identity.grants import DENIED, FAILED, GRANTED, OTHER_USER, GrantBook
from mcp_edge.identity.sign_in import SignIn
from mcp_edge.identity.vault import VaultUnavailable
from mcp_edge.observability.logs import event

#: The whole query of a consent endpoint, and any one parameter of it.
MAX_QUERY_BYTES = 8192
MAX_PARAM_CHARS = 4096
MAX_STATE_CHARS = 256
MAX_FORM_BYTES = 4096
#: What an authorization server's answer may carry (RFC 6749 §4.1.2, RFC 9207, OIDC session).
CALLBACK_PARAMS = frozenset(
    {"code", "state", "iss", "error", "error_description", "error_uri", "session_state"}
)
#: A ticket that names no member: a sign-in for the authorizations page only.
PAGE = ""


class BadRequest(Exception):
    pass


def parse_query(raw: bytes, allowed: frozenset[str] | None = None) -> dict[str, str]:
    """The query's parameters: bounded, each at most once (RFC 6749 §3.1), UTF-8; those not in
    ``allowed`` ignored (a client ignores what it does not know)."""
    if len(raw) > MAX_QUERY_BYTES:
        raise BadRequest("query too long")
    try:
        text = raw.decode("ascii")
        pairs = parse_qsl(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=32
        )
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("query not readable") from None
    out: dict[str, str] = {}
    for name, value in pairs:
        if name in out:
            raise BadRequest(f"{name} given twice")
        if len(value) > MAX_PARAM_CHARS or any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
            raise BadRequest(f"{name} too long or not printable")
        out[name] = value
    if allowed is not None:
        out = {k: v for k, v in out.items() if k in allowed}
    return out


def parse_cookies(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """The request's cookies by name (the first of a name wins; values bounded)."""
    out: dict[str, str] = {}
    for name, value in headers:
        if name != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            key, sep, val = part.strip().partition("=")
            if sep and key and key not in out and len(val) <= cs.MAX_COOKIE_CHARS:
                out[key] = val.strip().strip('"')
    return out


class ConsentEndpoints:
    """The ASGI app of the paths under ``/.mcp-edge/consent/`` (see the module's docstring)."""

    def __init__(
        self,
        *,
        members: Mapping[str, ConsentMember],
        sign_in: SignIn,
        settings: ConsentSection,
        ring: KeyRing,
        spend: Any,
        grants: GrantBook,
        public_base: str,
        metrics: Any,
        body_budget: BodyBudget | None = None,
        body_timeout: float = 30.0,
        leeway: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.members = members
        self.sign_in = sign_in
        self.settings = settings
        self.ring = ring
        self.spend = spend
        self.grants = grants
        self.public_base = public_base.rstrip("/")
        self.redirect_uri = self.public_base + CALLBACK_PATH
        self.secure = urlsplit(self.public_base).scheme == "https"
        #: Behind https the cookies are ``__Host-`` cookies: the browser keeps only those this
        #: host set itself, Secure, for the whole host (no other host of the domain, a sibling
        #: ``evil.example.com`` say, can plant one: a planted transaction would bind a victim's
        #: grant to the planter). Over plain http (a loopback host only) no prefix can hold.
        self.cookie_prefix = "__Host-" if self.secure else ""
        self.metrics = metrics
        self.body_budget = body_budget
        self.body_timeout = body_timeout
        self.leeway = leeway
        self.clock = clock

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        routes: dict[str, tuple[str, Any]] = {
            START_PATH: ("GET", self._start),
            CALLBACK_PATH: ("GET", self._callback),
            GRANTS_PATH: ("GET", self._grants),
            REVOKE_PATH: ("POST", self._revoke),
            CONNECT_PATH: ("POST", self._connect),
        }
        route = routes.get(path)
        if route is None:
            await self._send(send, pages.not_found_page(), close=True)
            return
        allowed, handler = route
        # Only the method each page is for: no HEAD either (a link preview must not spend a
        # link or a callback).
        if method != allowed:
            await self._send(send, pages.method_not_allowed([allowed]), close=True)
            return
        if allowed == "GET" and _has_body(scope):
            await self._refuse(send, "bad_request", "a body on a GET", close=True)
            return
        cookies = parse_cookies(scope["headers"])
        try:
            page = await handler(scope, receive, cookies)
        except BadRequest as bad:
            await self._refuse(send, "bad_request", str(bad))
            return
        except cs.ConsentRefused as refused:
            await self._refuse(send, refused.reason, refused.detail)
            return
        await self._send(send, page)

    async def _send(
        self, send: Send, page: pages.Page, *, head: bool = False, close: bool = False
    ) -> None:
        headers = page.headers + ([(b"connection", b"close")] if close else [])
        await send({"type": "http.response.start", "status": page.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head else page.body})

    async def _refuse(self, send: Send, reason: str, detail: str, *, close: bool = False) -> None:
        self.metrics.consent_browser.labels(reason).inc()
        # The reason and what was wrong: never a token, a code, a state or who.
        event(logging.INFO, "consent page refused", reason=reason, detail=detail[:200])
        await self._send(send, pages.refusal(reason), close=close)

    # ------------------------------------------------------------------ cookies

    def _cookie(self, name: str, value: str, max_age: int) -> tuple[bytes, bytes]:
        # Path=/ (what a __Host- cookie must have; also right behind a public_url with a path
        # prefix). No Domain: this host only. Only these pages read them; no upstream ever gets
        # a client's Cookie header.
        attrs = (
            f"{self.cookie_prefix}{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}"
        )
        if self.secure:
            attrs += "; Secure"
        return (b"set-cookie", attrs.encode("ascii"))

    def _read(self, cookies: dict[str, str], name: str) -> str | None:
        """The value of one of the gateway's cookies (under its prefix behind https)."""
        return cookies.get(self.cookie_prefix + name)

    def _clear(self, name: str) -> tuple[bytes, bytes]:
        return self._cookie(name, "", 0)

    # ------------------------------------------------------------------ legs

    async def _leg(self, ticket: cs.Ticket, principal_id: str | None) -> pages.Page:
        """Send the browser on its next leg: the sign-in when it is not known to be the
        caller, else the member's authorization server."""
        now = self.clock()
        ttl = self.settings.browser_seconds
        try:
            if principal_id is None:
                tx = cs.begin_leg(ticket, cs.SIGN_IN, now=now, ttl=ttl)
                location = await self.sign_in.authorization_url(tx)
            else:
                member = self.members[ticket.member]
                tx = cs.begin_leg(ticket, cs.GRANT, now=now, ttl=ttl, principal_id=principal_id)
                location = await member.authorization_url(tx, self.redirect_uri)
        except ASUnavailable as down:
            raise cs.ConsentRefused("unavailable", down.detail) from None
        cookie = self._cookie(tx.cookie_name, cs.seal_transaction(self.ring, tx), ttl)
        self.metrics.consent_browser.labels(f"sent_to_{tx.leg}").inc()
        return pages.redirect(location, [cookie])

    async def _spend(self, single_use_id: str, expires: int) -> None:
        try:
            await self.spend(single_use_id, expires + self.leeway)
        except StateRejected:
            raise cs.ConsentRefused("used") from None
        except RpcError:  # the single-use store cannot answer: fail closed
            raise cs.ConsentRefused("unavailable", "the single-use store") from None

    async def _start(self, scope: Scope, receive: Receive, cookies: dict[str, str]) -> pages.Page:
        query = parse_query(scope.get("query_string", b""))
        token = query.get("t")
        if token is None:
            raise BadRequest("no ticket")
        ticket = cs.open_ticket(self.ring, token, now=self.clock(), leeway=self.leeway)
        if ticket.member not in self.members:
            raise cs.ConsentRefused("malformed", "the ticket names no member served here")
        await self._spend("consent-link:" + ticket.consent_id, ticket.expires)
        session = cs.open_session(
            self.ring, self._read(cookies, cs.SESSION_COOKIE), now=self.clock()
        )
        known = session is not None and ticket.is_for(self.ring, session.principal_id)
        return await self._leg(ticket, session.principal_id if known and session else None)

    async def _callback(
        self, scope: Scope, receive: Receive, cookies: dict[str, str]
    ) -> pages.Page:
        query = parse_query(scope.get("query_string", b""), CALLBACK_PARAMS)
        state = query.get("state")
        if not state or len(state) > MAX_STATE_CHARS:
            raise BadRequest("no usable state")
        name = cs.transaction_cookie(state)
        tx = cs.open_transaction(
            self.ring, self._read(cookies, name), state=state, now=self.clock(), leeway=self.leeway
        )
        clear = self._clear(name)
        try:
            await self._spend(tx.single_use_id, tx.expires)
            page = await self._finish_leg(tx, query, cookies)
        except cs.ConsentRefused as refused:
            self.metrics.consent_browser.labels(refused.reason).inc()
            event(
                logging.INFO, "consent refused", reason=refused.reason, detail=refused.detail[:200]
            )
            return pages.refusal(refused.reason, [clear])
        return pages.Page(page.status, [*page.headers, clear], page.body)

    async def _finish_leg(
        self, tx: cs.Transaction, query: dict[str, str], cookies: dict[str, str]
    ) -> pages.Page:
        ticket = tx.ticket
        if "error" in query:
            # The person (or the server) said no: nothing is stored. A waiting retry learns it
            # only from the grant's leg, where the person is known to be the caller: a refusal
            # at the sign-in is anyone's who opened the link, and the caller is asked again.
            if tx.leg == cs.GRANT:
                await self._outcome(ticket, DENIED)
            raise cs.ConsentRefused("denied", query["error"][:64])
        code = query.get("code")
        if not code or len(code) > 2048:
            raise BadRequest("no usable code")
        if tx.leg == cs.SIGN_IN:
            principal = await self.sign_in.signed_in(code, tx, query.get("iss"))
            session = cs.new_session(
                principal.id, principal.display, now=self.clock(), ttl=self.settings.session_seconds
            )
            keep = (
                [
                    self._cookie(
                        cs.SESSION_COOKIE,
                        cs.seal_session(self.ring, session),
                        self.settings.session_seconds,
                    )
                ]
                if self.settings.session_seconds
                else []
            )
            if ticket.member == PAGE:
                return pages.redirect(self.public_base + GRANTS_PATH, keep)
            if not ticket.is_for(self.ring, principal.id):
                await self._outcome(ticket, OTHER_USER)
                raise cs.ConsentRefused("other_user")
            page = await self._leg(ticket, principal.id)
            return pages.Page(page.status, [*page.headers, *keep], page.body)
        member = self.members.get(ticket.member)
        if member is None or tx.principal_id is None:
            raise cs.ConsentRefused("malformed", "the transaction names no member served here")
        try:
            grant = await member.redeem(
                code, tx, iss=query.get("iss"), redirect_uri=self.redirect_uri
            )
        except cs.ConsentRefused as refused:
            if refused.reason == "failed":
                await self._outcome(ticket, FAILED)
            raise
        try:
            await self.grants.put(tx.principal_id, grant)
        except VaultUnavailable:
            raise cs.ConsentRefused("unavailable", "the grant store") from None
        await self._outcome(ticket, GRANTED)
        self.metrics.consent_browser.labels("granted").inc()
        event(logging.INFO, "consent granted", member=member.key, scope=grant.scope)
        return pages.granted(member.name, member.authority)

    async def _outcome(self, ticket: cs.Ticket, outcome: str) -> None:
        if ticket.member == PAGE:
            return
        with contextlib.suppress(VaultUnavailable):  # a waiting retry then asks again
            await self.grants.record_outcome(ticket.consent_id, ticket.member, outcome)

    # ------------------------------------------------------------------ the authorizations page

    def _page_ticket(self) -> cs.Ticket:
        now = int(self.clock())
        return cs.Ticket(
            cs.new_id(), PAGE, PAGE, "", now, now + self.settings.browser_seconds, "", ""
        )

    async def _grants(self, scope: Scope, receive: Receive, cookies: dict[str, str]) -> pages.Page:
        session = cs.open_session(
            self.ring, self._read(cookies, cs.SESSION_COOKIE), now=self.clock()
        )
        if session is None:
            return await self._leg(self._page_ticket(), None)
        try:
            held = {
                grant.member: grant
                for _, grant, _ in await self.grants.listing(session.principal_id)
            }
        except VaultUnavailable:
            raise cs.ConsentRefused("unavailable", "the grant store") from None
        rows = [
            pages.GrantRow(
                key,
                key in held,
                scope=held[key].scope if key in held else "",
                granted_at=_when(held[key].granted_at) if key in held else "",
                last_used=_when(held[key].last_used) if key in held else "",
            )
            for key in sorted(self.members)
        ]
        return pages.grants_page(
            session.subject,
            rows,
            csrf=session.csrf,
            action=self.public_base + REVOKE_PATH,
            connect=self.public_base + CONNECT_PATH,
            form_targets=self._grant_origins(),
        )

    def _grant_origins(self) -> list[str]:
        """The origins a Grant button's submission is redirected to: each member's
        authorization server (its issuer's, and its authorization endpoint's when known)."""
        origins: set[str] = set()
        for member in self.members.values():
            for url in (member.config.issuer, member.known_authorization_endpoint):
                if url:
                    parts = urlsplit(url)
                    origins.add(f"{parts.scheme}://{parts.netloc}")
        return sorted(origins)

    async def _form(
        self, scope: Scope, receive: Receive, cookies: dict[str, str]
    ) -> tuple[cs.Session, str]:
        """The signed-in session and the member a form names (its token checked)."""
        session = cs.open_session(
            self.ring, self._read(cookies, cs.SESSION_COOKIE), now=self.clock()
        )
        if session is None:
            raise cs.ConsentRefused("no_transaction", "not signed in")
        ctype = h.first(scope["headers"], "content-type") or ""
        if ctype.split(";", 1)[0].strip().lower() != "application/x-www-form-urlencoded":
            raise BadRequest("not a form")
        reservation = Reservation(self.body_budget)
        try:
            body = await read_body(
                h.HeaderIndex(scope["headers"]),
                receive,
                max_bytes=MAX_FORM_BYTES,
                timeout=self.body_timeout,
                reservation=reservation,
            )
        except BodyRefused:
            raise BadRequest("the form is too large or too slow") from None
        finally:
            reservation.release()
        form = parse_query(body, frozenset({"csrf", "member"}))
        if not cs.same_csrf(session, form.get("csrf")):
            raise cs.ConsentRefused("state_mismatch", "the form's token is not this session's")
        member = form.get("member")
        if member is None or member not in self.members:
            raise BadRequest("no such member")
        return session, member

    async def _revoke(self, scope: Scope, receive: Receive, cookies: dict[str, str]) -> pages.Page:
        session, key = await self._form(scope, receive, cookies)
        member = self.members[key]
        try:
            grant = await self.grants.get(session.principal_id, key, fresh=True)
            await self.grants.drop(session.principal_id, key)
        except VaultUnavailable:
            raise cs.ConsentRefused("unavailable", "the grant store") from None
        if grant is not None:
            await member.revoke_at_server(grant)
        self.metrics.consent_browser.labels("revoked_by_user").inc()
        event(logging.INFO, "grant withdrawn by its user", member=key)
        return pages.redirect(self.public_base + GRANTS_PATH)

    async def _connect(self, scope: Scope, receive: Receive, cookies: dict[str, str]) -> pages.Page:
        session, key = await self._form(scope, receive, cookies)
        now = int(self.clock())
        ticket = cs.Ticket(
            cs.new_id(),
            key,
            key,
            "granted from the authorizations page",
            now,
            now + self.settings.browser_seconds,
            "",
            "",
        )
        return await self._leg(ticket, session.principal_id)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))
