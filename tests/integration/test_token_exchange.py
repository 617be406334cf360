"""RFC 8693 token exchange end to end, with real parts only:

- the test authorization server (oidc-provider, tests/support/authserver.py) signs the users'
  tokens for the gateway and exchanges them for the upstreams' audiences, logging each exchange
  with the ``test_marker`` of its subject token;
- two upstreams protected by their own audience (tests/servers/audience_server.py, checking each
  bearer JWT against the server's JWKS): a 2026-07-28 server (``mcp`` 2.x) and a 2025-era one
  (``mcp`` 1.x, through the bridge), each logging a digest of every token it received;
- two gateway replicas sharing one real redis-server (the exchanged tokens, sealed), behind
  nginx (round robin), with a federated route (both upstreams, each its own audience and
  client authentication), single-upstream routes (private_key_jwt; the 2025-era server, which
  2025-era clients reach too), a route whose server refuses the target, a route
  whose server is down, a route whose tokens are short-lived, and a route whose "server" is a
  raw socket answering what no real one would (tests/support/hostile_as.py).

Tests find their exchanges in the server's log by the marker of the user's token, and their
calls in the upstream's log by the marker argument they sent.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_edge.core.seal import generate_key
from tests.conftest import Running, require, start_gateway, start_upstream
from tests.scale.cluster import NGINX, REDIS_SERVER, Nginx, RedisServer, metric, scrape
from tests.support.authserver import start_authserver
from tests.support.hostile_as import HostileAS, Request, answer, json_answer
from tests.support.legacy import run_legacy_client, start_legacy
from tests.support.processes import free_port, run_bounded, venv_command, write_private

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

MODERN = "2026-07-28"
GATEWAY_AUD = "https://gateway.test/mcp"
MODERN_AUD = "https://modern.test/mcp"
LEGACY_AUD = "https://legacy.test/mcp"
SHORT_AUD = "https://short.test/mcp"
HOSTILE_AUD = "https://hostile.test/mcp"
SECRETS = {"BASIC_SECRET": "", "POST_SECRET": ""}


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Hostile:
    """What the raw "server" answers a token request with, switched by each test."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.exchanges = 0

    async def __call__(self, request: Request) -> bytes | None:
        if request.path != "/token":
            return None
        self.exchanges += 1
        chosen = self.answer
        if callable(chosen):
            result = chosen(request)
            return await result if asyncio.iscoroutine(result) else result
        return chosen


@pytest.fixture(scope="module")
def env(module_tmp: Path, state_key: str) -> Iterator[dict[str, Any]]:
    require(REDIS_SERVER is not None, "redis-server")
    require(NGINX is not None, "nginx")
    with ExitStack() as stack:
        auth = start_authserver(
            stack,
            module_tmp / "as",
            resources={SHORT_AUD: {"scope": "mcp:tools", "ttl": 40}},
            allowed_audiences={"gateway-post": [LEGACY_AUD, MODERN_AUD]},
        )
        redis = RedisServer(module_tmp)
        redis.start()
        stack.callback(redis.stop)
        redis.wait()
        hostile_script = Hostile()
        hostile = HostileAS(hostile_script)
        stack.callback(hostile.stop)
        common = ("--jwks-url", auth.jwks_uri, "--issuer", auth.issuer)
        modern_log, legacy_log = module_tmp / "modern.jsonl", module_tmp / "legacy.jsonl"
        modern = start_upstream(
            stack,
            "audience_server.py",
            module_tmp,
            *common,
            "--audience",
            MODERN_AUD,
            "--audience",
            SHORT_AUD,
            "--audience",
            HOSTILE_AUD,
            "--log",
            str(modern_log),
        )
        legacy = start_legacy(
            stack,
            module_tmp,
            *common,
            "--audience",
            LEGACY_AUD,
            "--log",
            str(legacy_log),
            "--ask",
            script="audience_server.py",
        )
        key_file = write_private(
            module_tmp / "gateway-jwt.pem", auth.private_key_jwt.private_key_pem().decode()
        )
        basic = {"client_id": "gateway-basic", "secret_env": "BASIC_SECRET"}
        post = {
            "client_id": "gateway-post",
            "method": "client_secret_post",
            "secret_env": "POST_SECRET",
        }
        jwt_client = {
            "client_id": "gateway-jwt",
            "method": "private_key_jwt",
            "private_key_file": str(key_file),
            "key_id": auth.private_key_jwt.kid,
        }

        def exchange(client: dict[str, Any], **target: Any) -> dict[str, Any]:
            return {"token_exchange": {"issuer": auth.issuer, "client": client, **target}}

        dead_as = f"http://127.0.0.1:{free_port()}/token"
        config = {
            "gateway": {"id": "exchange-test"},
            "auth": {
                "mode": "jwt",
                "jwt": {
                    "issuer": auth.issuer,
                    "jwks_url": auth.jwks_uri,
                    "algorithms": ["RS256"],
                    "audience": [GATEWAY_AUD],
                },
            },
            "store": {"type": "redis", "url": redis.url, "timeout_seconds": 2},
            "logging": {"format": "json", "level": "info"},
            "routes": [
                {
                    "name": "fed",
                    "path": "/mcp",
                    "members": [
                        {
                            "name": "modern",
                            "upstream": modern.url,
                            "era": "modern",
                            "upstream_auth": exchange(
                                basic, audience=MODERN_AUD, scope="mcp:tools"
                            ),
                        },
                        {
                            "name": "legacy",
                            "upstream": legacy.url,
                            "era": "legacy",
                            "upstream_auth": exchange(post, resource=LEGACY_AUD),
                        },
                    ],
                },
                {
                    "name": "single",
                    "path": "/single",
                    "upstream": modern.url,
                    "era": "modern",
                    "upstream_auth": exchange(jwt_client, audience=MODERN_AUD),
                },
                {
                    "name": "legacy-single",
                    "path": "/legacy-single",
                    "upstream": legacy.url,
                    "era": "legacy",
                    "upstream_auth": exchange(post, resource=LEGACY_AUD),
                },
                {
                    "name": "refused",
                    "path": "/refused",
                    "upstream": modern.url,
                    "era": "modern",
                    # gateway-post may only ask for the legacy and modern audiences
                    "upstream_auth": exchange(post, audience=SHORT_AUD),
                },
                {
                    "name": "down",
                    "path": "/down",
                    "upstream": modern.url,
                    "era": "modern",
                    "upstream_auth": {
                        "token_exchange": {
                            "token_endpoint": dead_as,
                            "client": basic,
                            "audience": MODERN_AUD,
                            "timeout_seconds": 2,
                        }
                    },
                },
                {
                    "name": "short",
                    "path": "/short",
                    "upstream": modern.url,
                    "era": "modern",
                    "upstream_auth": {
                        "token_exchange": {
                            "issuer": auth.issuer,
                            "client": basic,
                            "audience": SHORT_AUD,
                            "refresh_before_seconds": 38,  # the server's 40 s tokens: 2 s here
                        }
                    },
                },
                {
                    "name": "hostile",
                    "path": "/hostile",
                    "upstream": modern.url,
                    "era": "modern",
                    "upstream_auth": {
                        "token_exchange": {
                            "token_endpoint": hostile.token_endpoint,
                            "client": basic,
                            "audience": HOSTILE_AUD,
                            "timeout_seconds": 1,
                            "max_response_bytes": 4096,
                        }
                    },
                },
            ],
        }
        secrets = {
            "BASIC_SECRET": str(auth.basic.secret),
            "POST_SECRET": str(auth.post.secret),
        }
        replicas = [
            start_gateway(
                stack, module_tmp, keys=state_key, config=config, env=secrets, anonymous=False
            )
            for _ in "ab"
        ]
        nginx = Nginx(module_tmp, [r.port for r in replicas])
        stack.callback(nginx.stop)
        nginx.wait()
        yield {
            "nginx": nginx,
            "as": auth,
            "replicas": replicas,
            "modern_log": modern_log,
            "legacy_log": legacy_log,
            "redis": redis,
            "hostile": hostile_script,
            "hostile_as": hostile,
            "config": config,
            "secrets": secrets,
            "tmp": module_tmp,
        }


def user_token(env: dict[str, Any], marker: str, user: str = "alice") -> str:
    return env["as"].user_token(user, audience=GATEWAY_AUD, marker=marker)


def rpc(
    gateway: Running,
    token: str,
    method: str,
    params: dict[str, Any],
    *,
    path: str = "/mcp",
    rid: Any = None,
    caps: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    rid = rid if rid is not None else f"{method}-{uuid.uuid4().hex[:8]}"
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps or {},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        "Authorization": f"Bearer {token}",
    }
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    elif "uri" in params:
        headers["Mcp-Name"] = params["uri"]
    response = httpx.post(
        gateway.base + path,
        headers=headers,
        json={"jsonrpc": "2.0", "id": rid, "method": method, "params": {**params, "_meta": meta}},
        timeout=30,
    )
    body = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[5:].strip() for line in body.splitlines() if line.startswith("data:")]
        doc = json.loads(events[-1])
    else:
        doc = json.loads(body)
    assert doc.get("id") == rid, doc
    return response.status_code, doc


def call(
    gateway: Running, token: str, tool: str, marker: str, path: str = "/mcp"
) -> tuple[int, dict[str, Any]]:
    return rpc(
        gateway, token, "tools/call", {"name": tool, "arguments": {"marker": marker}}, path=path
    )


def upstream_entries(env: dict[str, Any], which: str, marker: str) -> list[dict[str, Any]]:
    return [e for e in read_log(env[f"{which}_log"]) if e.get("marker") == marker]


def never_reached(env: dict[str, Any], *tokens: str) -> None:
    """No upstream ever received any of these tokens (by digest, in every line of their logs)."""
    seen = {
        e.get("token_sha256")
        for which in ("modern", "legacy")
        for e in read_log(env[f"{which}_log"])
    }
    for token in tokens:
        assert digest(token) not in seen


# ---------------------------------------------------------------- every call kind, every kind


def test_every_call_kind_reaches_each_member_with_a_token_of_its_own_audience(env):
    a, _ = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    # A merged list: each member's part asked with that member's token.
    status, listed = rpc(a, token, "tools/list", {})
    names = {t["name"] for t in listed["result"]["tools"]}
    assert status == 200 and {"modern__whoami", "legacy__whoami"} <= names, listed
    for member in ("modern", "legacy"):
        status, doc = call(a, token, f"{member}__whoami", marker)
        assert (
            status == 200 and json.loads(doc["result"]["content"][0]["text"])["marker"] == marker
        ), doc
        status, doc = rpc(a, token, "resources/read", {"uri": f"{member}+audience://info"})
        assert status == 200 and "contents" in doc["result"], doc
        status, doc = rpc(a, token, "prompts/get", {"name": f"{member}__hello"})
        assert status == 200 and "messages" in doc["result"], doc
    # The single-upstream route (private_key_jwt).
    status, doc = call(a, token, "whoami", marker, path="/single")
    assert status == 200, doc

    for member, audience, client in (
        ("modern", MODERN_AUD, "gateway-basic"),
        ("legacy", LEGACY_AUD, "gateway-post"),
    ):
        entries = upstream_entries(env, member, marker)
        assert entries, f"the {member} upstream logged no call with the marker"
        for entry in entries:
            assert "refused" not in entry, entry
            assert entry["sub"] == "alice" and entry["aud"] == audience
            assert entry["client_id"] in (client, "gateway-jwt")
    assert {e["client_id"] for e in upstream_entries(env, "modern", marker)} == {
        "gateway-basic",
        "gateway-jwt",
    }
    never_reached(env, token)
    # One exchange per member and client authentication, for all these calls.
    exchanges = env["as"].exchanges(subject_marker=marker)
    assert len(exchanges) == 3, exchanges


# ---------------------------------------------------------------- the cache


def test_two_replicas_share_one_exchange(env):
    a, b = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    shared_before = metric(
        scrape(b.base), "mcp_edge_token_exchange_cache_total", route="single", result="shared"
    )
    for n in range(6):
        status, doc = call((a, b)[n % 2], token, "whoami", marker, path="/single")
        assert status == 200, doc
    assert len(env["as"].exchanges(subject_marker=marker)) == 1
    assert len(upstream_entries(env, "modern", marker)) == 6
    assert len({e["token_sha256"] for e in upstream_entries(env, "modern", marker)}) == 1
    assert (
        metric(
            scrape(b.base), "mcp_edge_token_exchange_cache_total", route="single", result="shared"
        )
        == shared_before + 1
    )


async def test_many_concurrent_calls_one_exchange(env):
    a, _ = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    results = await asyncio.gather(
        *(asyncio.to_thread(call, a, token, "whoami", f"{marker}", "/single") for _ in range(16))
    )
    assert all(status == 200 for status, _ in results), results
    assert len(env["as"].exchanges(subject_marker=marker)) == 1


def test_an_expired_exchanged_token_is_exchanged_again(env):
    a, _ = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    assert call(a, token, "whoami", marker, path="/short")[0] == 200
    assert call(a, token, "whoami", marker, path="/short")[0] == 200
    assert len(env["as"].exchanges(subject_marker=marker)) == 1
    time.sleep(2.5)  # the 40 s token is used until 38 s before it expires
    assert call(a, token, "whoami", marker, path="/short")[0] == 200
    assert len(env["as"].exchanges(subject_marker=marker)) == 2
    tokens = [e["token_sha256"] for e in upstream_entries(env, "modern", marker)]
    assert len(tokens) == 3 and tokens[0] == tokens[1] != tokens[2]
    assert all(e["aud"] == SHORT_AUD for e in upstream_entries(env, "modern", marker))


# ---------------------------------------------------------------- across replicas


def test_a_2025_era_sdk_client_gets_the_exchanged_token_on_either_replica(env):
    """The mcp 1.x client through nginx: its session's requests land on both replicas, each
    exchanging (or finding in Redis) the caller's token for the upstream's audience; no
    request of it travels between replicas, and the caller's token never reaches the server."""
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    calls = [f"{marker}-{n}" for n in range(3)]
    report = run_legacy_client(
        env["tmp"],
        {
            "url": env["nginx"].base + "/legacy-single",
            "headers": {"Authorization": f"Bearer {token}", "X-Test-Marker": marker},
            "calls": [{"name": "whoami", "arguments": {"marker": m}} for m in calls],
        },
    )
    assert report.get("protocolVersion", "").startswith("2025"), report
    assert [json.loads(c["text"])["marker"] for c in report["calls"] if c["ok"]] == calls, report
    served = {e.rsplit("upstream=", 1)[1] for e in env["nginx"].wait_marked(marker, 6)}
    assert len(served) == 2, served  # initialize, list, calls...: both replicas
    for m in calls:
        (entry,) = upstream_entries(env, "legacy", m)
        assert entry["sub"] == "alice" and entry["aud"] == LEGACY_AUD and "refused" not in entry
    assert len(env["as"].exchanges(subject_marker=marker)) == 1  # one, shared through Redis
    never_reached(env, token)


def test_a_retry_forwarded_to_the_replica_holding_its_parked_call(env):
    """A 2026-07-28 call the 2025-era server asks a question in, parked on one replica, its
    retry on the other: forwarded (sealed, with no caller's token), answered in the session
    the owner opened with the exchanged token."""
    a, b = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    caps = {"elicitation": {"form": {}}}

    def forwards() -> float:
        return sum(
            metric(
                scrape(r.base), "mcp_edge_bridge_forwards_total", route="legacy-single", result="ok"
            )
            for r in (a, b)
        )

    before = forwards()
    params = {"name": "confirm", "arguments": {"marker": marker}}
    status, doc = rpc(a, token, "tools/call", params, path="/legacy-single", caps=caps)
    assert status == 200 and doc["result"]["resultType"] == "input_required", doc
    (key,) = doc["result"]["inputRequests"]
    retry = {
        **params,
        "requestState": doc["result"]["requestState"],
        "inputResponses": {key: {"action": "accept", "content": {"ok": True}}},
    }
    status, doc = rpc(b, token, "tools/call", retry, path="/legacy-single", caps=caps)
    assert status == 200, doc
    assert json.loads(doc["result"]["content"][0]["text"]) == {
        "marker": marker, "confirmed": True, "era": "legacy"
    }  # fmt: skip
    assert forwards() == before + 1
    (entry,) = upstream_entries(env, "legacy", marker)
    assert entry["aud"] == LEGACY_AUD and "refused" not in entry
    never_reached(env, token)


# ---------------------------------------------------------------- failures


def test_the_authorization_server_down(env):
    a, _ = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    status, doc = rpc(
        a,
        token,
        "tools/call",
        {"name": "whoami", "arguments": {"marker": marker}},
        path="/down",
        rid=41,
    )
    assert status == 503 and doc["id"] == 41, doc
    assert doc["error"]["data"] == {"reason": "token_exchange_unavailable", "member": "down"}
    assert upstream_entries(env, "modern", marker) == []  # nothing forwarded


def test_a_refused_exchange(env):
    a, _ = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    status, doc = call(a, token, "whoami", marker, path="/refused")
    assert status == 502, doc
    assert doc["error"]["data"]["reason"] == "token_exchange_failed"
    assert doc["error"]["data"]["error"] in ("invalid_target", "invalid_grant", "other")
    assert upstream_entries(env, "modern", marker) == []
    assert len(env["as"].exchanges(subject_marker=marker)) == 1
    # The server's reason is in the gateway's log; the caller's token and the secrets never are.
    log = Path(a.process.log_path).read_text()
    assert "token exchange refused by the authorization server" in log
    for secret in (token, *env["secrets"].values()):
        assert secret not in log


def test_the_inbound_token_never_reaches_an_upstream_even_when_refused(env):
    """Every line either upstream ever logged: no token a user sent the gateway among them."""
    a, b = env["replicas"]
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    for gateway in (a, b):
        for path in ("/mcp", "/single", "/refused", "/down", "/short"):
            rpc(gateway, token, "tools/list", {}, path=path)
    never_reached(env, token)


# ---------------------------------------------------------------- what a hostile server sends


def _slow(request: Request) -> Any:
    async def drip() -> None:
        request.writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 99\r\n\r\n{"
        )
        for _ in range(40):
            await request.writer.drain()
            await asyncio.sleep(0.1)
            request.writer.write(b" ")

    return drip()


HOSTILE = {
    "oversized": (
        lambda r: json_answer(200, {"access_token": "x" * 10_000, "token_type": "Bearer"}),
        503,
        "token_exchange_unavailable",
    ),
    "wrong content type": (
        lambda r: answer(200, b'{"access_token":"t","token_type":"Bearer"}', "text/html"),
        503,
        "token_exchange_unavailable",
    ),
    "a MAC token": (
        lambda r: json_answer(200, {"access_token": "t", "token_type": "mac", "expires_in": 60}),
        502,
        "token_exchange_failed",
    ),
    "slow": (_slow, 503, "token_exchange_unavailable"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_token_answers_are_bounded_and_nothing_is_forwarded(env, case):
    a, _ = env["replicas"]
    script, status, reason = HOSTILE[case]
    env["hostile"].answer = script
    marker = uuid.uuid4().hex
    got, doc = call(a, user_token(env, marker), "whoami", marker, path="/hostile")
    assert (got, doc["error"]["data"]["reason"]) == (status, reason), doc
    assert upstream_entries(env, "modern", marker) == []


def test_a_server_echoing_what_it_was_sent_never_puts_it_in_the_log(env):
    """An authorization server whose error text repeats the request's secrets (the caller's
    token, the gateway's client secret): the log has the text with them cut out."""
    a, _ = env["replicas"]

    def echo(request: Request) -> bytes:
        basic = base64.b64decode(request.headers["authorization"].split(" ", 1)[1]).decode()
        said = f"subject_token {request.param('subject_token')} refused for {basic}"
        return json_answer(400, {"error": "invalid_grant", "error_description": said})

    env["hostile"].answer = echo
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    got, doc = call(a, token, "whoami", marker, path="/hostile")
    assert got == 502 and doc["error"]["data"]["error"] == "invalid_grant", doc
    assert upstream_entries(env, "modern", marker) == []
    log = Path(a.process.log_path).read_text()
    assert "subject_token [redacted] refused for gateway-basic:[redacted]" in log
    assert token[:64] not in log and env["secrets"]["BASIC_SECRET"] not in log


def test_no_expires_in_is_used_for_its_call_only(env):
    a, _ = env["replicas"]
    opaque = f"opaque-{uuid.uuid4().hex}"
    env["hostile"].answer = lambda r: json_answer(
        200, {"access_token": opaque, "token_type": "Bearer"}
    )
    marker = uuid.uuid4().hex
    token = user_token(env, marker)
    before = env["hostile"].exchanges
    for _ in range(2):
        call(a, token, "whoami", marker, path="/hostile")  # the upstream refuses it (no JWT): 401
    assert env["hostile"].exchanges - before == 2  # not cached: nothing says how long it lasts
    entries = upstream_entries(env, "modern", marker)
    assert [e["token_sha256"] for e in entries] == [digest(opaque)] * 2  # what the server issued
    sent = env["hostile_as"].token_requests()[-1]
    assert sent.param("subject_token") == token and sent.param("audience") == HOSTILE_AUD


# ---------------------------------------------------------------- check-config --probe


def test_check_config_probe_reads_the_servers_metadata(env):
    cfg = env["config"]
    probed = {
        **cfg,
        "store": {"type": "memory"},
        "routes": [r for r in cfg["routes"] if r["name"] in ("fed", "down")],
    }
    path = write_private(env["tmp"] / "probe.yaml", json.dumps(probed))
    out = run_bounded(
        [*venv_command("mcp-edge"), "check-config", "--config", str(path), "--probe"],
        timeout=60,
        env={**os.environ, **env["secrets"], "MCP_EDGE_STATE_KEYS": generate_key()},
    )
    text = out.output
    assert "route fed member modern: token exchange at " + env["as"].issuer in text, text
    assert "advertises the token-exchange grant" in text, text
    assert "route down: token exchange at" in text and "no issuer configured" in text, text
    assert "not probed" in text  # the members take a caller's token only
    assert out.returncode == 0, text
