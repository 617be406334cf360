"""The sealed cross-member list cursor: round trips (on any replica, across key rotation), every
rejection reason, its size bound, and that no change to a token is ever accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_edge.core.federation.cursor import (
    MAX_CURSOR_CHARS,
    MAX_MEMBER_CURSOR_BYTES,
    PURPOSE,
    CursorRejected,
    PageCursor,
    member_cursor_ok,
    open_cursor,
    seal_cursor,
)
from mcp_edge.core.federation.names import MAX_MEMBERS
from mcp_edge.core.seal import KeyRing, StateKey, b64u_decode, open_blob, seal_blob
from tests.support.fuzz import fuzz_settings

NOW = 1_800_000_000.0
K1 = StateKey.from_secret(b"\x01" * 32)
K2 = StateKey.from_secret(b"\x02" * 32)
RING = KeyRing([K1])
MEMBERS = ("docs", "everything", "mail")
PENDING = (("docs", "d-cursor-2"), ("mail", "m:é/2"))
WHERE = {"audience": "edge-1/tools", "method": "tools/list", "principal_id": "alice"}


def sealed(ring: KeyRing = RING, now: float = NOW, private: bool = False, **kw: object) -> str:
    args = {**WHERE, "pending": PENDING, "private": private, "now": now, **kw}
    return seal_cursor(ring, **args)  # type: ignore[arg-type]


def opened(token: object, ring: KeyRing = RING, now: float = NOW, **kw: object) -> PageCursor:
    args = {**WHERE, "members": MEMBERS, "now": now, **kw}
    return open_cursor(ring, token, **args)  # type: ignore[arg-type]


def rejected(token: object, **kw: object) -> str:
    with pytest.raises(CursorRejected) as info:
        opened(token, **kw)
    return info.value.reason


def test_round_trip() -> None:
    token = sealed()
    assert token.startswith(f"{PURPOSE}.{K1.kid}.")
    assert opened(token) == PageCursor(pending=PENDING, private=False)
    assert opened(sealed(private=True)).private is True


def test_the_plaintext_is_not_in_the_token() -> None:
    token = sealed()
    for secret in ("d-cursor-2", "docs", "alice", "tools"):
        assert secret not in token
    assert b"alice" not in b64u_decode(token.split(".")[2])


def test_another_replica_with_the_same_key_and_a_rotated_ring_open_it() -> None:
    token = sealed()
    assert opened(token, ring=KeyRing([StateKey.from_secret(b"\x01" * 32)])).pending == PENDING
    assert opened(token, ring=KeyRing([K2, K1])).pending == PENDING  # K1 retired, still opens


def test_within_leeway_and_until_expiry() -> None:
    token = sealed(ttl_s=60)
    assert opened(token, now=NOW + 60 + 5).pending == PENDING
    assert rejected(token, now=NOW + 60 + 6) == "expired"
    assert opened(token, now=NOW - 5).pending == PENDING
    assert rejected(token, now=NOW - 6) == "expired"  # issued in the future


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"audience": "edge-1/other"}, "route"),
        ({"audience": "edge-2/tools"}, "route"),
        ({"method": "prompts/list"}, "method"),
        ({"principal_id": "mallory"}, "principal"),
        ({"members": ("everything", "mail")}, "member"),  # docs left the route
    ],
)
def test_a_cursor_is_only_good_where_and_for_whom_it_was_issued(
    change: dict[str, object], reason: str
) -> None:
    assert rejected(sealed(), **change) == reason


def test_tampered_or_foreign_tokens_are_refused() -> None:
    token = sealed()
    head, kid, body = token.split(".")
    flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    assert rejected(f"{head}.{kid}.{flipped}") == "integrity"
    assert rejected(sealed(ring=KeyRing([K2]))) == "integrity"  # a key this ring lacks
    assert rejected(f"{head}.{kid}.{body}=") == "integrity"  # not the canonical encoding
    other = seal_blob(RING, "mcpes1", b'{"v":1}')  # sealed for another purpose
    assert rejected(other) == "malformed"
    assert rejected(other.replace("mcpes1", PURPOSE, 1)) == "integrity"


@pytest.mark.parametrize(
    "token",
    [None, 5, ["x"], "", "mcpec1", "mcpec1..", "mcpec1.a.b.c", "nope.kid.body", "mcpec1.kid."],
)
def test_malformed_tokens(token: object) -> None:
    assert rejected(token) == "malformed"


def test_too_long_is_refused_before_any_decoding() -> None:
    assert rejected("mcpec1.x." + "A" * MAX_CURSOR_CHARS) == "too_long"


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"v":2}',
        b'{"v":1,"a":"edge-1/tools","m":"tools/list","p":"x","iat":1,"exp":2}',
        b'{"v":1,"a":"edge-1/tools","m":"tools/list","p":"x","iat":1,"exp":2,"c":[]}',
        b'{"v":1,"a":"edge-1/tools","m":"tools/list","p":"x","iat":1,"exp":2,"c":[["docs"]]}',
        b'{"v":1,"a":"edge-1/tools","m":"tools/list","p":"x","iat":1,"exp":2,"c":[["docs",5]]}',
        b'{"v":1,"a":"edge-1/tools","m":"tools/list","p":"x","iat":"1","exp":2,"c":[["d","c"]]}',
    ],
)
def test_a_payload_of_the_wrong_shape_is_malformed(payload: bytes) -> None:
    # Only a holder of the key could seal these; they are refused all the same.
    assert rejected(seal_blob(RING, PURPOSE, payload)) == "malformed"


def test_one_member_twice_is_malformed() -> None:
    assert rejected(sealed(pending=(("docs", "a"), ("docs", "b")))) == "malformed"


def test_what_seal_refuses() -> None:
    for pending in ((), tuple((f"m{i}", "c") for i in range(MAX_MEMBERS + 1)), (("docs", ""),)):
        with pytest.raises(ValueError):
            sealed(pending=pending)
    with pytest.raises(ValueError):
        sealed(pending=(("docs", "x" * (MAX_MEMBER_CURSOR_BYTES + 1)),))
    with pytest.raises(ValueError):
        sealed(audience="a" * MAX_CURSOR_CHARS)


def test_the_largest_cursor_fits() -> None:
    """Every member at once, each with the largest own cursor, of the characters JSON makes
    longest: the token still fits (and opens)."""
    members = [f"member-{i:02d}-{'x' * 20}" for i in range(MAX_MEMBERS)]
    worst = '"\\' * (MAX_MEMBER_CURSOR_BYTES // 2)
    token = sealed(pending=tuple((m, worst) for m in members), audience="g" * 200 + "/route")
    assert len(token) <= MAX_CURSOR_CHARS
    assert opened(token, members=members, audience="g" * 200 + "/route").pending[0][1] == worst


def test_member_cursor_rule() -> None:
    assert member_cursor_ok("abc") and member_cursor_ok("x" * MAX_MEMBER_CURSOR_BYTES)
    assert member_cursor_ok("é" * (MAX_MEMBER_CURSOR_BYTES // 2))
    for bad in ("", None, 5, "é" * (MAX_MEMBER_CURSOR_BYTES // 2 + 1), "a\x00", "\u202e", "\udc00"):
        assert not member_cursor_ok(bad), bad


@fuzz_settings(300, 5000)
@given(position=st.integers(min_value=0), replacement=st.characters(codec="ascii"))
def test_no_change_to_a_token_is_accepted(position: int, replacement: str) -> None:
    token = sealed()
    position %= len(token)
    changed = token[:position] + replacement + token[position + 1 :]
    if changed == token:
        return
    assert rejected(changed) in ("malformed", "integrity")


@fuzz_settings(300, 5000)
@given(token=st.text(max_size=300) | st.binary() | st.integers() | st.none())
def test_garbage_is_refused_with_a_reason(token: object) -> None:
    assert rejected(token) in ("malformed", "integrity", "too_long")


def test_the_purpose_is_registered_apart() -> None:
    token = sealed()
    assert open_blob(RING, PURPOSE, token) is not None
    assert open_blob(RING, "mcpes1", token) is None
