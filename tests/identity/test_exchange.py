"""The token exchange as a credential source (mcp_edge.identity.exchange) against a raw server
(tests/support/hostile_as.py): what it sends, what it keeps and for how long, one exchange per
key in flight, the shared cache of two replicas in a real Redis, and every failure named."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Principal
from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.edge.context import RequestContext
from mcp_edge.identity.asclient import AuthorizationServer
from mcp_edge.identity.config import TokenExchangeConfig
from mcp_edge.identity.exchange import TokenExchange
from mcp_edge.identity.layer import CredentialError
from mcp_edge.identity.metrics import IdentityMetrics
from mcp_edge.identity.vault import MemoryBackend, RedisBackend, SecretVault
from tests.identity.test_vault import redis_url  # noqa: F401  (the module's redis-server)
from tests.support.hostile_as import HostileAS, Request, answer, json_answer

ENV = {"SECRET": "s3cret-value"}


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def caller(
    name: str = "alice", token: str | None = None, exp: float | None = None
) -> RequestContext:
    claims: dict[str, Any] = {"sub": name}
    if exp is not None:
        claims["exp"] = int(exp)
    principal = Principal(id=f'["jwt-sub","idp","{name}"]', claims=claims)
    return RequestContext(principal=principal, client_token=token or f"inbound-{name}")


@pytest.fixture
def as_server() -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"answer": None, "gate": None, "n": 0}

    async def script(request: Request) -> bytes | None:
        if request.path != "/token":
            return None
        while state["gate"] is not None and not state["gate"].is_set():
            await asyncio.sleep(0.01)  # (the server's own loop: a threading.Event)
        state["n"] += 1
        chosen = state["answer"]
        if callable(chosen):
            return chosen(request)
        return json_answer(
            200,
            {
                "access_token": f"exchanged-{state['n']}-for-{request.param('subject_token')}",
                "token_type": "Bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "expires_in": 300,
            },
        )

    server = HostileAS(script)
    state["server"] = server
    yield state
    server.stop()


def exchange_source(
    state: dict[str, Any],
    clock: Clock | None = None,
    vault: SecretVault | None = None,
    **change: Any,
) -> TokenExchange:
    server: HostileAS = state["server"]
    config = TokenExchangeConfig.model_validate(
        {
            "issuer": server.issuer,
            "client": {"client_id": "gw", "secret_env": "SECRET"},
            "audience": "https://tickets.example/mcp",
            "scope": ["tickets:read"],
            "timeout_seconds": 1.0,
            "refresh_before_seconds": 30,
            **change,
        }
    )
    return TokenExchange(
        member="tickets",
        key="route/tickets",
        config=config,
        server=AuthorizationServer(config, environ=ENV),
        metrics=IdentityMetrics(CollectorRegistry()),
        vault=vault,
        clock=clock or Clock(),
    )


async def test_the_request_and_the_cache(as_server):
    clock = Clock()
    source = exchange_source(as_server, clock)
    token = await source.credential({}, caller())
    assert token == "exchanged-1-for-inbound-alice"
    sent = as_server["server"].token_requests()[0]
    assert dict(sent.form) == {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": "inbound-alice",
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": "https://tickets.example/mcp",
        "scope": "tickets:read",
    }
    assert await source.credential({}, caller()) == token  # from memory
    assert await source.credential({}, caller("bob")) == "exchanged-2-for-inbound-bob"
    # Another token of the same caller is exchanged itself, never served one made from the first.
    assert (
        await source.credential({}, caller(token="inbound-alice-2"))
        == "exchanged-3-for-inbound-alice-2"
    )
    clock.now += 300 - 30 + 1  # within refresh_before of the exchanged token's expiry: again
    assert await source.credential({}, caller()) == "exchanged-4-for-inbound-alice"
    assert as_server["n"] == 4
    await source.aclose()


async def test_never_past_the_callers_own_token(as_server):
    clock = Clock()
    source = exchange_source(as_server, clock)
    ctx = caller(exp=clock.now + 60)
    first = await source.credential({}, ctx)
    clock.now += 59
    assert await source.credential({}, ctx) == first
    clock.now += 2
    assert await source.credential({}, ctx) != first  # (the edge refuses that token by now)
    await source.aclose()


async def test_one_exchange_for_many_concurrent_calls(as_server):
    as_server["gate"] = threading.Event()
    source = exchange_source(as_server)
    calls = [asyncio.ensure_future(source.credential({}, caller())) for _ in range(40)]
    await asyncio.sleep(0.2)
    as_server["gate"].set()
    tokens = await asyncio.gather(*calls)
    assert set(tokens) == {"exchanged-1-for-inbound-alice"} and as_server["n"] == 1
    await source.aclose()


async def test_two_replicas_share_one_exchange_through_redis(as_server, redis_url):  # noqa: F811
    ring = KeyRing([parse_key_spec(generate_key())])
    prefix = f"test-exchange:{time.monotonic_ns()}:"
    vaults = [
        SecretVault(ring, RedisBackend(redis_url, timeout=2.0, key_prefix=prefix)) for _ in "ab"
    ]
    a, b = (exchange_source(as_server, vault=v) for v in vaults)
    token = await a.credential({}, caller())
    assert await b.credential({}, caller()) == token
    assert as_server["n"] == 1
    assert b.metrics.cache.labels("route/tickets", "shared")._value.get() == 1
    # A vault in memory is per process: never used as if shared.
    assert exchange_source(as_server, vault=SecretVault(ring, MemoryBackend())).vault is None
    for source in (a, b):
        await source.aclose()


def _jwt(exp: float) -> str:
    part = base64.urlsafe_b64encode(json.dumps({"exp": int(exp)}).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJub25lIn0.{part}.sig"


async def test_no_expires_in(as_server):
    """Without expires_in: a JWT's own exp says how long; an opaque token serves its call only."""
    clock = Clock()
    jwt_token = _jwt(clock.now + 120)
    as_server["answer"] = lambda r: json_answer(
        200, {"access_token": jwt_token, "token_type": "bearer"}
    )
    source = exchange_source(as_server, clock)
    assert await source.credential({}, caller()) == jwt_token
    assert await source.credential({}, caller()) == jwt_token and as_server["n"] == 1
    as_server["answer"] = lambda r: json_answer(
        200, {"access_token": "opaque", "token_type": "N_A"}
    )
    assert await source.credential({}, caller("bob")) == "opaque"
    assert await source.credential({}, caller("bob")) == "opaque" and as_server["n"] == 3
    await source.aclose()


FAILED = {
    "refused": (
        lambda r: json_answer(400, {"error": "invalid_target", "error_description": "nope"}),
        502,
        "token_exchange_failed",
    ),
    "a DPoP token": (
        lambda r: json_answer(200, {"access_token": "t", "token_type": "DPoP", "expires_in": 60}),
        502,
        "token_exchange_failed",
    ),
    "no access_token": (
        lambda r: json_answer(200, {"token_type": "Bearer"}),
        502,
        "token_exchange_failed",
    ),
    "a token with spaces": (
        lambda r: json_answer(200, {"access_token": "a b", "token_type": "Bearer"}),
        502,
        "token_exchange_failed",
    ),
    "a refresh token issued": (
        lambda r: json_answer(
            200,
            {
                "access_token": "t",
                "token_type": "Bearer",
                "issued_token_type": "urn:ietf:params:oauth:token-type:refresh_token",
            },
        ),
        502,
        "token_exchange_failed",
    ),
    "expires_in a string": (
        lambda r: json_answer(
            200, {"access_token": "t", "token_type": "Bearer", "expires_in": "60"}
        ),
        502,
        "token_exchange_failed",
    ),
    "oversized": (lambda r: answer(200, b" " * 100_000), 503, "token_exchange_unavailable"),
    "html": (lambda r: answer(200, b"<html/>", "text/html"), 503, "token_exchange_unavailable"),
    "down": (lambda r: answer(503, b"", "text/plain"), 503, "token_exchange_unavailable"),
}


@pytest.mark.parametrize("case", sorted(FAILED))
async def test_failures_are_named_and_logged_without_secrets(as_server, case, caplog):
    script, status, reason = FAILED[case]
    as_server["answer"] = script
    source = exchange_source(as_server)
    with caplog.at_level(logging.INFO, logger="mcp_edge"), pytest.raises(CredentialError) as caught:
        await source.credential({}, caller())
    error = caught.value.error
    assert error.http_status == status and error.data["reason"] == reason
    assert error.data["member"] == "tickets"
    if case == "refused":
        assert error.data["error"] == "invalid_target"
    logged = " ".join(
        f"{record.getMessage()} {getattr(record, 'fields', '')}" for record in caplog.records
    )
    assert "token exchange" in logged
    for secret in ("s3cret-value", "inbound-alice"):
        assert secret not in logged
    await source.aclose()


async def test_no_caller_token_no_exchange(as_server):
    source = exchange_source(as_server)
    # A caller without a token (cannot happen in jwt mode, where the edge refuses it first).
    ctx = caller()
    ctx.client_token = None
    with pytest.raises(CredentialError) as caught:
        await source.credential({}, ctx)
    assert caught.value.error.data["reason"] == "token_exchange_failed"
    # The gateway's own request (a health probe): no credential, and nothing exchanged.
    assert await source.credential({}, RequestContext()) is None
    assert as_server["n"] == 0
    await source.aclose()


async def test_an_actor_token_names_the_gateway(as_server):
    def answers(request: Request) -> bytes:
        grant = request.param("grant_type")
        token = "gateway-own" if grant == "client_credentials" else "exchanged"
        return json_answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": 300})

    as_server["answer"] = answers
    source = exchange_source(as_server, actor="client_credentials", actor_scope=["gw"])
    assert await source.credential({}, caller()) == "exchanged"
    assert await source.credential({}, caller("bob")) == "exchanged"
    requests = as_server["server"].token_requests()
    assert [r.param("grant_type") for r in requests].count("client_credentials") == 1
    exchange = requests[-1]
    assert exchange.param("actor_token") == "gateway-own"
    assert exchange.param("actor_token_type") == "urn:ietf:params:oauth:token-type:access_token"
    await source.aclose()
