"""The tests' authorization server (oidc-provider, tests/support/authserver.py) and browser
(headless Chromium, tests/support/browser.py) themselves: what the upstream-identity tests build
on. One server for the module; one browser for the code flows."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import jwt
import pytest

from tests.auth.support import SigningKey, new_rsa
from tests.support import authserver as authserver_support
from tests.support import browser as browser_support
from tests.support.authserver import (
    ACCESS_TOKEN_TYPE,
    JWT_TOKEN_TYPE,
    REDIRECT_URI,
    TOKEN_EXCHANGE,
    AuthServer,
    OAuthClient,
    pkce_pair,
    start_authserver,
)
from tests.support.browser import browser

pytestmark = pytest.mark.integration

INBOUND = "http://127.0.0.1:1/mcp"  # the audience of the caller's token (a gateway's route)
UPSTREAM = "http://127.0.0.1:2/mcp"  # the audience an exchange asks for (an upstream MCP server)
METHODS = ("client_secret_basic", "client_secret_post", "private_key_jwt")
EXTERNAL = "https://idp.example.test"  # another issuer, whose JWTs the server trusts
EXTERNAL_KEY: SigningKey = new_rsa("idp-1")


@pytest.fixture(scope="module")
def authserver(module_tmp: Path) -> Iterator[AuthServer]:
    """The server as tests/conftest.py's fixture starts it, plus a trusted issuer and a client
    limited to one target."""
    with ExitStack() as stack:
        yield start_authserver(
            stack,
            module_tmp / "authserver",
            trusted_issuers=[{"issuer": EXTERNAL, "jwks": {"keys": [EXTERNAL_KEY.jwk()]}}],
            allowed_audiences={"gateway-post": [UPSTREAM]},
        )


def marker() -> str:
    return f"m-{uuid.uuid4().hex[:12]}"


def client_for(server: AuthServer, method: str) -> OAuthClient:
    return next(c for c in server.clients.values() if c.auth_method == method)


# ------------------------------------------------------------------ metadata


def test_metadata_advertises_the_token_exchange_grant(authserver: AuthServer) -> None:
    oauth = httpx.get(authserver.metadata_url, timeout=10).json()
    oidc = httpx.get(f"{authserver.issuer}/.well-known/openid-configuration", timeout=10).json()
    for metadata in (oauth, oidc):
        assert metadata["issuer"] == authserver.issuer
        assert TOKEN_EXCHANGE in metadata["grant_types_supported"]
        assert {"authorization_code", "refresh_token"} <= set(metadata["grant_types_supported"])
        assert metadata["code_challenge_methods_supported"] == ["S256"]
        assert set(METHODS) <= set(metadata["token_endpoint_auth_methods_supported"])
        for endpoint in ("token", "authorization", "introspection", "revocation"):
            assert metadata[f"{endpoint}_endpoint"].startswith(authserver.issuer + "/")


# ------------------------------------------------------------------ token exchange


@pytest.mark.parametrize("method", METHODS)
def test_exchange_yields_a_jwt_for_the_audience(authserver: AuthServer, method: str) -> None:
    client = client_for(authserver, method)
    mark = marker()
    subject = authserver.user_token("alice", INBOUND, "mcp:tools mcp:read", marker=mark)

    r = authserver.exchange(client, subject, resource=UPSTREAM, scope="mcp:read")

    assert r.status_code == 200, r.text
    body = r.json()
    assert body["issued_token_type"] == ACCESS_TOKEN_TYPE
    assert body["token_type"] == "Bearer"
    assert body["scope"] == "mcp:read"
    claims = authserver.verify(body["access_token"], UPSTREAM)  # against the server's JWKS
    assert claims["sub"] == "alice"
    assert claims["aud"] == UPSTREAM
    assert claims["client_id"] == client.client_id
    assert claims["scope"] == "mcp:read"
    assert claims["exp"] - claims["iat"] == body["expires_in"] == 300
    assert "act" not in claims
    assert jwt.get_unverified_header(body["access_token"])["typ"] == "at+jwt"
    with pytest.raises(jwt.InvalidAudienceError):
        authserver.verify(body["access_token"], INBOUND)
    # The log names the exchange by the subject token's marker, and how the client authenticated.
    (entry,) = authserver.exchanges(mark)
    assert entry["client_id"] == client.client_id
    assert entry["auth_method"] == method
    assert entry["status"] == 200
    assert entry["exchange"] == {
        "subject": "alice",
        "subject_iss": authserver.issuer,
        "subject_marker": mark,
        "target": UPSTREAM,
        "scope": "mcp:read",
        "issued": True,
    }


def test_exchange_with_an_actor_token_names_the_actor(authserver: AuthServer) -> None:
    gateway = authserver.basic
    actor = authserver.token_request(gateway, {"grant_type": "client_credentials"})
    assert actor.status_code == 200, actor.text
    subject = authserver.user_token("bob", INBOUND, marker=marker())

    r = authserver.exchange(
        gateway,
        subject,
        audience="tickets",  # a logical name (RFC 8693 audience), not a URI
        requested_token_type=JWT_TOKEN_TYPE,
        actor_token=actor.json()["access_token"],
    )

    assert r.status_code == 200, r.text
    assert r.json()["issued_token_type"] == JWT_TOKEN_TYPE
    claims = authserver.verify(r.json()["access_token"], "tickets")
    assert claims["sub"] == "bob"
    assert claims["act"] == {"sub": "gateway-basic"}
    # No scope asked: the subject's, as far as the target defines them.
    assert claims["scope"] == "mcp:tools mcp:read mcp:write"


def test_exchange_of_a_trusted_issuers_jwt(authserver: AuthServer) -> None:
    now = int(time.time())
    claims = {"iss": EXTERNAL, "sub": "ext-dana", "aud": INBOUND, "iat": now, "exp": now + 300}
    subject = EXTERNAL_KEY.sign({**claims, "scope": "mcp:read", "test_marker": (mark := marker())})

    r = authserver.exchange(
        authserver.basic, subject, resource=UPSTREAM, subject_token_type=JWT_TOKEN_TYPE
    )

    assert r.status_code == 200, r.text
    exchanged = authserver.verify(r.json()["access_token"], UPSTREAM)
    assert (exchanged["sub"], exchanged["iss"], exchanged["scope"]) == (
        "ext-dana",
        authserver.issuer,
        "mcp:read",
    )
    (entry,) = authserver.exchanges(mark)
    assert entry["exchange"]["subject_iss"] == EXTERNAL


def test_refused_exchanges_name_what_is_wrong(authserver: AuthServer) -> None:
    gateway = authserver.post
    subject = authserver.user_token("alice", INBOUND)
    # A token shaped like this server's, signed by another key.
    now = jwt.decode(subject, options={"verify_signature": False})
    forged = new_rsa("forged").sign({**now, "sub": "mallory"})
    untrusted = new_rsa("other").sign({**now, "iss": "https://other.example.test"})
    mark = marker()

    cases = {
        "garbage": (
            authserver.exchange(gateway, "not-a-token", resource=UPSTREAM, marker=mark),
            "invalid_grant",
        ),
        "forged": (
            authserver.exchange(gateway, forged, resource=UPSTREAM, marker=mark),
            "invalid_grant",
        ),
        "untrusted issuer": (
            authserver.exchange(gateway, untrusted, resource=UPSTREAM, marker=mark),
            "invalid_grant",
        ),
        "no target": (authserver.exchange(gateway, subject, marker=mark), "invalid_target"),
        # gateway-post may only get tokens for UPSTREAM
        "target not allowed": (
            authserver.exchange(gateway, subject, audience="tickets", marker=mark),
            "invalid_target",
        ),
        "two targets": (
            authserver.exchange(gateway, subject, audience="a", resource=UPSTREAM, marker=mark),
            "invalid_target",
        ),
        "unknown scope": (
            authserver.exchange(gateway, subject, resource=UPSTREAM, scope="admin", marker=mark),
            "invalid_scope",
        ),
        "token type": (
            authserver.exchange(
                gateway,
                subject,
                resource=UPSTREAM,
                requested_token_type="urn:ietf:params:oauth:token-type:refresh_token",
                marker=mark,
            ),
            "invalid_request",
        ),
        # The public client has no token-exchange grant (oidc-provider: "requested grant type is
        # not allowed for this client").
        "public client": (
            authserver.exchange(authserver.public, subject, resource=UPSTREAM, marker=mark),
            "invalid_request",
        ),
    }
    for name, (response, error) in cases.items():
        assert response.status_code in (400, 401), (name, response.text)
        assert response.json()["error"] == error, (name, response.text)
    logged = authserver.requests(mark)
    assert len(logged) == len(cases)
    assert all(not (e.get("exchange") or {}).get("issued") for e in logged)


# ------------------------------------------------------------------ code flow in a browser


class Callback:
    """A loopback redirect URI served by the test: records the query of each request to it."""

    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if url.path != urlsplit(REDIRECT_URI).path:  # the browser's /favicon.ico
                    self.send_error(404)
                    return
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                outer.queries.append(query)
                body = f"<html><body><p id='done'>callback got {sorted(query)}</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        # The registered URI, on this port (loopback: any port matches).
        self.uri = REDIRECT_URI.replace("127.0.0.1", f"127.0.0.1:{self.server.server_port}")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def callback() -> Iterator[Callback]:
    served = Callback()
    yield served
    served.close()


def authorization_url(
    server: AuthServer,
    client: OAuthClient,
    redirect_uri: str,
    challenge: str,
    state: str,
    **extra: str,
) -> str:
    query = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": redirect_uri,
        "scope": "mcp:tools",
        "resource": UPSTREAM,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **extra,
    }
    return f"{server.authorization_endpoint}?{urlencode(query)}"


def chromium_processes(profile: Path) -> list[int]:
    """Processes whose command line names this profile directory (the browser and its children)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(profile) in (proc / "cmdline").read_bytes().decode(
                errors="replace"
            ):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


async def test_code_flow_with_pkce_in_a_browser_then_refresh_and_revoke(
    authserver: AuthServer, callback: Callback, tmp_path: Path
) -> None:
    gateway = authserver.basic
    verifier, challenge = pkce_pair()
    state = uuid.uuid4().hex
    url = authorization_url(authserver, gateway, callback.uri, challenge, state)

    def flow_for(state: str) -> str:
        """A flow that makes whoever is signed in on the browser sign in again (prompt=login)."""
        return authorization_url(
            authserver, gateway, callback.uri, challenge, state, prompt="login"
        )

    async with browser(tmp_path) as b:
        profile = b.profile
        assert chromium_processes(profile)
        refused = await b.authorize(url, "alice", "wrong password")
        assert refused.url.startswith(authserver.issuer + "/interaction/")
        assert "Invalid username or password" in refused.text
        assert callback.queries == []

        page = await b.authorize(url, "alice", authserver.password("alice"))

        assert page.steps == ["login alice", "consent approve"]
        assert page.url.startswith(callback.uri + "?")
        assert "callback got" in page.text
        assert page.history[0] == url and page.history[-1] == page.url
        (alice,) = callback.queries
        assert alice["state"] == state
        assert alice["iss"] == authserver.issuer  # RFC 9207

        # On the same browser, bob signs in and consents too; carol denies.
        page = await b.authorize(flow_for("s-bob"), "bob", authserver.password("bob"))
        assert page.steps == ["login bob", "consent approve"]
        bob = callback.queries[-1]
        assert bob["state"] == "s-bob"
        page = await b.authorize(
            flow_for("s-carol"), "carol", authserver.password("carol"), consent="deny"
        )
        assert page.steps == ["login carol", "consent deny"]
        assert callback.queries[-1] == {
            "error": "access_denied",
            "error_description": "the user denied the request",
            "state": "s-carol",
            "iss": authserver.issuer,
        }
    assert chromium_processes(profile) == []  # the browser is gone, with its children

    # The code, with the PKCE verifier (and only with it), gives tokens for the resource,
    # including a refresh token.
    form = {"grant_type": "authorization_code", "code": alice["code"], "redirect_uri": callback.uri}
    wrong = authserver.token_request(gateway, {**form, "code_verifier": pkce_pair()[0]})
    assert wrong.json()["error"] == "invalid_grant"
    tokens = authserver.token_request(gateway, {**form, "code_verifier": verifier})
    assert tokens.status_code == 200, tokens.text
    body = tokens.json()
    assert body["refresh_token"]
    claims = authserver.verify(body["access_token"], UPSTREAM)
    assert (claims["sub"], claims["client_id"], claims["scope"]) == (
        "alice",
        "gateway-basic",
        "mcp:tools",
    )

    # Refresh; then the refresh token revoked at the revocation endpoint is refused.
    refreshed = authserver.token_request(
        gateway, {"grant_type": "refresh_token", "refresh_token": body["refresh_token"]}
    )
    assert refreshed.status_code == 200, refreshed.text
    new = refreshed.json()
    assert authserver.verify(new["access_token"], UPSTREAM)["sub"] == "alice"
    refresh_token = new.get("refresh_token", body["refresh_token"])
    introspect = {"token": refresh_token}
    seen = authserver.post_as(gateway, authserver.introspection_endpoint, introspect).json()
    assert seen["active"] is True and seen["sub"] == "alice"
    revoked = authserver.post_as(gateway, authserver.revocation_endpoint, {"token": refresh_token})
    assert revoked.status_code == 200, revoked.text
    seen = authserver.post_as(gateway, authserver.introspection_endpoint, introspect).json()
    assert seen == {"active": False}
    again = authserver.token_request(
        gateway, {"grant_type": "refresh_token", "refresh_token": refresh_token}
    )
    assert again.json()["error"] == "invalid_grant"
    # The code is spent (a replay is refused; oidc-provider also revokes what it gave).
    replayed = authserver.token_request(gateway, {**form, "code_verifier": verifier})
    assert replayed.json()["error"] == "invalid_grant"

    # Bob's grant, taken back by the test (as a user revoking it at the server would): his
    # refresh token is refused from then on.
    bobs = authserver.token_request(
        gateway, {**form, "code": bob["code"], "code_verifier": verifier}
    ).json()
    assert authserver.verify(bobs["access_token"], UPSTREAM)["sub"] == "bob"
    assert authserver.revoke_grants("bob", gateway.client_id) == 1
    refused_refresh = authserver.token_request(
        gateway, {"grant_type": "refresh_token", "refresh_token": bobs["refresh_token"]}
    )
    assert refused_refresh.json()["error"] == "invalid_grant"

    # Neither codes nor refresh tokens reach the log.
    text = authserver.log.read_text()
    assert not [
        v for v in (alice["code"], bob["code"], refresh_token, bobs["refresh_token"]) if v in text
    ]


def test_pkce_is_required(authserver: AuthServer) -> None:
    query = {
        "response_type": "code",
        "client_id": authserver.basic.client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": "mcp:tools",
        "state": "s",
    }
    r = httpx.get(authserver.authorization_endpoint, params=query, timeout=10)
    assert r.status_code == 303, r.text
    location = parse_qs(urlsplit(r.headers["location"]).query)
    assert location["error"] == ["invalid_request"]
    assert "requires PKCE" in location["error_description"][0]


def test_opaque_user_token_introspects_and_revokes(authserver: AuthServer) -> None:
    gateway = authserver.basic
    token = authserver.user_token("alice", client_id=gateway.client_id)  # no audience: opaque
    assert token.count(".") == 0
    seen = authserver.post_as(gateway, authserver.introspection_endpoint, {"token": token}).json()
    assert (seen["active"], seen["sub"], seen["client_id"]) == (True, "alice", "gateway-basic")
    # An opaque token this server issued is a valid subject token too.
    exchanged = authserver.exchange(authserver.post, token, resource=UPSTREAM)
    assert exchanged.status_code == 200, exchanged.text
    assert (
        authserver.post_as(gateway, authserver.revocation_endpoint, {"token": token}).status_code
        == 200
    )
    seen = authserver.post_as(gateway, authserver.introspection_endpoint, {"token": token}).json()
    assert seen == {"active": False}
    refused = authserver.exchange(authserver.post, token, resource=UPSTREAM)
    assert refused.json()["error"] == "invalid_grant"


# ------------------------------------------------------------------ missing dependencies


def test_missing_parts_fail_under_require_all(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.conftest.REQUIRE_ALL", True)
    monkeypatch.setattr(browser_support, "CHROMIUM", Path("/nonexistent/chromium"))
    monkeypatch.setattr(authserver_support, "authserver_launcher", lambda: None)
    with pytest.raises(pytest.fail.Exception, match="required dependency missing: no Chromium"):
        browser_support.require_browser()
    with pytest.raises(pytest.fail.Exception, match="authorization server is not installed"):
        authserver_support.require_authserver()


def test_the_log_holds_no_secret(authserver: AuthServer) -> None:
    """What this test sends and gets stays out of the log, and so does whatever the module's
    earlier tests sent (the users' passwords at the sign-in pages): no JWT at all."""
    subject = authserver.user_token("carol", INBOUND, marker=marker())
    r = authserver.exchange(authserver.private_key_jwt, subject, resource=UPSTREAM)
    assert r.status_code == 200, r.text
    text = authserver.log.read_text()
    secrets = [subject, r.json()["access_token"], authserver.control_secret]
    secrets += [c.secret for c in authserver.clients.values() if c.secret]
    secrets += authserver.passwords.values()
    assert not [s for s in secrets if s in text]
    assert "client_assertion" not in text and "eyJ" not in text
