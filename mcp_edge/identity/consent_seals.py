"""The sealed pieces of a per-user consent flow (sans-I/O: the time comes in as ``now``).

Four things leave the gateway sealed with the key ring (``seal_blob``, a purpose each, so one
never opens as another):

* the **ticket** (``mcpecs1``) in the start link of a consent round: which route and member ask,
  for which call, for whom (a keyed hash of the principal, never the principal), until when, and
  the consent's random id (what makes the link single-use and what the outcome is recorded under).
  It holds nothing a person could read or use: opening it only starts a sign-in;
* the **transaction** (``mcpecb1``), the browser's cookie while it is away at an authorization
  server: which leg it is on (the gateway's own sign-in, then the upstream's grant), the
  ``state`` sent, the PKCE verifier and the nonce (RFC 9700), and the ticket it continues. The
  ``state`` names the cookie (:func:`transaction_cookie`), so a callback whose ``state`` the
  browser did not start finds no cookie;
* the **continuation** (``mcpecc1``), the ``requestState`` of the consent round as the flow
  middleware gets it (it seals it again, as any upstream's state): the consent id, the member,
  and what the call carried when the round interrupted it (the upstream's own state and
  answers, the endpoint that answered). Sealed here too, so an upstream cannot forge one;
* the **session** (``mcpecu1``), the cookie of a browser the gateway's sign-in identified: who,
  until when, and the token its forms carry against cross-site requests.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from mcp_edge.core.flow import MAX_UPSTREAM_STATE_CHARS
from mcp_edge.core.seal import KeyRing, b64u_encode, open_json_blob, principal_tag, seal_blob

TICKET, TRANSACTION, CONTINUATION, SESSION = "mcpecs1", "mcpecb1", "mcpecc1", "mcpecu1"
#: Longest ticket accepted (a real one is about 300 characters).
MAX_TICKET_CHARS = 2048
#: Longest cookie value accepted (browsers keep cookies of up to 4096 bytes).
MAX_COOKIE_CHARS = 3800
#: Longest continuation: what the flow carries as an upstream's state (it holds the upstream's own).
MAX_CONTINUATION_CHARS = MAX_UPSTREAM_STATE_CHARS
#: Longest call description a ticket carries (shown on the start page).
MAX_CALL_CHARS = 200
FORMAT = 1

Leg = Literal["sign_in", "grant"]
SIGN_IN: Leg = "sign_in"
GRANT: Leg = "grant"

#: Why a browser's step is refused (the page says it in words; the log and metric use these).
REFUSALS = (
    "malformed",  # not a ticket, transaction or session of this gateway, or tampered with
    "expired",  # past its time
    "used",  # a start link or a callback already used once
    "no_transaction",  # a callback this browser did not start (no cookie for its state)
    "state_mismatch",  # the state does not match the transaction's
    "other_user",  # the user who signed in is not the one whose client asked
    "not_a_user",  # the caller is not a person (a client's own token): nobody can consent
    "denied",  # the user (or the authorization server) said no
    "bad_request",  # missing, repeated, oversized or unexpected parameters; a wrong method
    "failed",  # the authorization server refused the code or answered nonsense
    "unavailable",  # the authorization server or the store could not be reached
)


class ConsentRefused(Exception):
    """A step of the browser's flow that is refused; ``reason`` is one of :data:`REFUSALS`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        assert reason in REFUSALS, reason
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def new_id(size: int = 16) -> str:
    """A random id, base64url (22 characters for 16 bytes)."""
    return b64u_encode(os.urandom(size))


def pkce_challenge(verifier: str) -> str:
    """The S256 ``code_challenge`` of a verifier (RFC 7636 §4.2)."""
    return b64u_encode(hashlib.sha256(verifier.encode("ascii")).digest())


def new_verifier() -> str:
    """A PKCE ``code_verifier``: 32 random bytes, 43 characters of base64url (RFC 7636 §4.1)."""
    return new_id(32)


def _kid(token: str) -> str:
    return token.split(".", 2)[1]


def _tag(ring: KeyRing, kid: str, principal_id: str) -> str | None:
    key = ring.by_id.get(kid)
    return None if key is None else principal_tag(key, principal_id)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _int(doc: dict[str, Any], name: str) -> int:
    value = doc.get(name)
    if type(value) is not int:
        raise ConsentRefused("malformed")
    return value


def _str(doc: dict[str, Any], name: str, *, optional: bool = False) -> Any:
    value = doc.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ConsentRefused("malformed")
    return value


def _check_time(issued: int, expires: int, now: float, leeway: int) -> None:
    if now > expires + leeway or now + leeway < issued:
        raise ConsentRefused("expired")


# ---------------------------------------------------------------------------- the ticket


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a start link says (see the module docstring)."""

    consent_id: str
    route: str
    member: str
    #: The call that asked, for the start page: ``tools/call create_issue``.
    call: str
    issued: int
    expires: int
    #: The keyed hash of the principal, under key ``kid``.
    principal: str
    kid: str

    def is_for(self, ring: KeyRing, principal_id: str) -> bool:
        """Is ``principal_id`` the principal this ticket was issued for (constant time)?"""
        tag = _tag(ring, self.kid, principal_id)
        return tag is not None and _same(tag, self.principal)

    def to_doc(self) -> dict[str, Any]:
        return {
            "c": self.consent_id,
            "r": self.route,
            "m": self.member,
            "q": self.call,
            "iat": self.issued,
            "exp": self.expires,
            "p": self.principal,
            "k": self.kid,
        }

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> Ticket:
        return cls(
            consent_id=_str(doc, "c"),
            route=_str(doc, "r"),
            member=_str(doc, "m"),
            call=_str(doc, "q"),
            issued=_int(doc, "iat"),
            expires=_int(doc, "exp"),
            principal=_str(doc, "p"),
            kid=_str(doc, "k"),
        )


def describe_call(method: str, target: str | None) -> str:
    """The call as the start page names it (bounded)."""
    text = method if not target else f"{method} {target}"
    return text if len(text) <= MAX_CALL_CHARS else text[: MAX_CALL_CHARS - 3] + "..."


def issue_ticket(
    ring: KeyRing,
    *,
    principal_id: str,
    route: str,
    member: str,
    call: str,
    now: float,
    ttl: int,
) -> tuple[str, Ticket]:
    """A new consent's ticket, and the token of its start link."""
    key = ring.current
    issued = int(now)
    ticket = Ticket(
        consent_id=new_id(),
        route=route,
        member=member,
        call=call[:MAX_CALL_CHARS],
        issued=issued,
        expires=issued + ttl,
        principal=principal_tag(key, principal_id),
        kid=key.kid,
    )
    doc = {"v": FORMAT, **ticket.to_doc()}
    return seal_blob(ring, TICKET, orjson.dumps(doc)), ticket


def open_ticket(ring: KeyRing, token: Any, *, now: float, leeway: int = 5) -> Ticket:
    """The ticket of a start link; :class:`ConsentRefused` (``malformed``, ``expired``)."""
    doc = open_json_blob(ring, TICKET, token, max_chars=MAX_TICKET_CHARS)
    if doc is None or doc.get("v") != FORMAT:
        raise ConsentRefused("malformed")
    ticket = Ticket.from_doc(doc)
    if ticket.kid != _kid(token):  # the tag was made with the key that sealed it
        raise ConsentRefused("malformed")
    _check_time(ticket.issued, ticket.expires, now, leeway)
    return ticket


# ---------------------------------------------------------------------------- the transaction


@dataclass(frozen=True, slots=True)
class Transaction:
    """A browser away at an authorization server, on one leg of the flow."""

    leg: Leg
    #: The ``state`` sent with the authorization request (also what names the cookie).
    state: str
    verifier: str
    nonce: str
    ticket: Ticket
    issued: int
    expires: int
    #: The principal the gateway's sign-in identified (the grant leg only).
    principal_id: str | None = None

    @property
    def challenge(self) -> str:
        return pkce_challenge(self.verifier)

    @property
    def cookie_name(self) -> str:
        return transaction_cookie(self.state)

    @property
    def single_use_id(self) -> str:
        """What the callback spends in the single-use store (one per leg)."""
        return "consent-tx:" + hashlib.sha256(self.state.encode()).hexdigest()[:32]


def transaction_cookie(state: str) -> str:
    """The cookie a transaction lives in, named after its ``state`` (a callback whose ``state``
    this browser did not send finds none). A cookie name is a token: base64url is one."""
    return "mcpe-tx-" + b64u_encode(hashlib.sha256(state.encode()).digest()[:12])


def begin_leg(
    ticket: Ticket, leg: Leg, *, now: float, ttl: int, principal_id: str | None = None
) -> Transaction:
    """A new leg: fresh ``state``, PKCE verifier and nonce."""
    issued = int(now)
    return Transaction(
        leg=leg,
        state=new_id(24),
        verifier=new_verifier(),
        nonce=new_id(24),
        ticket=ticket,
        issued=issued,
        expires=issued + ttl,
        principal_id=principal_id,
    )


def seal_transaction(ring: KeyRing, tx: Transaction) -> str:
    doc = {
        "v": FORMAT,
        "l": tx.leg,
        "s": tx.state,
        "pv": tx.verifier,
        "n": tx.nonce,
        "t": tx.ticket.to_doc(),
        "iat": tx.issued,
        "exp": tx.expires,
    }
    if tx.principal_id is not None:
        doc["pid"] = tx.principal_id
    return seal_blob(ring, TRANSACTION, orjson.dumps(doc))


def open_transaction(
    ring: KeyRing, cookie: Any, *, state: str, now: float, leeway: int = 5
) -> Transaction:
    """The transaction in a callback's cookie, checked against the callback's ``state``
    (constant time); :class:`ConsentRefused` (``no_transaction``, ``malformed``,
    ``state_mismatch``, ``expired``)."""
    if cookie is None:
        raise ConsentRefused("no_transaction")
    doc = open_json_blob(ring, TRANSACTION, cookie, max_chars=MAX_COOKIE_CHARS)
    if doc is None or doc.get("v") != FORMAT or not isinstance(doc.get("t"), dict):
        raise ConsentRefused("malformed")
    leg = doc.get("l")
    if leg not in (SIGN_IN, GRANT):
        raise ConsentRefused("malformed")
    tx = Transaction(
        leg=leg,
        state=_str(doc, "s"),
        verifier=_str(doc, "pv"),
        nonce=_str(doc, "n"),
        ticket=Ticket.from_doc(doc["t"]),
        issued=_int(doc, "iat"),
        expires=_int(doc, "exp"),
        principal_id=_str(doc, "pid", optional=True),
    )
    if not _same(tx.state, state):
        raise ConsentRefused("state_mismatch")
    if leg == GRANT and tx.principal_id is None:
        raise ConsentRefused("malformed")
    _check_time(tx.issued, tx.expires, now, leeway)
    return tx


# ---------------------------------------------------------------------------- the continuation


@dataclass(frozen=True, slots=True)
class Continuation:
    """How a call goes on after its consent round (see the module docstring)."""

    consent_id: str
    member: str
    #: What the retry that the round interrupted carried: the upstream's own state and answers.
    upstream_state: str | None = None
    responses: dict[str, Any] | None = None
    #: The upstream endpoint that answered the round before (affinity).
    endpoint: str | None = None


def seal_continuation(ring: KeyRing, cont: Continuation) -> str:
    doc: dict[str, Any] = {"v": FORMAT, "c": cont.consent_id, "m": cont.member}
    if cont.upstream_state is not None:
        doc["s"] = cont.upstream_state
    if cont.responses is not None:
        doc["ir"] = cont.responses
    if cont.endpoint is not None:
        doc["e"] = cont.endpoint
    return seal_blob(ring, CONTINUATION, orjson.dumps(doc))


def is_continuation(state: Any) -> bool:
    """Does this (verified, unwrapped) ``requestState`` look like a consent continuation? Only
    :func:`open_continuation` says whether it is one."""
    return isinstance(state, str) and state.startswith(CONTINUATION + ".")


def open_continuation(ring: KeyRing, state: Any, *, member: str) -> Continuation | None:
    """The continuation in a retry's state, for this member; None if it is not one (an
    upstream's own state, or one sealed for another member)."""
    doc = open_json_blob(ring, CONTINUATION, state, max_chars=MAX_CONTINUATION_CHARS)
    if doc is None or doc.get("v") != FORMAT:
        return None
    consent_id, owner = doc.get("c"), doc.get("m")
    upstream_state, responses, endpoint = doc.get("s"), doc.get("ir"), doc.get("e")
    if not (isinstance(consent_id, str) and isinstance(owner, str) and _same(owner, member)):
        return None
    if upstream_state is not None and not isinstance(upstream_state, str):
        return None
    if responses is not None and not isinstance(responses, dict):
        return None
    if endpoint is not None and not isinstance(endpoint, str):
        return None
    return Continuation(consent_id, owner, upstream_state, responses, endpoint)


# ---------------------------------------------------------------------------- the session


@dataclass(frozen=True, slots=True)
class Session:
    """A browser the gateway's sign-in identified."""

    principal_id: str
    #: Who, as the page shows it (the token's subject).
    subject: str
    issued: int
    expires: int
    #: The token this session's forms carry (against cross-site requests).
    csrf: str


SESSION_COOKIE = "mcpe-session"


def new_session(principal_id: str, subject: str, *, now: float, ttl: int) -> Session:
    issued = int(now)
    return Session(principal_id, subject, issued, issued + ttl, new_id())


def seal_session(ring: KeyRing, session: Session) -> str:
    doc = {
        "v": FORMAT,
        "pid": session.principal_id,
        "sub": session.subject,
        "iat": session.issued,
        "exp": session.expires,
        "x": session.csrf,
    }
    return seal_blob(ring, SESSION, orjson.dumps(doc))


def open_session(ring: KeyRing, cookie: Any, *, now: float, leeway: int = 5) -> Session | None:
    """The session in a browser's cookie; None when there is none, or it is not good."""
    if cookie is None:
        return None
    doc = open_json_blob(ring, SESSION, cookie, max_chars=MAX_COOKIE_CHARS)
    if doc is None or doc.get("v") != FORMAT:
        return None
    try:
        session = Session(
            principal_id=_str(doc, "pid"),
            subject=_str(doc, "sub"),
            issued=_int(doc, "iat"),
            expires=_int(doc, "exp"),
            csrf=_str(doc, "x"),
        )
        _check_time(session.issued, session.expires, now, leeway)
    except ConsentRefused:
        return None
    return session


def same_csrf(session: Session, presented: Any) -> bool:
    return isinstance(presented, str) and _same(session.csrf, presented)
