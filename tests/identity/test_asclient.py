"""The gateway as an OAuth client (mcp_edge.identity.asclient) against a raw HTTP server that
answers what no real authorization server would: every answer bounded, every failure named."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from mcp_edge.identity.asclient import (
    ASRefused,
    ASUnavailable,
    AuthorizationServer,
    metadata_urls,
    parse_metadata,
)
from mcp_edge.identity.config import TokenExchangeConfig
from mcp_edge.identity.oauth_client import authorization_endpoint
from tests.support.hostile_as import HostileAS, Request, answer, json_answer

TOKEN = {"access_token": "exchanged", "token_type": "Bearer", "expires_in": 300}
ENV = {"SECRET": "s3cret-value"}


def section(server: HostileAS, **change: Any) -> TokenExchangeConfig:
    doc = {
        "issuer": server.issuer,
        "client": {"client_id": "gw", "secret_env": "SECRET"},
        "audience": ["https://a.example", "https://b.example"],
        "timeout_seconds": 1.0,
        "max_response_bytes": 4096,
        **change,
    }
    return TokenExchangeConfig.model_validate(doc)


@pytest.fixture
def hostile() -> Iterator[dict[str, Any]]:
    behaviour: dict[str, Any] = {}

    async def script(request: Request) -> bytes | None:
        handler = behaviour.get(request.path)
        return await handler(request) if handler is not None else None

    server = HostileAS(script)
    behaviour["server"] = server
    yield behaviour
    server.stop()


def client(hostile: dict[str, Any], **change: Any) -> AuthorizationServer:
    return AuthorizationServer(section(hostile["server"], **change), environ=ENV)


def test_metadata_urls():
    assert metadata_urls("https://as.example/realms/x") == [
        "https://as.example/.well-known/oauth-authorization-server/realms/x",
        "https://as.example/realms/x/.well-known/openid-configuration",
    ]


async def test_discovery_checks_the_issuer_and_falls_back_to_openid(hostile):
    server = hostile["server"]

    async def wrong_issuer(request: Request) -> bytes:
        return json_answer(200, {**server.metadata(), "issuer": "https://evil.example"})

    async def oidc(request: Request) -> bytes:
        return json_answer(200, server.metadata())

    hostile["/.well-known/oauth-authorization-server"] = wrong_issuer
    as_client = client(hostile)
    with pytest.raises(ASUnavailable, match="not the configured one"):
        await as_client.discover()
    hostile["/.well-known/openid-configuration"] = oidc
    meta = await as_client.metadata()
    assert meta.token_endpoint == server.token_endpoint
    assert meta.source and meta.source.endswith("openid-configuration")
    assert meta.advertises("urn:ietf:params:oauth:grant-type:token-exchange") is True
    await as_client.aclose()


def test_an_https_servers_metadata_naming_a_plain_http_endpoint_is_not_used():
    """Its token, authorization and revocation endpoints go where its own metadata is: over
    https, whatever host they name (a loopback one too: what listens there would get the
    gateway's client credentials and the callers' tokens)."""
    doc = {"issuer": "https://as.example", "token_endpoint": "http://127.0.0.1:8500/token"}
    with pytest.raises(ASUnavailable, match="must use https"):
        parse_metadata(doc, issuer="https://as.example", source=None, allow_http=False)
    meta = parse_metadata(
        {**doc, "token_endpoint": "https://as.example/token",
         "authorization_endpoint": "http://127.0.0.1:8500/authorize"},
        issuer="https://as.example", source="https://as.example/.well-known/x", allow_http=False,
    )  # fmt: skip
    with pytest.raises(ASUnavailable, match="must use https"):
        authorization_endpoint(meta, allow_http=False)
    # Nothing a request line or a browser's Location cannot hold as it is (no header is made
    # of what a server says, and no page fails on it).
    for endpoint in ("https://exämple.com/auth", "https://as.example/a\r\nSet-Cookie: x=1"):
        odd = parse_metadata(
            {**doc, "token_endpoint": "https://as.example/token", "authorization_endpoint": endpoint},
            issuer="https://as.example", source=None, allow_http=False,
        )  # fmt: skip
        with pytest.raises(ASUnavailable, match="printable ASCII"):
            authorization_endpoint(odd, allow_http=False)
    # A loopback server over http (a test, a sidecar) names its own http endpoints.
    local = {"issuer": "http://127.0.0.1:9", "token_endpoint": "http://127.0.0.1:9/token"}
    assert parse_metadata(local, issuer=local["issuer"], source=None, allow_http=False)


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
async def test_client_secret_authentication_and_repeated_parameters(hostile, method):
    async def token(request: Request) -> bytes:
        return json_answer(200, TOKEN)

    hostile["/token"] = token
    as_client = client(
        hostile, client={"client_id": "gw", "secret_env": "SECRET", "method": method}
    )
    doc = await as_client.token_request([("grant_type", "x"), ("audience", "a"), ("audience", "b")])
    assert doc["access_token"] == "exchanged"
    sent = hostile["server"].token_requests()[-1]
    assert [v for k, v in sent.form if k == "audience"] == ["a", "b"]
    if method == "client_secret_basic":
        assert (
            sent.headers["authorization"]
            == "Basic " + base64.b64encode(b"gw:s3cret-value").decode()
        )
        assert sent.param("client_secret") is None
    else:
        assert "authorization" not in sent.headers
        assert (sent.param("client_id"), sent.param("client_secret")) == ("gw", "s3cret-value")
    await as_client.aclose()


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_private_key_jwt(hostile, tmp_path, algorithm):
    key = (
        ec.generate_private_key(ec.SECP256R1())
        if algorithm == "ES256"
        else rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "key.pem").write_bytes(pem)

    async def token(request: Request) -> bytes:
        return json_answer(200, TOKEN)

    hostile["/token"] = token
    as_client = client(
        hostile,
        client={
            "client_id": "gw",
            "method": "private_key_jwt",
            "private_key_file": str(tmp_path / "key.pem"),
            "key_id": "k1",
            "algorithm": algorithm,
        },
    )
    await as_client.token_request([("grant_type", "x")])
    sent = hostile["server"].token_requests()[-1]
    assert (
        sent.param("client_assertion_type")
        == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    )
    assertion = sent.param("client_assertion")
    assert assertion and "authorization" not in sent.headers and sent.param("client_secret") is None
    claims = jwt.decode(
        assertion,
        key.public_key(),
        algorithms=[algorithm],
        audience=hostile["server"].token_endpoint,
    )
    assert claims["iss"] == claims["sub"] == "gw" and claims["jti"] and claims["exp"]
    assert jwt.get_unverified_header(assertion)["kid"] == "k1"
    await as_client.aclose()


def test_a_missing_secret_or_key_is_an_operator_message(hostile, tmp_path):
    with pytest.raises(ValueError, match="environment variable SECRET is not set"):
        AuthorizationServer(section(hostile["server"]), environ={})
    (tmp_path / "pub.pem").write_text("not a key")
    with pytest.raises(ValueError, match="not a PEM RSA private key"):
        client(
            hostile,
            client={
                "client_id": "gw",
                "method": "private_key_jwt",
                "private_key_file": str(tmp_path / "pub.pem"),
            },
        )


async def test_an_oauth_error_is_refused_with_its_code_and_a_printable_description(hostile):
    async def refuse(request: Request) -> bytes:
        return json_answer(
            400,
            {"error": "invalid_target", "error_description": "no\nsuch\x00audience " + "x" * 500},
        )

    hostile["/token"] = refuse
    as_client = client(hostile)
    with pytest.raises(ASRefused) as caught:
        await as_client.token_request([("grant_type", "x")])
    assert caught.value.error == "invalid_target" and caught.value.status == 400
    assert (
        caught.value.description.startswith("no?such?audience")
        and len(caught.value.description) <= 200
    )
    await as_client.aclose()


async def _drip(request: Request) -> None:
    request.writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
    )
    for _ in range(50):
        await request.writer.drain()
        await asyncio.sleep(0.1)
        request.writer.write(b" ")


async def _chunked_forever(request: Request) -> None:
    request.writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for _ in range(100):
        request.writer.write(b"400\r\n" + b" " * 0x400 + b"\r\n")
        await request.writer.drain()


async def _silent(request: Request) -> None:
    await asyncio.sleep(5)


HOSTILE_ANSWERS = {
    "oversized by its length": (lambda r: answer(200, b" " * 10_000), "too_large"),
    "oversized without a length": (_chunked_forever, "too_large"),
    "dripped slowly": (_drip, "timeout"),
    "never answered": (_silent, "timeout"),
    "html": (lambda r: answer(200, b"<html>hi</html>", "text/html"), "bad_answer"),
    "no content type": (lambda r: answer(200, json.dumps(TOKEN).encode(), ""), "bad_answer"),
    "not json": (lambda r: answer(200, b"{nope"), "bad_answer"),
    "a json array": (lambda r: json_answer(200, [TOKEN]), "bad_answer"),
    "server error": (lambda r: json_answer(503, {"error": "temporarily_unavailable"}), "status"),
    "rate limited": (lambda r: answer(429, b"slow down", "text/plain"), "status"),
    "redirect": (
        lambda r: answer(302, b"", "text/plain", "Location: http://127.0.0.1:1/\r\n"),
        "status",
    ),
    "a 404 page": (lambda r: answer(404, b"<h1>nope</h1>", "text/html"), "bad_answer"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_ANSWERS))
async def test_hostile_answers_are_bounded_and_named(hostile, case):
    script, kind = HOSTILE_ANSWERS[case]

    async def run(request: Request) -> bytes | None:
        result = script(request)
        return await result if asyncio.iscoroutine(result) else result

    hostile["/token"] = run
    as_client = client(hostile)
    with pytest.raises(ASUnavailable) as caught:  # a slow one ends at timeout_seconds (1 s)
        await as_client.token_request([("grant_type", "x")])
    assert caught.value.kind == kind, caught.value.detail
    assert "s3cret" not in caught.value.detail
    await as_client.aclose()


async def test_an_unreachable_server():
    from tests.support.processes import free_port

    cfg = TokenExchangeConfig.model_validate(
        {
            "token_endpoint": f"http://127.0.0.1:{free_port()}/token",
            "client": {"client_id": "gw", "secret_env": "SECRET"},
            "audience": "x",
        }
    )
    as_client = AuthorizationServer(cfg, environ=ENV)
    with pytest.raises(ASUnavailable) as caught:
        await as_client.token_request([("grant_type", "x")])
    assert caught.value.kind == "unreachable"
    assert "s3cret" not in repr(as_client)
    await as_client.aclose()
