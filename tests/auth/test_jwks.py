"""The JWKS key source: caching, rotation, bounded refresh, outages, limits."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from starlette.datastructures import Headers

from mcp_edge.auth.base import AuthError
from mcp_edge.auth.jwks import JwksFetchError, JwksKeySource, parse_jwks
from mcp_edge.auth.jwt_bearer import JwtBearerAuthenticator
from mcp_edge.auth.keys import KeyNotFound, KeysUnavailable
from tests.auth.support import (
    ISSUER,
    RESOURCE,
    FakeClock,
    JwksServer,
    SigningKey,
    claims,
    free_port,
    new_ec,
    new_rsa,
)


def bearer(token: str) -> Headers:
    return Headers(raw=[(b"authorization", f"Bearer {token}".encode())])


def authenticator(source: JwksKeySource) -> JwtBearerAuthenticator:
    return JwtBearerAuthenticator(
        key_source=source, issuer=ISSUER, audience=[RESOURCE], algorithms=["RS256", "ES256"]
    )


@pytest.fixture
async def source(jwks_server: JwksServer, clock: FakeClock):
    src = JwksKeySource(
        jwks_server.url, clock=clock, min_refresh_interval=30, max_age=300, timeout=2
    )
    yield src
    await src.aclose()


async def test_keys_are_cached(jwks_server, source, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    auth = authenticator(source)
    for _ in range(5):
        await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert jwks_server.state.hits == 1


async def test_rotation_picked_up_on_unknown_kid(jwks_server, source, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    auth = authenticator(source)
    await auth.authenticate(bearer(rsa_key.sign(claims())), None)

    # The authorization server rotates: a new key is published, the old one withdrawn.
    new_key = new_ec("ec-rotated")
    jwks_server.state.keys = [new_key.jwk()]
    clock.advance(31)
    principal = await auth.authenticate(bearer(new_key.sign(claims(sub="carol"))), None)
    assert principal.display == "carol"
    assert jwks_server.state.hits == 2
    # The withdrawn key no longer verifies anything.
    with pytest.raises(AuthError) as info:
        await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert info.value.status == 401


async def test_refresh_rate_is_bounded(jwks_server, source, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    auth = authenticator(source)
    await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert jwks_server.state.hits == 1

    # A flood of tokens with made-up key ids: within the interval, no refetch at all.
    forger = new_rsa()
    for i in range(20):
        with pytest.raises(AuthError) as info:
            await auth.authenticate(bearer(forger.sign(claims(), kid=f"made-up-{i}")), None)
        assert info.value.status == 401
    assert jwks_server.state.hits == 1

    # After the interval: one refetch, then quiet again.
    clock.advance(30)
    for i in range(20):
        with pytest.raises(AuthError):
            await auth.authenticate(bearer(forger.sign(claims(), kid=f"other-{i}")), None)
    assert jwks_server.state.hits == 2


async def test_concurrent_unknown_kids_share_one_fetch(jwks_server, source, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    jwks_server.state.delay = 0.2
    auth = authenticator(source)
    forger = new_rsa()

    async def attempt(i: int) -> int:
        try:
            await auth.authenticate(bearer(forger.sign(claims(), kid=f"k{i}")), None)
        except AuthError as err:
            return err.status
        return 200

    statuses = await asyncio.gather(*(attempt(i) for i in range(25)))
    assert set(statuses) == {401}
    assert jwks_server.state.hits == 1


async def test_refresh_after_max_age(jwks_server, source, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    auth = authenticator(source)
    await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    clock.advance(301)
    await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert jwks_server.state.hits == 2


async def test_endpoint_down_cached_keys_still_work(jwks_server, source, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    auth = authenticator(source)
    await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert source.healthy

    jwks_server.state.status = 503
    clock.advance(400)  # cache is stale: a refresh is attempted and fails
    principal = await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert principal.display == "alice"
    assert jwks_server.state.hits == 2
    assert not source.healthy

    # A key the gateway does not have, while the endpoint is down: 503, not 401.
    clock.advance(31)
    with pytest.raises(AuthError) as info:
        await auth.authenticate(bearer(new_rsa().sign(claims())), None)
    assert info.value.status == 503
    assert info.value.www_authenticate is None

    # The endpoint recovers: the next allowed refresh picks up the new state.
    new_key = new_rsa("after-outage")
    jwks_server.state.status = 200
    jwks_server.state.keys = [rsa_key.jwk(), new_key.jwk()]
    clock.advance(31)
    assert (await auth.authenticate(bearer(new_key.sign(claims())), None)).display == "alice"
    assert source.healthy


async def test_cold_start_with_endpoint_down(jwks_server, source, clock, rsa_key):
    jwks_server.state.status = 500
    auth = authenticator(source)
    with pytest.raises(AuthError) as info:
        await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert info.value.status == 503
    # Within the interval: still 503, and no further fetch.
    with pytest.raises(AuthError) as info:
        await auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert info.value.status == 503
    assert jwks_server.state.hits == 1


async def test_connection_refused(clock, rsa_key):
    src = JwksKeySource(f"http://127.0.0.1:{free_port()}/jwks", clock=clock, timeout=2)
    try:
        started = time.monotonic()
        with pytest.raises(AuthError) as info:
            await authenticator(src).authenticate(bearer(rsa_key.sign(claims())), None)
        assert info.value.status == 503
        assert time.monotonic() - started < 2
    finally:
        await src.aclose()


async def test_slow_endpoint_times_out(jwks_server, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    jwks_server.state.delay = 3
    src = JwksKeySource(jwks_server.url, clock=clock, timeout=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(KeysUnavailable):
            await src.get_key(rsa_key.kid, "RS256")
        assert time.monotonic() - started < 2
    finally:
        await src.aclose()


async def test_oversized_response_refused(jwks_server, clock, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()] + [
        {"kty": "oct", "k": "x" * 1000, "kid": f"pad{i}"} for i in range(10)
    ]
    src = JwksKeySource(jwks_server.url, clock=clock, max_bytes=4096)
    try:
        with pytest.raises(KeysUnavailable) as info:
            await src.get_key(rsa_key.kid, "RS256")
        assert "larger than 4096" in str(info.value)
    finally:
        await src.aclose()


async def test_redirect_not_followed(jwks_server, clock, rsa_key):
    jwks_server.state.redirect_to = "http://127.0.0.1:9/elsewhere"
    src = JwksKeySource(jwks_server.url, clock=clock)
    try:
        with pytest.raises(KeysUnavailable) as info:
            await src.get_key(rsa_key.kid, "RS256")
        assert "HTTP 302" in str(info.value)
    finally:
        await src.aclose()


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"keys": {}}', b'{"nokeys": []}'])
async def test_bad_documents_do_not_replace_good_keys(jwks_server, clock, rsa_key, body):
    jwks_server.state.keys = [rsa_key.jwk()]
    src = JwksKeySource(jwks_server.url, clock=clock)
    try:
        assert (await src.get_key(rsa_key.kid, "RS256")).kid == rsa_key.kid
        jwks_server.state.body = body
        clock.advance(301)
        assert (await src.get_key(rsa_key.kid, "RS256")).kid == rsa_key.kid
        assert not src.healthy
    finally:
        await src.aclose()


def test_parse_jwks_skips_unusable_members(rsa_key: SigningKey, ec_key: SigningKey):
    weak = new_rsa().jwk()
    from cryptography.hazmat.primitives.asymmetric import rsa as rsa_mod
    from jwt.algorithms import RSAAlgorithm

    small = RSAAlgorithm.to_jwk(
        rsa_mod.generate_private_key(65537, 1024).public_key(), as_dict=True
    )
    small["kid"] = "small"
    private = RSAAlgorithm.to_jwk(rsa_key.private, as_dict=True)
    private["kid"] = "private"
    doc = {
        "keys": [
            rsa_key.jwk(),
            ec_key.jwk(),
            {
                "kty": "oct",
                "k": "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0",
                "kid": "hmac",
            },  # never from a URL
            dict(weak, use="enc", kid="enc"),
            dict(weak, alg="RSA-OAEP", kid="oaep"),
            dict(weak, key_ops=["encrypt"], kid="ops"),
            small,
            private,
            {"kty": "EC", "crv": "P-256", "x": "bad", "y": "bad", "kid": "broken"},
            "not an object",
            {"kid": "no-kty"},
        ]
    }
    keys = parse_jwks(json.dumps(doc).encode())
    assert [k.kid for k in keys] == [rsa_key.kid, ec_key.kid]


def test_parse_jwks_rejects_huge_sets():
    with pytest.raises(JwksFetchError):
        parse_jwks(json.dumps({"keys": [{}] * 1000}).encode())


async def test_no_kid_token_uses_the_single_matching_key(jwks_server, source, rsa_key, ec_key):
    jwks_server.state.keys = [rsa_key.jwk(), ec_key.jwk()]
    assert (await source.get_key(None, "ES256")).kid == ec_key.kid
    second_ec = new_ec("ec-2")
    jwks_server.state.keys.append(second_ec.jwk())
    await source.refresh(force=True)
    from mcp_edge.auth.keys import KeyMismatch

    with pytest.raises(KeyMismatch):
        await source.get_key(None, "ES256")  # ambiguous: no trial verification


async def test_unknown_kid_after_successful_refresh_is_not_found(jwks_server, source, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    with pytest.raises(KeyNotFound):
        await source.get_key("nope", "RS256")
