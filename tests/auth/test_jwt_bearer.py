"""JWT bearer validation at the authenticator level, against a real JWKS server."""

from __future__ import annotations

import base64
import json
import time

import jwt
import pytest
from starlette.datastructures import Headers

from mcp_edge.auth.base import AuthError
from mcp_edge.auth.challenge import parse_bearer_challenge
from mcp_edge.auth.jwks import JwksKeySource
from mcp_edge.auth.jwt_bearer import JwtBearerAuthenticator, token_in_query
from mcp_edge.auth.keys import StaticKeySource, key_from_pem
from tests.auth.support import (
    ISSUER,
    METADATA_URL,
    RESOURCE,
    JwksServer,
    SigningKey,
    b64u,
    claims,
    new_ed25519,
    new_rsa,
    raw_token,
)


def bearer(token: str) -> Headers:
    return Headers(raw=[(b"authorization", f"Bearer {token}".encode())])


def make_auth(source, **kwargs) -> JwtBearerAuthenticator:
    options = {
        "key_source": source,
        "issuer": ISSUER,
        "audience": [RESOURCE],
        "algorithms": ["RS256", "ES256"],
        "resource_metadata_url": METADATA_URL,
        "scope_hint": ["mcp:tools"],
    }
    options.update(kwargs)
    return JwtBearerAuthenticator(**options)


@pytest.fixture
async def jwks_auth(jwks_server: JwksServer, rsa_key: SigningKey, ec_key: SigningKey):
    jwks_server.state.keys = [rsa_key.jwk(), ec_key.jwk()]
    source = JwksKeySource(jwks_server.url)
    yield make_auth(source)
    await source.aclose()


async def reject(auth: JwtBearerAuthenticator, headers: Headers, **kwargs) -> AuthError:
    with pytest.raises(AuthError) as info:
        await auth.authenticate(headers, "203.0.113.7", **kwargs)
    return info.value


def challenge(err: AuthError) -> dict[str, str]:
    assert err.www_authenticate is not None
    return parse_bearer_challenge(err.www_authenticate)


# ---------------------------------------------------------------------- accepted


async def test_valid_rsa_token(jwks_auth, rsa_key):
    principal = await jwks_auth.authenticate(bearer(rsa_key.sign(claims())), None)
    assert principal.id == f'["jwt-sub","{ISSUER}","alice"]'
    assert principal.display == "alice"
    assert principal.scopes == {"mcp:tools", "mcp:read"}


async def test_valid_ec_token(jwks_auth, ec_key):
    principal = await jwks_auth.authenticate(bearer(ec_key.sign(claims(sub="bob"))), None)
    assert principal.id == f'["jwt-sub","{ISSUER}","bob"]'


async def test_scp_list_claim_and_audience_list(jwks_auth, rsa_key):
    token = rsa_key.sign(
        claims(scope=None, scp=["a", "b"], aud=["https://other.example", RESOURCE])
    )
    principal = await jwks_auth.authenticate(bearer(token), None)
    assert principal.scopes == {"a", "b"}


async def test_client_credentials_token_without_sub(jwks_auth, rsa_key):
    principal = await jwks_auth.authenticate(
        bearer(rsa_key.sign(claims(sub=None, client_id="svc-7"))), None
    )
    assert principal.id == f'["jwt-client","{ISSUER}","svc-7"]'
    assert principal.display == "svc-7"
    principal = await jwks_auth.authenticate(
        bearer(rsa_key.sign(claims(sub=None, azp="svc-8"))), None
    )
    assert principal.id == f'["jwt-client","{ISSUER}","svc-8"]'


async def test_principal_kinds_never_collide(jwks_auth, rsa_key):
    """A client-credentials token and a user whose subject reads like the client's id, or whose
    subject holds the separators of another encoding, are different principals."""
    client = await jwks_auth.authenticate(
        bearer(rsa_key.sign(claims(sub=None, client_id="svc"))), None
    )
    user = await jwks_auth.authenticate(bearer(rsa_key.sign(claims(sub="client:svc"))), None)
    assert client.id != user.id
    assert client.display == "svc" and user.display == "client:svc"
    quoted = await jwks_auth.authenticate(bearer(rsa_key.sign(claims(sub='svc"]'))), None)
    assert json.loads(quoted.id) == ["jwt-sub", ISSUER, 'svc"]']
    assert json.loads(client.id) == ["jwt-client", ISSUER, "svc"]


async def test_leeway_accepts_small_clock_skew(jwks_auth, rsa_key):
    now = int(time.time())
    token = rsa_key.sign(claims(exp=now - 10, nbf=now + 10, iat=now + 10))
    assert (await jwks_auth.authenticate(bearer(token), None)).display == "alice"


async def test_bearer_scheme_is_case_insensitive(jwks_auth, rsa_key):
    headers = Headers(raw=[(b"authorization", f"bearer {rsa_key.sign(claims())}".encode())])
    assert (await jwks_auth.authenticate(headers, None)).display == "alice"


# ---------------------------------------------------------------------- time and claims


async def test_expired(jwks_auth, rsa_key):
    now = int(time.time())
    err = await reject(
        jwks_auth, bearer(rsa_key.sign(claims(exp=now - 120, iat=now - 600, nbf=now - 600)))
    )
    assert err.status == 401
    params = challenge(err)
    assert params["error"] == "invalid_token"
    assert "expired" in params["error_description"]
    assert params["resource_metadata"] == METADATA_URL


async def test_not_yet_valid_nbf(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(nbf=int(time.time()) + 120))))
    assert err.status == 401
    assert "not yet valid" in challenge(err)["error_description"]


async def test_issued_in_the_future(jwks_auth, rsa_key):
    err = await reject(
        jwks_auth, bearer(rsa_key.sign(claims(iat=int(time.time()) + 120, nbf=None)))
    )
    assert err.status == 401
    assert "not yet valid" in challenge(err)["error_description"]


async def test_missing_exp(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(exp=None))))
    assert err.status == 401
    assert challenge(err)["error"] == "invalid_token"


async def test_wrong_issuer(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(iss="https://evil.example"))))
    assert err.status == 401
    assert "issuer" in challenge(err)["error_description"]


async def test_wrong_audience(jwks_auth, rsa_key):
    # A token for the upstream (or any other resource) must not be accepted here.
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(aud="http://127.0.0.1:3001/mcp"))))
    assert err.status == 401
    assert "not issued for this resource" in challenge(err)["error_description"]


async def test_missing_audience(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(aud=None))))
    assert err.status == 401


async def test_no_subject_at_all(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(sub=None))))
    assert err.status == 401


async def test_subject_with_control_characters(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(sub="alice\r\nX-Evil: 1"))))
    assert err.status == 401


async def test_bad_scope_claim_type(jwks_auth, rsa_key):
    err = await reject(jwks_auth, bearer(rsa_key.sign(claims(scope=["not", "a", "string"]))))
    assert err.status == 401


async def test_tampered_payload(jwks_auth, rsa_key):
    header, _, signature = rsa_key.sign(claims()).split(".")
    forged = b64u(
        b'{"iss":"%s","sub":"admin","aud":"%s","exp":9999999999}'
        % (ISSUER.encode(), RESOURCE.encode())
    )
    err = await reject(jwks_auth, bearer(f"{header}.{forged}.{signature}"))
    assert err.status == 401
    assert "signature" in challenge(err)["error_description"]


async def test_signed_by_a_key_not_in_the_set(jwks_auth, rsa_key):
    impostor = SigningKey(rsa_key.kid, "RS256", new_rsa().private)  # same kid, other key
    err = await reject(jwks_auth, bearer(impostor.sign(claims())))
    assert err.status == 401


# ---------------------------------------------------------------------- scopes


async def test_missing_scope_is_403(jwks_server, rsa_key):
    jwks_server.state.keys = [rsa_key.jwk()]
    source = JwksKeySource(jwks_server.url)
    auth = make_auth(source, required_scopes=["mcp:tools", "mcp:admin"], scope_hint=())
    try:
        err = await reject(auth, bearer(rsa_key.sign(claims(scope="mcp:tools"))))
        assert err.status == 403
        params = challenge(err)
        assert params["error"] == "insufficient_scope"
        assert params["scope"] == "mcp:tools mcp:admin"
        assert params["resource_metadata"] == METADATA_URL
        # The same route accepts a token with both scopes.
        principal = await auth.authenticate(
            bearer(rsa_key.sign(claims(scope="mcp:admin mcp:tools x"))), None
        )
        assert principal.display == "alice"
        # The 401 hint is the route's required scopes when no explicit hint is given.
        err = await reject(auth, Headers())
        assert challenge(err)["scope"] == "mcp:tools mcp:admin"
    finally:
        await source.aclose()


# ---------------------------------------------------------------------- algorithms


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_alg_none(jwks_auth, rsa_key, alg):
    token = raw_token({"alg": alg, "typ": "JWT", "kid": rsa_key.kid}, claims())
    err = await reject(jwks_auth, bearer(token))
    assert err.status == 401
    assert challenge(err)["error"] == "invalid_token"
    # The same with no kid and a trailing dot-less signature section.
    token = raw_token({"alg": alg}, claims())
    assert (await reject(jwks_auth, bearer(token))).status == 401


async def test_hs256_signed_with_the_public_key(jwks_auth, rsa_key):
    """Algorithm confusion: an HS256 MAC keyed with the RSA public key (PEM or JWK JSON)."""
    for secret in (rsa_key.public_pem(), rsa_key.public_pem().strip(), str(rsa_key.jwk()).encode()):
        token = raw_token(
            {"alg": "HS256", "typ": "JWT", "kid": rsa_key.kid}, claims(), hmac_key=secret
        )
        err = await reject(jwks_auth, bearer(token))
        assert err.status == 401


async def test_hs256_refused_even_if_allow_listed_with_asymmetric_keys(jwks_server, rsa_key):
    """Defence in depth: even a (mis)configured allow-list with HS256 never lets the public
    key act as an HMAC secret, because keys only verify algorithms of their own type."""
    jwks_server.state.keys = [rsa_key.jwk(with_alg=False)]
    source = JwksKeySource(jwks_server.url)
    auth = make_auth(source, algorithms=["RS256", "HS256"])
    try:
        token = raw_token(
            {"alg": "HS256", "kid": rsa_key.kid}, claims(), hmac_key=rsa_key.public_pem()
        )
        err = await reject(auth, bearer(token))
        assert err.status == 401
        assert "does not match" in challenge(err)["error_description"]
        static = make_auth(
            StaticKeySource([key_from_pem(rsa_key.public_pem())]), algorithms=["RS256", "HS256"]
        )
        token = raw_token({"alg": "HS256"}, claims(), hmac_key=rsa_key.public_pem())
        assert (await reject(static, bearer(token))).status == 401
    finally:
        await source.aclose()


async def test_algorithm_not_in_allow_list(jwks_server):
    key = new_rsa(alg="PS256")
    jwks_server.state.keys = [key.jwk()]
    source = JwksKeySource(jwks_server.url)
    try:
        err = await reject(
            make_auth(source), bearer(key.sign(claims()))
        )  # allow-list: RS256, ES256
        assert err.status == 401
        assert "algorithm" in challenge(err)["error_description"]
        assert source.fetch_count == 0  # rejected before any key lookup
        ok = await make_auth(source, algorithms=["PS256"]).authenticate(
            bearer(key.sign(claims())), None
        )
        assert ok.display == "alice"
    finally:
        await source.aclose()


async def test_key_pinned_alg_must_match(jwks_server):
    """A JWK with alg RS256 does not verify a PS256 token, even if both are allowed."""
    key = new_rsa(alg="RS256")
    jwks_server.state.keys = [key.jwk()]
    source = JwksKeySource(jwks_server.url)
    try:
        ps = SigningKey(key.kid, "PS256", key.private)
        err = await reject(
            make_auth(source, algorithms=["RS256", "PS256"]), bearer(ps.sign(claims()))
        )
        assert err.status == 401
    finally:
        await source.aclose()


async def test_ec_token_claiming_rsa_kid(jwks_auth, rsa_key, ec_key):
    mixed = SigningKey(rsa_key.kid, "ES256", ec_key.private)  # ES256 header, RSA key id
    err = await reject(jwks_auth, bearer(mixed.sign(claims())))
    assert err.status == 401


async def test_eddsa_with_static_key():
    key = new_ed25519()
    auth = make_auth(
        StaticKeySource([key_from_pem(key.public_pem(), kid=key.kid)]), algorithms=["EdDSA"]
    )
    assert (await auth.authenticate(bearer(key.sign(claims())), None)).display == "alice"


async def test_token_type_check(jwks_auth, rsa_key, jwks_server):
    source = JwksKeySource(jwks_server.url)
    auth = make_auth(source, token_types=["at+jwt"])
    try:
        ok = rsa_key.sign(claims(), headers={"typ": "at+jwt"})
        assert (await auth.authenticate(bearer(ok), None)).display == "alice"
        ok = rsa_key.sign(claims(), headers={"typ": "application/at+jwt"})
        assert (await auth.authenticate(bearer(ok), None)).display == "alice"
        id_token = rsa_key.sign(claims(), headers={"typ": "JWT"})
        assert (await reject(auth, bearer(id_token))).status == 401
    finally:
        await source.aclose()


# ---------------------------------------------------------------------- request shape


async def test_no_credentials(jwks_auth):
    err = await reject(jwks_auth, Headers())
    assert err.status == 401
    params = challenge(err)
    assert params == {"resource_metadata": METADATA_URL, "scope": "mcp:tools"}
    assert err.www_authenticate == f'Bearer resource_metadata="{METADATA_URL}", scope="mcp:tools"'


async def test_other_scheme_counts_as_no_credentials(jwks_auth):
    err = await reject(jwks_auth, Headers(raw=[(b"authorization", b"Basic YWxpY2U6cHc=")]))
    assert err.status == 401
    assert "error" not in challenge(err)


@pytest.mark.parametrize(
    "value",
    [
        b"Bearer",
        b"Bearer ",
        b"Bearer a b",
        b'Bearer "quoted"',
        b"Bearer tok,en",
        b"Bearer t\xc3\xa9",
    ],
)
async def test_malformed_authorization_header(jwks_auth, value):
    err = await reject(jwks_auth, Headers(raw=[(b"authorization", value)]))
    assert err.status == 400
    assert challenge(err)["error"] == "invalid_request"


async def test_two_authorization_headers(jwks_auth, rsa_key):
    token = rsa_key.sign(claims()).encode()
    headers = Headers(
        raw=[(b"authorization", b"Bearer " + token), (b"authorization", b"Bearer " + token)]
    )
    err = await reject(jwks_auth, headers)
    assert err.status == 400


@pytest.mark.parametrize("token", ["abc", "abc.def", "a.b.c", "eyJhbGciOiJSUzI1NiJ9.e30", "..."])
async def test_garbage_token(jwks_auth, token):
    err = await reject(jwks_auth, bearer(token))
    assert err.status == 401
    assert challenge(err)["error"] == "invalid_token"


async def test_header_kid_not_a_string(jwks_auth, rsa_key):
    token = raw_token({"alg": "RS256", "kid": 7}, claims())
    assert (await reject(jwks_auth, bearer(token))).status == 401


async def test_oversized_token(jwks_auth, rsa_key):
    token = rsa_key.sign(claims(pad="x" * 20000))
    err = await reject(jwks_auth, bearer(token))
    assert err.status == 401
    assert "too large" in challenge(err)["error_description"]


async def test_token_in_query_string_is_refused(jwks_auth, rsa_key):
    token = rsa_key.sign(claims())
    # Even together with a valid header token: the request is malformed, never accepted.
    for headers in (Headers(), bearer(token)):
        err = await reject(jwks_auth, headers, query_string=f"access_token={token}".encode())
        assert err.status == 400
        params = challenge(err)
        assert params["error"] == "invalid_request"
        assert token not in err.www_authenticate
        assert token not in err.message
    err = await reject(jwks_auth, Headers(), query_string=b"x=1&access_token=&y=2")
    assert err.status == 400
    # Other query parameters are fine.
    ok = await jwks_auth.authenticate(bearer(token), None, query_string=b"session=abc&token_hint=1")
    assert ok.display == "alice"


def test_token_in_query_parser():
    assert token_in_query(b"access_token=abc")
    assert token_in_query("a=1&access_token")
    assert not token_in_query(b"my_access_token=1")
    assert not token_in_query(b"")


async def test_errors_never_echo_the_token(jwks_auth, rsa_key, caplog):
    caplog.set_level("DEBUG")
    now = int(time.time())
    tokens = [
        rsa_key.sign(claims(exp=now - 100)),
        rsa_key.sign(claims(aud="x")),
        raw_token({"alg": "none"}, claims()),
        "not.a.jwt",
    ]
    for token in tokens:
        err = await reject(jwks_auth, bearer(token))
        for part in token.split("."):
            if len(part) > 8:
                assert part not in (err.www_authenticate or "")
                assert part not in err.message
                assert part not in caplog.text
    assert "eyJ" not in caplog.text


async def test_header_values_are_valid_http(jwks_auth):
    err = await reject(jwks_auth, Headers())
    err.www_authenticate.encode("ascii")
    assert "\n" not in err.www_authenticate


def test_b64_helper_roundtrip():
    assert base64.urlsafe_b64decode(b64u(b"abc") + "=") == b"abc"
    assert jwt.get_unverified_header(raw_token({"alg": "none"}, {})) == {"alg": "none"}
