"""The sealed requestState envelope: round trips, every rejection reason, rotation, and
property tests that no mutation of a token is ever accepted."""

import base64
import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_edge.core.seal import (
    FORMAT,
    Binding,
    Claims,
    KeyRing,
    StateKey,
    StateRejected,
    b64u_encode,
    derive_kid,
    generate_key,
    new_claims,
    open_state,
    parse_key_spec,
    principal_tag,
    seal,
    verify_binding,
)

NOW = 1_800_000_000.0
K1 = StateKey.from_secret(b"\x01" * 32)
K2 = StateKey.from_secret(b"\x02" * 32)
RING = KeyRing([K1])
BINDING = Binding(
    audience="edge/default", principal_id="alice", method="tools/call", target="book", digest="dg"
)


def make(ring=RING, binding=BINDING, now=NOW, ttl=600, state="up-state", round_number=1):
    claims = new_claims(
        ring,
        binding,
        now=now,
        ttl=ttl,
        input_keys=["a", "b"],
        round_number=round_number,
        upstream_state=state,
        endpoint="http://10.0.0.1:8000/mcp",
    )
    return claims, seal(ring, claims)


def reason(fn):
    with pytest.raises(StateRejected) as info:
        fn()
    return info.value.reason


def test_round_trip():
    claims, token = make()
    assert token.startswith(f"{FORMAT}.{K1.kid}.")
    opened, key = open_state(RING, token, now=NOW + 1)
    assert opened == claims and key is K1
    verify_binding(opened, key, BINDING, max_rounds=16)
    assert opened.s == "up-state" and opened.k == ["a", "b"] and opened.r == 1


def test_no_upstream_state_round_trips_as_none():
    claims, token = make(state=None)
    assert open_state(RING, token, now=NOW)[0].s is None


def test_state_is_encrypted_and_principal_is_not_readable():
    _, token = make(state="very-secret-upstream-state")
    blob = base64.urlsafe_b64decode(token.split(".")[2] + "==")
    assert b"very-secret" not in blob and b"alice" not in blob and b"book" not in blob


def test_each_seal_differs():
    c, t1 = make()
    assert t1 != seal(RING, c)


def test_expiry_with_injected_clock():
    _, token = make(ttl=60)
    open_state(RING, token, now=NOW + 60 + 5, leeway=5)
    assert reason(lambda: open_state(RING, token, now=NOW + 60 + 6, leeway=5)) == "expired"
    assert (
        reason(lambda: open_state(RING, token, now=NOW - 30, leeway=5)) == "expired"
    )  # issued in the future


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("audience", "edge/other-route", "binding"),
        ("audience", "other-gateway/default", "binding"),
        ("principal_id", "bob", "principal"),
        ("method", "prompts/get", "binding"),
        ("target", "other-tool", "binding"),
        ("digest", "other-args", "binding"),
    ],
)
def test_binding_failures(field, value, expected):
    claims, token = make()
    opened, key = open_state(RING, token, now=NOW)
    other = dataclasses.replace(BINDING, **{field: value})
    assert reason(lambda: verify_binding(opened, key, other, max_rounds=16)) == expected


def test_rounds_limit():
    _, token = make(round_number=5)
    opened, key = open_state(RING, token, now=NOW)
    verify_binding(opened, key, BINDING, max_rounds=5)
    assert reason(lambda: verify_binding(opened, key, BINDING, max_rounds=4)) == "rounds"


def test_rotation_old_key_opens_new_key_seals():
    old_ring = KeyRing([K1])
    _, old_token = make(ring=old_ring)
    rotated = KeyRing([K2, K1])
    claims, key = open_state(rotated, old_token, now=NOW)
    assert key is K1
    verify_binding(
        claims, key, BINDING, max_rounds=16
    )  # principal tag checked with the sealing key
    _, new_token = make(ring=rotated)
    assert new_token.split(".")[1] == K2.kid
    assert open_state(rotated, new_token, now=NOW)[1] is K2
    # Once the old key is dropped, its tokens no longer open.
    assert reason(lambda: open_state(KeyRing([K2]), old_token, now=NOW)) == "integrity"


def test_swapped_key_id_is_rejected():
    ring = KeyRing([K1, K2])
    _, token = make(ring=ring)
    prefix, kid, body = token.split(".")
    assert reason(lambda: open_state(ring, f"{prefix}.{K2.kid}.{body}", now=NOW)) == "integrity"


@pytest.mark.parametrize(
    "token",
    [
        "",
        "hello",
        "mcpe1.x",
        "mcpe2.a.b",
        12345,
        None,
        {"a": 1},
        f"mcpe1.{K1.kid}.***",
        f"mcpe1.{K1.kid}.AAAA",
        "x" * 300_000,
    ],
)
def test_garbage_is_malformed(token):
    assert reason(lambda: open_state(RING, token, now=NOW)) == "malformed"


def test_a_well_formed_token_with_an_unknown_key_and_no_body_fails_integrity():
    assert reason(lambda: open_state(RING, "mcpe1..", now=NOW)) == "integrity"


def test_claims_of_another_version_are_malformed():
    key = RING.current
    nonce = os.urandom(12)
    blob = key.aead.encrypt(nonce, b'{"v":2}', f"{FORMAT}.{key.kid}".encode())
    token = f"{FORMAT}.{key.kid}.{b64u_encode(nonce + blob)}"
    assert reason(lambda: open_state(RING, token, now=NOW)) == "malformed"


def test_keys():
    spec = generate_key()
    assert len(base64.urlsafe_b64decode(spec + "=")) == 32
    assert parse_key_spec(spec).kid == derive_kid(base64.urlsafe_b64decode(spec + "="))
    assert parse_key_spec("k2024:" + spec).kid == "k2024"
    with pytest.raises(ValueError):
        parse_key_spec(b64u_encode(b"short"))
    with pytest.raises(ValueError):
        parse_key_spec("not base64 !!")
    with pytest.raises(ValueError):
        KeyRing([])
    with pytest.raises(ValueError):
        KeyRing([K1, K1])


def test_principal_tag_is_keyed():
    assert principal_tag(K1, "alice") != principal_tag(K2, "alice")
    assert principal_tag(K1, "alice") != principal_tag(K1, "bob")


# ---------------------------------------------------------------- properties

_CLAIMS, TOKEN = make()


def _opens(token: str) -> bool:
    try:
        claims, key = open_state(RING, token, now=NOW)
        verify_binding(claims, key, BINDING, max_rounds=16)
    except StateRejected:
        return False
    return True


@settings(max_examples=400)
@given(st.integers(min_value=0, max_value=len(TOKEN) * 8 - 1))
def test_no_bit_flip_is_accepted(bit):
    raw = bytearray(TOKEN.encode())
    raw[bit // 8] ^= 1 << (bit % 8)
    try:
        mutated = raw.decode()
    except UnicodeDecodeError:
        return
    if mutated != TOKEN:
        assert not _opens(mutated)


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=len(TOKEN) - 1))
def test_no_truncation_is_accepted(cut):
    assert not _opens(TOKEN[:cut])


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=12))
def test_no_extension_is_accepted(suffix):
    assert not _opens(TOKEN + suffix)
    assert not _opens(suffix + TOKEN)


def test_re_encodings_are_rejected():
    prefix, kid, body = TOKEN.split(".")
    blob = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    for variant in (
        f"{prefix}.{kid}.{base64.urlsafe_b64encode(blob).decode()}",  # padded
        f"{prefix}.{kid}.{base64.b64encode(blob).decode()}",  # standard alphabet
        f"{prefix.upper()}.{kid}.{body}",
        f" {TOKEN}",
    ):
        if variant != TOKEN:
            assert not _opens(variant)


@given(
    st.builds(
        Claims,
        iat=st.integers(0, 2**40),
        exp=st.integers(0, 2**40),
        aud=st.text(),
        p=st.text(),
        m=st.text(),
        t=st.none() | st.text(),
        d=st.text(),
        k=st.lists(st.text(), max_size=4),
        r=st.integers(1, 100),
        j=st.text(),
        e=st.none() | st.text(),
        s=st.none() | st.text(),
    )
)
def test_open_of_seal_is_identity(claims):
    token = seal(RING, claims)
    opened, _ = (
        open_state(RING, token, now=claims.iat, leeway=0)
        if claims.exp >= claims.iat
        else (claims, None)
    )
    assert opened == claims
