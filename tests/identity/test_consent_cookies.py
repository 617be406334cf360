"""The consent pages' cookies as the browser is told to keep them: behind https, ``__Host-``
cookies (Secure, Path=/, no Domain: only this host can set them, so a sibling host of the same
domain cannot plant a transaction or a session in a person's browser), and only those are read;
over plain http (a loopback host only) plain names. Driven through the pages themselves, the
authorization server's metadata given (the flow against a real one is tests/integration/
test_consent_e2e.py)."""

from __future__ import annotations

import math
import time
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.identity import consent_seals as cs
from mcp_edge.identity.asclient import ServerMetadata
from mcp_edge.identity.consent_wiring import ConsentWiring
from mcp_edge.identity.vault import MemoryBackend, SecretVault
from mcp_edge.server.config import GatewayConfig

RING = KeyRing([StateKey.from_secret(b"\x0b" * 32)])
ISSUER = "https://idp.example"
ALICE = f'["jwt-sub",{orjson.dumps(ISSUER).decode()},"alice"]'


def config(tmp_path: Path, public_url: str) -> GatewayConfig:
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    client = {"client_id": "gw", "secret_file": str(secret)}
    return GatewayConfig.model_validate(
        {
            "gateway": {"public_url": public_url},
            "auth": {"mode": "jwt", "jwt": {"issuer": ISSUER, "jwks_url": f"{ISSUER}/jwks"}},
            "consent": {"sign_in": {"issuer": ISSUER, "client": client}},
            "routes": [
                {
                    "name": "drive",
                    "path": "/drive",
                    "upstream": "https://drive.example/mcp",
                    "era": "modern",
                    "upstream_auth": {"oauth": {"issuer": "https://as.example", "client": client}},
                }
            ],
        }
    )


def pages(cfg: GatewayConfig) -> tuple[ConsentWiring, Any]:
    wiring = ConsentWiring(cfg, RING, CollectorRegistry(), SecretVault(RING, MemoryBackend()))
    route = cfg.routes[0]
    assert route.upstream_auth.oauth is not None
    wiring.member("drive", "drive", route.upstream_auth.oauth)
    server = wiring.sign_in().server
    server._metadata = ServerMetadata(  # what the identity provider's metadata says
        issuer=ISSUER,
        token_endpoint=f"{ISSUER}/token",
        document={"authorization_endpoint": f"{ISSUER}/authorize"},
    )
    server._metadata_until = math.inf
    return wiring, wiring.endpoints(body_budget=None, body_timeout=5)


async def get(app: Any, path: str, query: str = "", cookie: str | None = None) -> tuple[int, dict]:
    headers = [(b"host", b"edge.example")]
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "query_string": query.encode(),
        "headers": headers,
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    head = sent[0]
    found: dict[str, list[bytes]] = {}
    for name, value in head["headers"]:
        found.setdefault(name.decode(), []).append(value)
    return head["status"], found


def ticket() -> str:
    token, _ = cs.issue_ticket(
        RING, principal_id=ALICE, route="drive", member="drive", call="tools/call x",
        now=time.time(), ttl=300,
    )  # fmt: skip
    return token


async def test_behind_https_only_host_only_cookies_are_set_and_read(tmp_path):
    wiring, app = pages(config(tmp_path, "https://edge.example"))
    status, headers = await get(app, "/.mcp-edge/consent/start", f"t={ticket()}")
    assert status == 303
    (raw,) = headers["set-cookie"]
    text = raw.decode()
    name = text.split("=", 1)[0]
    assert name.startswith("__Host-mcpe-tx-"), text
    attributes = [part.strip() for part in text.split(";")[1:]]
    assert "Secure" in attributes and "Path=/" in attributes and "HttpOnly" in attributes
    assert not any(a.lower().startswith("domain") for a in attributes)
    value = SimpleCookie(text)[name].value
    state = parse_qs(urlsplit(headers["location"][0].decode()).query)["state"][0]
    callback = "/.mcp-edge/consent/callback"
    query = f"state={state}&error=access_denied"
    # The same transaction under the name without the prefix (what another host of the domain
    # could have set): not this browser's.
    plain = name.removeprefix("__Host-")
    status, headers = await get(app, callback, query, cookie=f"{plain}={value}")
    assert status == 400
    # Under its own name it is (here the person said no at the server: a page saying so).
    status, headers = await get(app, callback, query, cookie=f"{name}={value}")
    assert status == 403
    assert headers["set-cookie"][0].decode().startswith(f"{name}=;")  # cleared, same attributes
    await wiring.aclose()


async def test_over_loopback_http_plain_cookies_and_nowhere_else(tmp_path):
    wiring, app = pages(config(tmp_path, "http://127.0.0.1:8080"))
    status, headers = await get(app, "/.mcp-edge/consent/start", f"t={ticket()}")
    (raw,) = headers["set-cookie"]
    assert status == 303 and raw.startswith(b"mcpe-tx-") and b"Secure" not in raw
    await wiring.aclose()
    with pytest.raises(ValidationError, match="needs an https gateway.public_url"):
        config(tmp_path, "http://edge.example")
    # However the scheme is spelt.
    wiring, app = pages(config(tmp_path, "HTTPS://edge.example"))
    _, headers = await get(app, "/.mcp-edge/consent/start", f"t={ticket()}")
    assert headers["set-cookie"][0].startswith(b"__Host-mcpe-tx-")
    await wiring.aclose()
