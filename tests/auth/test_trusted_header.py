"""Trusted identity header (mesh sidecar / authenticating proxy in front)."""

from __future__ import annotations

import ipaddress
import json

import pytest
from starlette.datastructures import Headers

from mcp_edge.auth.base import AuthError
from mcp_edge.auth.challenge import Challenger, parse_bearer_challenge
from mcp_edge.auth.trusted_header import TrustedHeaderAuthenticator, peer_in_networks

NETS = [
    ipaddress.ip_network("127.0.0.1/32"),
    ipaddress.ip_network("10.0.0.0/8"),
    ipaddress.ip_network("fd00::/8"),
]
SECRET = b"s3cret-value-shared-with-the-proxy"


def header_id(identity: str, prefix: str = "") -> str:
    """The principal id of a trusted-header caller (kind, the route's prefix, the identity)."""
    return json.dumps(["trusted-header", prefix, identity], separators=(",", ":"))


def headers(*pairs: tuple[str, str]) -> Headers:
    return Headers(raw=[(k.lower().encode(), v.encode("latin-1")) for k, v in pairs])


def by_network(**kwargs) -> TrustedHeaderAuthenticator:
    return TrustedHeaderAuthenticator(header="X-Forwarded-User", trusted_networks=NETS, **kwargs)


def by_secret(**kwargs) -> TrustedHeaderAuthenticator:
    return TrustedHeaderAuthenticator(
        header="X-Forwarded-User", secret_header="X-Edge-Secret", secret=SECRET, **kwargs
    )


async def test_accepted_from_trusted_peer():
    auth = by_network()
    principal = await auth.authenticate(
        headers(("X-Forwarded-User", "alice@example.com")), "127.0.0.1"
    )
    assert principal.id == '["trusted-header","","alice@example.com"]'
    assert principal.display == "alice@example.com"
    assert (
        await auth.authenticate(headers(("x-forwarded-user", "bob")), "10.20.30.40")
    ).id == '["trusted-header","","bob"]'
    assert (
        await auth.authenticate(headers(("x-forwarded-user", "eve")), "fd12::1")
    ).id == header_id("eve")
    # IPv4-mapped IPv6 peers are compared as IPv4.
    assert (
        await auth.authenticate(headers(("x-forwarded-user", "m")), "::ffff:10.0.0.1")
    ).id == header_id("m")


@pytest.mark.parametrize(
    "peer", ["192.0.2.1", "11.0.0.1", "127.0.0.2", "::1", None, "", "unix:/tmp/sock", "not-an-ip"]
)
async def test_rejected_from_other_peers(peer):
    with pytest.raises(AuthError) as info:
        await by_network().authenticate(headers(("X-Forwarded-User", "alice")), peer)
    assert info.value.status == 401


async def test_missing_or_bad_identity_from_trusted_peer():
    auth = by_network()
    for hdrs in (
        headers(),
        headers(("X-Forwarded-User", "")),
        headers(("X-Forwarded-User", "   ")),
        headers(("X-Forwarded-User", "a"), ("X-Forwarded-User", "b")),
        headers(("X-Forwarded-User", "x" * 600)),
        headers(("X-Forwarded-User", "alice\x01")),
    ):
        with pytest.raises(AuthError) as info:
            await auth.authenticate(hdrs, "127.0.0.1")
        assert info.value.status == 401


async def test_shared_secret():
    auth = by_secret()
    ok = headers(("X-Forwarded-User", "alice"), ("X-Edge-Secret", SECRET.decode()))
    assert (await auth.authenticate(ok, "198.51.100.9")).id == header_id("alice")
    for bad in (
        headers(("X-Forwarded-User", "alice")),
        headers(("X-Forwarded-User", "alice"), ("X-Edge-Secret", "wrong")),
        headers(("X-Forwarded-User", "alice"), ("X-Edge-Secret", SECRET.decode() + "x")),
        headers(
            ("X-Forwarded-User", "alice"),
            ("X-Edge-Secret", SECRET.decode()),
            ("X-Edge-Secret", "x"),
        ),
    ):
        with pytest.raises(AuthError) as info:
            await auth.authenticate(bad, "198.51.100.9")
        assert info.value.status == 401


async def test_network_or_secret_and_require_both():
    either = TrustedHeaderAuthenticator(
        header="X-User", trusted_networks=NETS, secret_header="X-Edge-Secret", secret=SECRET
    )
    assert (await either.authenticate(headers(("X-User", "a")), "127.0.0.1")).id == header_id("a")
    assert (
        await either.authenticate(
            headers(("X-User", "a"), ("X-Edge-Secret", SECRET.decode())), "192.0.2.1"
        )
    ).id == header_id("a")
    both = TrustedHeaderAuthenticator(
        header="X-User",
        trusted_networks=NETS,
        secret_header="X-Edge-Secret",
        secret=SECRET,
        require_both=True,
    )
    with pytest.raises(AuthError):
        await both.authenticate(headers(("X-User", "a")), "127.0.0.1")
    with pytest.raises(AuthError):
        await both.authenticate(
            headers(("X-User", "a"), ("X-Edge-Secret", SECRET.decode())), "192.0.2.1"
        )
    assert (
        await both.authenticate(
            headers(("X-User", "a"), ("X-Edge-Secret", SECRET.decode())), "127.0.0.1"
        )
    ).id == header_id("a")


def test_consumed_headers_are_never_forwarded():
    auth = TrustedHeaderAuthenticator(
        header="X-Forwarded-User",
        trusted_networks=NETS,
        secret_header="X-Edge-Secret",
        secret=SECRET,
        scopes_header="X-Forwarded-Scopes",
    )
    assert auth.consumed_headers == {"x-forwarded-user", "x-edge-secret", "x-forwarded-scopes"}


async def test_scopes_header_and_required_scopes():
    challenger = Challenger(
        resource_metadata="https://gw.example/.well-known/oauth-protected-resource/mcp"
    )
    auth = by_network(
        scopes_header="X-Forwarded-Scopes", required_scopes=["tools"], challenger=challenger
    )
    ok = await auth.authenticate(
        headers(("X-Forwarded-User", "a"), ("X-Forwarded-Scopes", "read, tools")), "127.0.0.1"
    )
    assert ok.scopes == {"read", "tools"}
    with pytest.raises(AuthError) as info:
        await auth.authenticate(
            headers(("X-Forwarded-User", "a"), ("X-Forwarded-Scopes", "read")), "127.0.0.1"
        )
    assert info.value.status == 403
    assert parse_bearer_challenge(info.value.www_authenticate)["error"] == "insufficient_scope"


async def test_id_prefix():
    auth = by_network(id_prefix="mesh ")
    principal = await auth.authenticate(headers(("X-Forwarded-User", "alice")), "127.0.0.1")
    assert principal.id == '["trusted-header","mesh ","alice"]'
    assert principal.display == "alice"
    # Prefix and identity stay apart: no other split of the same characters gives this id.
    other = await by_network(id_prefix="me").authenticate(
        headers(("X-Forwarded-User", "sh alice")), "127.0.0.1"
    )
    assert other.id == '["trusted-header","me","sh alice"]' != principal.id


def test_construction_errors():
    with pytest.raises(ValueError):
        TrustedHeaderAuthenticator(header="X-User")  # neither networks nor secret
    with pytest.raises(ValueError):
        TrustedHeaderAuthenticator(header="X-User", trusted_networks=NETS, require_both=True)
    with pytest.raises(ValueError):
        TrustedHeaderAuthenticator(header="X-User", trusted_networks=NETS, required_scopes=["x"])


def test_peer_in_networks():
    assert peer_in_networks("10.1.2.3", NETS)
    assert not peer_in_networks("10.1.2.3", [])
    assert peer_in_networks("fe80::1%eth0", [ipaddress.ip_network("fe80::/10")])
