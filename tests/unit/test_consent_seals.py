"""The sealed pieces of a consent flow: the start link's ticket, the browser's transaction
cookie, the round's continuation and the signed-in session. Round trips, every refusal, no
piece opening as another, and property tests that no change to a token is accepted."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_edge.core.seal import KeyRing, StateKey, b64u_decode, b64u_encode, seal_blob
from mcp_edge.identity import consent_seals as cs

NOW = 1_800_000_000.0
K1 = StateKey.from_secret(b"\x01" * 32)
K2 = StateKey.from_secret(b"\x02" * 32)
RING = KeyRing([K1])
ALICE = '["jwt-sub","https://idp.example","alice"]'
BOB = '["jwt-sub","https://idp.example","bob"]'


def ticket(ring=RING, now=NOW, ttl=300, who=ALICE):
    return cs.issue_ticket(
        ring,
        principal_id=who,
        route="tickets",
        member="tickets",
        call="tools/call create_issue",
        now=now,
        ttl=ttl,
    )


def refused(fn) -> str:
    with pytest.raises(cs.ConsentRefused) as info:
        fn()
    return info.value.reason


# ---------------------------------------------------------------------------- tickets


def test_ticket_round_trip_and_binding():
    token, issued = ticket()
    opened = cs.open_ticket(RING, token, now=NOW + 10)
    assert opened == issued
    assert opened.is_for(RING, ALICE)
    assert not opened.is_for(RING, BOB)
    assert len(opened.consent_id) == 22
    # Nothing of the principal is in the clear, and a link is short.
    assert "alice" not in token and len(token) < 500


def test_ticket_holds_no_principal_in_clear():
    _, issued = ticket()
    assert ALICE not in str(issued.to_doc()) and "alice" not in str(issued.to_doc())


def test_each_ticket_is_a_new_consent():
    assert ticket()[1].consent_id != ticket()[1].consent_id


def test_ticket_expires():
    token, _ = ticket(ttl=300)
    cs.open_ticket(RING, token, now=NOW + 300)
    assert refused(lambda: cs.open_ticket(RING, token, now=NOW + 306)) == "expired"
    assert refused(lambda: cs.open_ticket(RING, token, now=NOW - 60)) == "expired"


def test_ticket_from_another_ring_or_garbage():
    token, _ = ticket()
    other = KeyRing([K2])
    assert refused(lambda: cs.open_ticket(other, token, now=NOW)) == "malformed"
    for junk in ("", "x", "mcpecs1.a.b", None, 7, "mcpecs1." + "A" * 3000):
        assert refused(lambda junk=junk: cs.open_ticket(RING, junk, now=NOW)) == "malformed"


def test_ticket_survives_rotation():
    token, _ = ticket(ring=KeyRing([K1]))
    rotated = KeyRing([K2, K1])
    opened = cs.open_ticket(rotated, token, now=NOW)
    assert opened.is_for(rotated, ALICE) and not opened.is_for(rotated, BOB)
    assert not opened.is_for(KeyRing([K2]), ALICE)  # the key that made the tag is gone


def test_a_ticket_claiming_another_key_is_refused():
    _, issued = ticket()
    doc = {"v": 1, **dataclasses.replace(issued, kid="other").to_doc()}
    import orjson

    token = seal_blob(RING, cs.TICKET, orjson.dumps(doc))
    assert refused(lambda: cs.open_ticket(RING, token, now=NOW)) == "malformed"


def test_pieces_never_open_as_each_other():
    token, issued = ticket()
    tx = cs.begin_leg(issued, cs.SIGN_IN, now=NOW, ttl=600)
    cookie = cs.seal_transaction(RING, tx)
    cont = cs.seal_continuation(RING, cs.Continuation("c", "tickets"))
    session = cs.seal_session(RING, cs.new_session(ALICE, "alice", now=NOW, ttl=600))
    assert refused(lambda: cs.open_ticket(RING, cookie, now=NOW)) == "malformed"
    assert refused(lambda: cs.open_ticket(RING, cont, now=NOW)) == "malformed"
    assert refused(lambda: cs.open_ticket(RING, session, now=NOW)) == "malformed"
    assert refused(lambda: cs.open_transaction(RING, token, state=tx.state, now=NOW)) == "malformed"
    assert (
        refused(lambda: cs.open_transaction(RING, session, state=tx.state, now=NOW)) == "malformed"
    )
    assert cs.open_continuation(RING, token, member="tickets") is None
    assert cs.open_continuation(RING, cookie, member="tickets") is None
    assert cs.open_session(RING, token, now=NOW) is None
    assert cs.open_session(RING, cookie, now=NOW) is None


def _flip(token: str, position: int) -> str:
    prefix, kid, body = token.split(".")
    raw = bytearray(b64u_decode(body))
    raw[position % len(raw)] ^= 0x01
    return f"{prefix}.{kid}.{b64u_encode(bytes(raw))}"


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_no_bit_flip_of_a_ticket_opens(position: int):
    token, _ = ticket()
    assert refused(lambda: cs.open_ticket(RING, _flip(token, position), now=NOW)) == "malformed"


# ---------------------------------------------------------------------------- transactions


def test_transaction_round_trip_and_its_cookie_name():
    _, issued = ticket()
    tx = cs.begin_leg(issued, cs.SIGN_IN, now=NOW, ttl=600)
    cookie = cs.seal_transaction(RING, tx)
    assert len(cookie) < cs.MAX_COOKIE_CHARS
    opened = cs.open_transaction(RING, cookie, state=tx.state, now=NOW + 1)
    assert opened == tx
    assert opened.cookie_name == cs.transaction_cookie(tx.state)
    assert opened.cookie_name.startswith("mcpe-tx-")
    # RFC 7636: 43..128 characters of the unreserved set; S256 of it as the challenge.
    assert 43 <= len(tx.verifier) <= 128
    assert tx.challenge == cs.pkce_challenge(tx.verifier) != tx.verifier


def test_pkce_s256_matches_rfc7636_appendix_b():
    assert (
        cs.pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )


def test_each_leg_has_fresh_secrets():
    _, issued = ticket()
    a = cs.begin_leg(issued, cs.SIGN_IN, now=NOW, ttl=600)
    b = cs.begin_leg(issued, cs.GRANT, now=NOW, ttl=600, principal_id=ALICE)
    assert len({a.state, b.state, a.verifier, b.verifier, a.nonce, b.nonce}) == 6
    assert a.cookie_name != b.cookie_name
    assert a.single_use_id != b.single_use_id


def test_transaction_refusals():
    _, issued = ticket()
    tx = cs.begin_leg(issued, cs.SIGN_IN, now=NOW, ttl=600)
    cookie = cs.seal_transaction(RING, tx)
    assert refused(lambda: cs.open_transaction(RING, None, state=tx.state, now=NOW)) == (
        "no_transaction"
    )
    assert refused(lambda: cs.open_transaction(RING, cookie, state="forged", now=NOW)) == (
        "state_mismatch"
    )
    assert refused(lambda: cs.open_transaction(RING, cookie, state=tx.state, now=NOW + 700)) == (
        "expired"
    )
    assert refused(lambda: cs.open_transaction(KeyRing([K2]), cookie, state=tx.state, now=NOW)) == (
        "malformed"
    )


def test_a_grant_leg_always_names_its_principal():
    _, issued = ticket()
    tx = cs.begin_leg(issued, cs.GRANT, now=NOW, ttl=600)  # no principal: never made so
    cookie = cs.seal_transaction(RING, tx)
    assert refused(lambda: cs.open_transaction(RING, cookie, state=tx.state, now=NOW)) == (
        "malformed"
    )


# ---------------------------------------------------------------------------- continuations


def test_continuation_round_trip_and_member_binding():
    cont = cs.Continuation(
        "cid",
        "route/github",
        upstream_state="up",
        responses={"q": {"action": "accept"}},
        endpoint="e",
    )
    token = cs.seal_continuation(RING, cont)
    assert cs.is_continuation(token)
    assert cs.open_continuation(RING, token, member="route/github") == cont
    assert cs.open_continuation(RING, token, member="route/other") is None
    minimal = cs.Continuation("cid", "m")
    assert cs.open_continuation(RING, cs.seal_continuation(RING, minimal), member="m") == minimal


def test_an_upstream_state_is_no_continuation():
    # What an upstream sends is never taken for the gateway's continuation, even with the prefix.
    for state in ("plain-state", "mcpecc1.x.y", "mcpecc1." + "A" * 50, "", None):
        assert cs.open_continuation(RING, state, member="m") is None


# ---------------------------------------------------------------------------- sessions


def test_session_round_trip_expiry_and_csrf():
    session = cs.new_session(ALICE, "alice", now=NOW, ttl=900)
    cookie = cs.seal_session(RING, session)
    assert cs.open_session(RING, cookie, now=NOW + 899) == session
    assert cs.open_session(RING, cookie, now=NOW + 1000) is None
    assert cs.open_session(RING, None, now=NOW) is None
    assert cs.open_session(RING, "garbage", now=NOW) is None
    assert cs.same_csrf(session, session.csrf)
    assert not cs.same_csrf(session, session.csrf[:-1] + "x")
    assert not cs.same_csrf(session, None)
