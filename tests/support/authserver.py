"""Start the tests' authorization server: the npm `oidc-provider` (OpenID-certified), configured by
`tests/servers/authserver/server.mjs`, with the RFC 8693 token-exchange grant.

`scripts/install-authserver.sh` installs oidc-provider and jose (exactly pinned, with the Node 22
that `scripts/install-conformance.sh` provides) into `.cache/authserver/` and writes a launcher
that runs the program of the checkout it is reached through. :func:`start_authserver` writes the
program's JSON configuration (users, clients, TTLs), starts it on a free loopback port and waits
until its RFC 8414 metadata answers. What the server does is in the program's header; in short:

- clients ``gateway-basic`` (client_secret_basic), ``gateway-post`` (client_secret_post),
  ``gateway-jwt`` (private_key_jwt, an RSA key made here) with the grants authorization_code (PKCE
  S256 required), refresh_token, client_credentials and token exchange; ``mcp-client``, a public
  client (the user's own MCP client) with authorization_code and refresh_token. All are
  registered as native clients, so a loopback redirect URI matches on any port (RFC 8252 §7.3):
  a test registers its callback's path before it knows its port.
- every target (a resource URI, RFC 8707, or an `audience` name) is a resource server defining
  the scopes ``mcp:tools mcp:read mcp:write`` unless ``resources`` says otherwise; access tokens
  for a target are JWTs (RS256, ``typ: at+jwt``) signed with the keys at ``jwks_uri``.
- users (default alice, bob, carol) sign in with a password at plain HTML pages (the ids are in
  `tests/servers/authserver/pages.mjs`; `tests/support/browser.py` fills them).
- a request log, one JSON object per request, never a secret: tests count their exchanges by the
  ``test_marker`` claim of the subject token (:meth:`AuthServer.user_token` ``marker=``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from tests.conftest import Running, require
from tests.support.processes import ManagedProcess, free_port, wait_for_port, write_private
from tests.support.ts_install import TsInstall, installed_launcher

AUTHSERVER = TsInstall(
    "authserver",
    launcher="authserver",
    program=Path("tests") / "servers" / "authserver" / "server.mjs",
    role="program",
    launcher_env="MCP_AUTHSERVER",
    version_mark='"oidc-provider":"9.',
)
INSTALL_HINT = AUTHSERVER.install_hint

STARTUP_TIMEOUT = 60.0  # Node loading oidc-provider: about a second, far more on a loaded machine
HTTP_TIMEOUT = 10.0

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
JWT_BEARER_ASSERTION = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

USERS = ("alice", "bob", "carol")
SCOPES = "mcp:tools mcp:read mcp:write"
#: The redirect URI every client has registered; any port matches (loopback, native clients).
REDIRECT_URI = "http://127.0.0.1/callback"
GATEWAY_GRANTS = ("authorization_code", "refresh_token", "client_credentials", TOKEN_EXCHANGE)


def authserver_launcher() -> Path | None:
    """The launcher: $MCP_AUTHSERVER, else the default install, installing it on first use.

    None when it is not installed and cannot be (no npm, or the install failed).
    """
    return installed_launcher(AUTHSERVER)


def require_authserver() -> Path:
    """The launcher; skips without it (fails under REQUIRE_ALL=1, as in CI)."""
    launcher = authserver_launcher()
    require(launcher is not None, f"the test authorization server is not installed: {INSTALL_HINT}")
    assert launcher is not None
    return launcher


def _rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class OAuthClient:
    """A client registered at the server, with what it authenticates with."""

    client_id: str
    #: ``client_secret_basic``, ``client_secret_post``, ``private_key_jwt`` or ``none``.
    auth_method: str
    secret: str | None = None
    #: The private key of a ``private_key_jwt`` client (its public half is registered).
    key: rsa.RSAPrivateKey | None = field(default=None, repr=False)
    kid: str | None = None

    def jwks(self) -> dict[str, Any]:
        """The client's public JWKS (what the server has registered for it)."""
        assert self.key is not None, f"{self.client_id} has no key"
        jwk = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def private_key_pem(self) -> bytes:
        """The client's private key, PKCS#8 PEM (a gateway's configuration points at such a file)."""
        assert self.key is not None, f"{self.client_id} has no key"
        return self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def assertion(self, audience: str, *, lifetime: int = 60) -> str:
        """A private_key_jwt client assertion (RFC 7523) for ``audience`` (the token endpoint)."""
        assert self.key is not None, f"{self.client_id} has no key"
        now = int(time.time())
        claims = {
            "iss": self.client_id,
            "sub": self.client_id,
            "aud": audience,
            "jti": uuid.uuid4().hex,
            "iat": now,
            "exp": now + lifetime,
        }
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": self.kid})

    def authenticate(self, endpoint: str) -> tuple[dict[str, str], dict[str, str]]:
        """The headers and form fields that authenticate this client at ``endpoint``."""
        if self.auth_method == "client_secret_basic":
            assert self.secret is not None
            pair = f"{self.client_id}:{self.secret}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}, {}
        if self.auth_method == "client_secret_post":
            assert self.secret is not None
            return {}, {"client_id": self.client_id, "client_secret": self.secret}
        if self.auth_method == "private_key_jwt":
            return {}, {
                "client_id": self.client_id,
                "client_assertion_type": JWT_BEARER_ASSERTION,
                "client_assertion": self.assertion(endpoint),
            }
        return {}, {"client_id": self.client_id}

    def metadata(self, redirect_uris: Sequence[str]) -> dict[str, Any]:
        """The client's registration in the server's configuration."""
        grants = ["authorization_code", "refresh_token"]
        if self.auth_method != "none":
            grants = list(GATEWAY_GRANTS)
        entry: dict[str, Any] = {
            "client_id": self.client_id,
            "client_name": self.client_id,
            "token_endpoint_auth_method": self.auth_method,
            "application_type": "native",
            "redirect_uris": list(redirect_uris),
            "grant_types": grants,
            "response_types": ["code"],
        }
        if self.secret is not None:
            entry["client_secret"] = self.secret
        if self.key is not None:
            entry["jwks"] = self.jwks()
        return entry


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


@dataclass
class AuthServer(Running):
    """A running authorization server: its metadata, clients, users and request log."""

    issuer: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    clients: dict[str, OAuthClient] = field(default_factory=dict)
    passwords: dict[str, str] = field(default_factory=dict, repr=False)
    log: Path = Path()
    control_secret: str = field(default="", repr=False)
    config_path: Path = Path()

    # --- where things are
    @property
    def token_endpoint(self) -> str:
        return str(self.metadata["token_endpoint"])

    @property
    def authorization_endpoint(self) -> str:
        return str(self.metadata["authorization_endpoint"])

    @property
    def jwks_uri(self) -> str:
        return str(self.metadata["jwks_uri"])

    @property
    def introspection_endpoint(self) -> str:
        return str(self.metadata["introspection_endpoint"])

    @property
    def revocation_endpoint(self) -> str:
        return str(self.metadata["revocation_endpoint"])

    @property
    def metadata_url(self) -> str:
        """The RFC 8414 metadata (OIDC discovery is at /.well-known/openid-configuration too)."""
        return f"{self.issuer}/.well-known/oauth-authorization-server"

    # --- the clients, by how they authenticate
    @property
    def basic(self) -> OAuthClient:
        return self.clients["gateway-basic"]

    @property
    def post(self) -> OAuthClient:
        return self.clients["gateway-post"]

    @property
    def private_key_jwt(self) -> OAuthClient:
        return self.clients["gateway-jwt"]

    @property
    def public(self) -> OAuthClient:
        return self.clients["mcp-client"]

    def password(self, user: str) -> str:
        return self.passwords[user]

    # --- tokens
    def user_token(
        self,
        user: str,
        audience: str | None = None,
        scope: str = SCOPES,
        *,
        client_id: str = "mcp-client",
        ttl: int | None = None,
        marker: str | None = None,
    ) -> str:
        """An access token of ``user`` as a code flow of ``client_id`` would give it, without a
        browser: a JWT for ``audience`` (its ``test_marker`` claim is ``marker``), else an opaque
        token (which only this server can introspect). ``ttl`` in seconds."""
        body: dict[str, Any] = {"account": user, "scope": scope, "client_id": client_id}
        if audience is not None:
            body["audience"] = audience
        if ttl is not None:
            body["ttl"] = ttl
        if marker is not None:
            body["marker"] = marker
        r = self._control("token", body)
        return str(r["access_token"])

    def revoke_grants(self, user: str, client_id: str | None = None) -> int:
        """Take back what ``user`` consented to (to ``client_id``, else to any client), with every
        token issued from those grants; how many grants that was."""
        body: dict[str, Any] = {"account": user}
        if client_id is not None:
            body["client_id"] = client_id
        return int(self._control("revoke", body)["revoked"])

    def _control(self, what: str, body: dict[str, Any]) -> dict[str, Any]:
        r = httpx.post(
            f"{self.base}/test/{what}",
            json=body,
            headers={"X-Test-Control": self.control_secret},
            timeout=HTTP_TIMEOUT,
        )
        assert r.status_code == 200, f"/test/{what}: HTTP {r.status_code}: {r.text[:300]}"
        return dict(r.json())

    def post_as(
        self,
        client: OAuthClient,
        endpoint: str,
        form: Mapping[str, str],
        *,
        marker: str | None = None,
    ) -> httpx.Response:
        """POST ``form`` to ``endpoint`` authenticated as ``client`` (``marker`` as X-Test-Marker)."""
        headers, auth = client.authenticate(endpoint)
        if marker is not None:
            headers["X-Test-Marker"] = marker
        return httpx.post(endpoint, data={**form, **auth}, headers=headers, timeout=HTTP_TIMEOUT)

    def token_request(
        self, client: OAuthClient, form: Mapping[str, str], *, marker: str | None = None
    ) -> httpx.Response:
        """A request to the token endpoint as ``client``."""
        return self.post_as(client, self.token_endpoint, form, marker=marker)

    def exchange(
        self,
        client: OAuthClient,
        subject_token: str,
        *,
        audience: str | None = None,
        resource: str | None = None,
        scope: str | None = None,
        requested_token_type: str | None = None,
        subject_token_type: str = ACCESS_TOKEN_TYPE,
        actor_token: str | None = None,
        actor_token_type: str = ACCESS_TOKEN_TYPE,
        marker: str | None = None,
    ) -> httpx.Response:
        """An RFC 8693 token exchange as ``client`` (the response, refused or not)."""
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": subject_token,
            "subject_token_type": subject_token_type,
        }
        optional = {
            "audience": audience,
            "resource": resource,
            "scope": scope,
            "requested_token_type": requested_token_type,
        }
        form.update({k: v for k, v in optional.items() if v is not None})
        if actor_token is not None:
            form.update(actor_token=actor_token, actor_token_type=actor_token_type)
        return self.token_request(client, form, marker=marker)

    def jwks(self) -> dict[str, Any]:
        """The server's public signing keys."""
        r = httpx.get(self.jwks_uri, timeout=HTTP_TIMEOUT)
        r.raise_for_status()
        return dict(r.json())

    def verify(self, token: str, audience: str) -> dict[str, Any]:
        """The claims of a JWT this server signed for ``audience`` (checked against its JWKS, as
        an upstream would); raises PyJWT's error otherwise."""
        header = jwt.get_unverified_header(token)
        keys = [k for k in self.jwks()["keys"] if k.get("kid") == header.get("kid")]
        if not keys:
            raise jwt.InvalidKeyError(f"no key {header.get('kid')!r} at {self.jwks_uri}")
        key = jwt.PyJWK(keys[0]).key
        return dict(
            jwt.decode(
                token,
                key,
                algorithms=["RS256"],
                audience=audience,
                issuer=self.issuer,
                options={"require": ["exp", "iat", "sub", "aud", "iss"]},
            )
        )

    # --- the request log
    def requests(self, marker: str | None = None, **fields: Any) -> list[dict[str, Any]]:
        """The logged requests, in order: those with this ``marker`` (X-Test-Marker, or a
        ``marker`` parameter) when given, and whose entries equal ``fields``."""
        entries = _read_log(self.log)
        return [
            e
            for e in entries
            if (marker is None or e.get("marker") == marker)
            and all(e.get(k) == v for k, v in fields.items())
        ]

    def exchanges(self, subject_marker: str | None = None) -> list[dict[str, Any]]:
        """The token-exchange requests (issued or refused), those whose subject token carried
        ``subject_marker`` (:meth:`user_token`'s ``marker``) when given."""
        return [
            e
            for e in self.requests(grant_type=TOKEN_EXCHANGE)
            if subject_marker is None
            or (e.get("exchange") or {}).get("subject_marker") == subject_marker
        ]

    def stop(self) -> None:
        self.process.stop(3.0)


def _read_log(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def _wait_metadata(url: str, process: ManagedProcess, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not process.running:
            break
        try:
            r = httpx.get(url, timeout=5)
            if r.status_code == 200:
                return dict(r.json())
            last = f"HTTP {r.status_code}: {r.text[:300]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.1)
    raise TimeoutError(
        f"{url} did not answer within {timeout:.0f} s ({last})\n{process.log_tail()}"
    )


def start_authserver(
    stack: ExitStack,
    tmp: Path,
    *,
    users: Iterable[str] = USERS,
    redirect_uris: Sequence[str] = (REDIRECT_URI,),
    scopes: str = SCOPES,
    resources: Mapping[str, Mapping[str, Any]] | None = None,
    accept_any_resource: bool = True,
    allowed_audiences: Mapping[str, Sequence[str]] | None = None,
    access_token_ttl: int = 600,
    refresh_token_ttl: int = 86400,
    exchange_ttl: int = 300,
    subject_audience: str | None = None,
    trusted_issuers: Sequence[Mapping[str, Any]] = (),
    max_lifetime: int = 3600,
    startup_timeout: float = STARTUP_TIMEOUT,
) -> AuthServer:
    """Start the authorization server for the life of ``stack`` (stopped, with anything it
    spawned, when the stack closes) and wait until its metadata answers.

    ``redirect_uris``: loopback URIs, any port matching (register the path). ``resources``:
    ``{target: {"scope": "...", "ttl": seconds}}`` for targets with their own scopes or token
    lifetime (``ttl`` is also the lifetime of a token exchanged for it); with
    ``accept_any_resource`` every other target is a resource server too, defining ``scopes``.
    ``allowed_audiences``: ``{client_id: [targets]}``, the only targets that client gets tokens
    for. ``subject_audience``: an exchange's subject token must be for this audience.
    ``trusted_issuers``: ``[{"issuer": ..., "jwks": {...}} | {"issuer": ..., "jwks_uri": ...}]``,
    other issuers whose JWTs are accepted as subject or actor tokens. ``max_lifetime``: seconds
    after which the server exits by itself.
    """
    launcher = require_authserver()
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    passwords = {user: f"{user}-{secrets.token_urlsafe(12)}" for user in users}
    clients = {
        c.client_id: c
        for c in (
            OAuthClient("gateway-basic", "client_secret_basic", secret=secrets.token_urlsafe(32)),
            OAuthClient("gateway-post", "client_secret_post", secret=secrets.token_urlsafe(32)),
            OAuthClient("gateway-jwt", "private_key_jwt", key=_rsa_key(), kid="gateway-jwt-1"),
            OAuthClient("mcp-client", "none"),
        )
    }
    control_secret = secrets.token_urlsafe(32)
    log = tmp / f"authserver-{port}.jsonl"
    registered = []
    for client in clients.values():
        entry = client.metadata(redirect_uris)
        if allowed_audiences and client.client_id in allowed_audiences:
            entry["allowed_audiences"] = list(allowed_audiences[client.client_id])
        registered.append(entry)
    config = {
        "port": port,
        "log": str(log),
        "control_secret": control_secret,
        "accounts": {
            user: {
                "password": password,
                "claims": {"email": f"{user}@example.test", "name": user.title()},
            }
            for user, password in passwords.items()
        },
        "clients": registered,
        "scopes": scopes,
        "resources": {k: dict(v) for k, v in (resources or {}).items()},
        "accept_any_resource": accept_any_resource,
        "access_token_ttl": access_token_ttl,
        "refresh_token_ttl": refresh_token_ttl,
        "exchange": {
            "ttl": exchange_ttl,
            "subject_audience": subject_audience,
            "trusted_issuers": [dict(t) for t in trusted_issuers],
        },
        "max_lifetime": max_lifetime,
    }
    config_path = write_private(tmp / f"authserver-{port}.json", json.dumps(config, indent=1))
    process = ManagedProcess(
        f"authserver-{port}",
        [str(launcher), "--config", str(config_path)],
        log_path=tmp / f"authserver-{port}.log",
    )
    stack.callback(process.stop, 3.0)
    wait_for_port(port, timeout=startup_timeout, process=process)
    metadata = _wait_metadata(
        f"{issuer}/.well-known/oauth-authorization-server", process, startup_timeout
    )
    return AuthServer(
        url=issuer,
        port=port,
        process=process,
        issuer=issuer,
        metadata=metadata,
        clients=clients,
        passwords=passwords,
        log=log,
        control_secret=control_secret,
        config_path=config_path,
    )
