"""Helpers for the authentication tests: real keys, a real JWKS server, token minting."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import jwt
import uvicorn
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

ISSUER = "https://as.example.test/realms/mcp"
RESOURCE = "https://gw.example.test/mcp"
METADATA_URL = "https://gw.example.test/.well-known/oauth-protected-resource/mcp"


# ---------------------------------------------------------------------- keys


@dataclass
class SigningKey:
    kid: str
    alg: str
    private: Any

    @property
    def public(self) -> Any:
        return self.private.public_key()

    def jwk(self, *, with_alg: bool = True) -> dict[str, Any]:
        if isinstance(self.private, rsa.RSAPrivateKey):
            data = RSAAlgorithm.to_jwk(self.public, as_dict=True)
        elif isinstance(self.private, ec.EllipticCurvePrivateKey):
            data = ECAlgorithm.to_jwk(self.public, as_dict=True)
        else:
            data = OKPAlgorithm.to_jwk(self.public, as_dict=True)
        data.update({"kid": self.kid, "use": "sig"})
        if with_alg:
            data["alg"] = self.alg
        return data

    def public_pem(self) -> bytes:
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def sign(
        self, claims: dict[str, Any], *, headers: dict[str, Any] | None = None, kid: Any = ...
    ) -> str:
        hdrs = {"kid": self.kid if kid is ... else kid}
        if hdrs["kid"] is None:
            del hdrs["kid"]
        hdrs.update(headers or {})
        return jwt.encode(claims, self.private, algorithm=self.alg, headers=hdrs)


def new_rsa(kid: str | None = None, alg: str = "RS256") -> SigningKey:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return SigningKey(kid or f"rsa-{uuid.uuid4().hex[:8]}", alg, key)


def new_ec(kid: str | None = None) -> SigningKey:
    return SigningKey(
        kid or f"ec-{uuid.uuid4().hex[:8]}", "ES256", ec.generate_private_key(ec.SECP256R1())
    )


def new_ed25519(kid: str | None = None) -> SigningKey:
    return SigningKey(
        kid or f"ed-{uuid.uuid4().hex[:8]}", "EdDSA", ed25519.Ed25519PrivateKey.generate()
    )


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "sub": "alice",
        "aud": RESOURCE,
        "iat": now,
        "nbf": now,
        "exp": now + 300,
        "scope": "mcp:tools mcp:read",
    }
    for name, value in overrides.items():
        if value is None:
            base.pop(name, None)
        else:
            base[name] = value
    return base


def jwt_auth(issuer: str, jwks_url: str) -> dict[str, Any]:
    """A gateway's ``auth`` section: ES256 bearer tokens of ``issuer`` for the ``mcp-edge-tests``
    audience, checked against the keys at ``jwks_url``."""
    return {
        "mode": "jwt",
        "authorization_servers": [issuer],
        "jwt": {
            "issuer": issuer,
            "jwks_url": jwks_url,
            "algorithms": ["ES256"],
            "audience": ["mcp-edge-tests"],
        },
    }


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(
    header: dict[str, Any],
    payload: dict[str, Any],
    *,
    hmac_key: bytes | None = None,
    signature: bytes = b"",
) -> str:
    """A hand-assembled JWS (for tokens no honest library would produce)."""
    signing_input = f"{b64u(json.dumps(header).encode())}.{b64u(json.dumps(payload).encode())}"
    if hmac_key is not None:
        signature = hmac.new(hmac_key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64u(signature)}"


# ---------------------------------------------------------------------- JWKS server


@dataclass
class JwksState:
    keys: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    delay: float = 0.0
    body: bytes | None = None
    redirect_to: str | None = None
    hits: int = 0

    def reset(self) -> None:
        self.keys = []
        self.status = 200
        self.delay = 0.0
        self.body = None
        self.redirect_to = None
        self.hits = 0


class JwksServer:
    """A real HTTP server on 127.0.0.1 (uvicorn in a thread) serving a mutable JWK Set."""

    def __init__(self) -> None:
        self.state = JwksState()
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    def _app(self) -> Starlette:
        state = self.state

        async def jwks(_: Request) -> Response:
            state.hits += 1
            if state.delay:
                await asyncio.sleep(state.delay)
            if state.redirect_to:
                return RedirectResponse(state.redirect_to, status_code=302)
            if state.body is not None:
                return Response(state.body, status_code=state.status, media_type="application/json")
            if state.status != 200:
                return JSONResponse({"error": "unavailable"}, status_code=state.status)
            return JSONResponse({"keys": state.keys})

        return Starlette(routes=[Route("/jwks", jwks)])

    def start(self) -> None:
        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("JWKS server did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
