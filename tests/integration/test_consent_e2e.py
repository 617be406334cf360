"""Per-user consent end to end, with real parts only:

    SDK client ─▶ nginx (round robin) ─▶ 2 x mcp-edge serve ─▶ upstreams that need the user's
    browser   ─▶                                      │       own token (tests/servers/
                                                      │       audience_server.py: mcp 2.x, and
                                                      │       mcp 1.x through the bridge)
                                                      ├──▶ redis-server (grants, single use)
                                                      └──▶ oidc-provider (tests/support/authserver.py):
                                                           the callers' identity provider and the
                                                           upstreams' authorization server

A call without a grant ends with a URL-mode ``input_required``; a real headless Chromium opens
its link, signs in at the gateway's identity provider, consents at the upstream's authorization
server and comes back to the callback; the SDK client's retry completes with the user's token.
Then: another user opening the link is refused, a link works once and not after it expires, a
withdrawn grant asks again, an upstream ``401`` asks again (but not for a token the store has
replaced: a third replica, not behind nginx, keeps grants in memory to show it), a token is
refreshed before it expires, lists without a grant are not sent, a 2025-era client (mcp 1.x)
uses the grant on both replicas, and the caller's own token never reaches an upstream (its log,
read by marker). One browser for the module; each user signs in on a cleared profile.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
import pytest_asyncio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ElicitResult

from mcp_edge.core.seal import KeyRing, generate_key, parse_key_spec
from mcp_edge.identity import consent_seals as cs
from mcp_edge.identity.grants import GrantBook
from mcp_edge.identity.vault import RedisBackend, SecretVault
from tests.conftest import require
from tests.scale.cluster import NGINX, REDIS_SERVER, Nginx, RedisServer, Replica
from tests.support.authserver import AuthServer, start_authserver
from tests.support.browser import Browser, browser
from tests.support.legacy import (
    LEGACY_STARTUP_TIMEOUT,
    legacy_python_command,
    require_legacy,
    run_legacy_client,
)
from tests.support.processes import (
    free_port,
    python_script,
    serving,
    venv_command,
    write_private,
)
from tests.support.ts_client import run_ts_client, ts_client_launcher

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(240),
    pytest.mark.asyncio(loop_scope="module"),
]

MODERN = "2026-07-28"
AUDIENCE = "consent-e2e"  # what the callers' tokens are for (every route of the gateway)
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "ken")
CONSENT = "mcp-edge/consent"
URL_CAPS = {"elicitation": {"form": {}, "url": {}}}


@dataclass
class Upstream:
    url: str
    log: Path

    def entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def marked(self, marker: str) -> list[dict[str, Any]]:
        return [e for e in self.entries() if e.get("marker") == marker]


@dataclass
class Deployment:
    auth: AuthServer
    redis: RedisServer
    modern: Upstream
    legacy: Upstream
    short: Upstream
    replicas: list[Replica]
    #: A third replica, not behind nginx, that keeps a grant it read in memory (60 s).
    remembering: Replica
    nginx: Nginx
    ring: KeyRing
    ring_spec: str
    config: Path
    tmp: Path

    def url(self, path: str) -> str:
        return self.nginx.base + path

    def token(self, user: str, marker: str | None = None) -> str:
        return self.auth.user_token(user, audience=AUDIENCE, marker=marker)

    def grants(self, user: str, replica: int = 0) -> list[dict[str, Any]]:
        r = httpx.get(
            f"{self.replicas[replica].admin_base}/grants",
            params={"issuer": self.auth.issuer, "subject": user},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        return list(r.json()["grants"])

    def consent_pages_served(self) -> list[tuple[str, str]]:
        """(path, replica address) of every consent page nginx passed on."""
        out = []
        for entry in self.nginx.access_entries():
            uri, _, rest = entry.partition(" ")
            if uri.startswith("/.mcp-edge/consent/"):
                out.append((uri.split("?", 1)[0], rest.rsplit("upstream=", 1)[-1]))
        return out


def _secret_file(tmp: Path, name: str, value: str) -> str:
    return str(write_private(tmp / name, value))


def _oauth(auth: AuthServer, secret: str, resource: str | None) -> dict[str, Any]:
    """``resource`` (RFC 8707): the access token is a JWT for it; None: an opaque token, which
    the upstream introspects (and so sees a revocation at once)."""
    return {
        "oauth": {
            "issuer": auth.issuer,
            "client": {
                "client_id": "gateway-post",
                "method": "client_secret_post",
                "secret_file": secret,
            },
            "scope": ["mcp:tools"],
            "resource": [resource] if resource else [],
        }
    }


def _discovered(secret: str) -> dict[str, Any]:
    """``upstream_auth.oauth`` without the server: found in the upstream's metadata."""
    return {
        "oauth": {
            "client": {
                "client_id": "gateway-post",
                "method": "client_secret_post",
                "secret_file": secret,
            },
            "scope": ["mcp:tools"],
        }
    }


def _audience_server(
    stack: ExitStack,
    tmp: Path,
    auth: AuthServer,
    name: str,
    introspect_secret: str,
    legacy: bool,
    port: int | None = None,
) -> Upstream:
    port = port or free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    log = tmp / f"{name}.jsonl"
    args = [
        "--port", str(port), "--jwks-url", auth.jwks_uri, "--issuer", auth.issuer,
        "--audience", url, "--log", str(log),
        "--introspect", auth.introspection_endpoint, "--introspect-client", "gateway-basic",
        "--introspect-secret-file", introspect_secret, "--prm-issuer", auth.issuer,
    ]  # fmt: skip
    argv = (
        legacy_python_command("audience_server.py", *args)
        if legacy
        else python_script("audience_server.py", *args)
    )
    stack.enter_context(
        serving(
            name,
            argv,
            port=port,
            log_path=tmp / f"{name}.log",
            startup_timeout=LEGACY_STARTUP_TIMEOUT if legacy else 30.0,
        )
    )
    return Upstream(url, log)


@pytest.fixture(scope="module")
def deployment(module_tmp: Path) -> Iterator[Deployment]:
    require(NGINX is not None, "nginx is not installed (apt-get install nginx)")
    require(
        REDIS_SERVER is not None, "redis-server is not installed (apt-get install redis-server)"
    )
    require_legacy()
    tmp = module_tmp
    with ExitStack() as stack:
        replicas = [Replica(i, tmp, {}, admin_port=free_port()) for i in range(2)]
        nginx = Nginx(tmp, [r.port for r in replicas])
        short_port = free_port()
        # The upstream behind /short gets tokens that live 30 s: shorter than the gateway's
        # refresh margin, so every use renews it first (refresh before expiry, shown).
        auth = start_authserver(
            stack,
            tmp / "authserver",
            users=USERS,
            redirect_uris=("http://127.0.0.1/.mcp-edge/consent/callback",),
            resources={f"http://127.0.0.1:{short_port}/mcp": {"ttl": 30}},
        )
        basic = _secret_file(tmp, "basic.secret", auth.basic.secret or "")
        post = _secret_file(tmp, "post.secret", auth.post.secret or "")
        redis = RedisServer(tmp)
        redis.start()
        stack.callback(redis.stop)
        modern = _audience_server(stack, tmp, auth, "modern-upstream", basic, legacy=False)
        short = _audience_server(
            stack, tmp, auth, "short-upstream", basic, legacy=False, port=short_port
        )
        legacy = _audience_server(stack, tmp, auth, "legacy-upstream", basic, legacy=True)
        redis.wait()
        keys = generate_key()
        config = {
            "gateway": {"id": "consent-e2e", "public_url": nginx.base},
            "auth": {
                "mode": "jwt",
                "jwt": {
                    "issuer": auth.issuer,
                    "jwks_url": auth.jwks_uri,
                    "algorithms": ["RS256"],
                    "audience": [AUDIENCE],
                },
            },
            "logging": {"format": "json", "level": "info"},
            "store": {"type": "redis", "url": redis.url},
            "consent": {
                "sign_in": {
                    "issuer": auth.issuer,
                    "client": {"client_id": "gateway-basic", "secret_file": basic},
                },
                "wait_seconds": 30,
                "refresh_before_seconds": 60,
                # Every call reads the store: a test withdraws a grant through one replica and
                # calls through the other at once (the memory's window is unit-tested).
                "local_seconds": 0,
            },
            "routes": [
                {
                    "name": "tickets",
                    "path": "/tickets",
                    "upstream": modern.url,
                    "era": "modern",
                    "legacy_clients": "deny",
                    "upstream_auth": _oauth(auth, post, modern.url),
                },
                {
                    "name": "opaque",
                    "path": "/opaque",
                    "upstream": modern.url,
                    "era": "modern",
                    "legacy_clients": "deny",
                    "upstream_auth": _oauth(auth, post, None),
                },
                {
                    "name": "legacy-opaque",
                    "path": "/legacy-opaque",
                    "upstream": legacy.url,
                    "era": "legacy",
                    "legacy_clients": "deny",
                    "upstream_auth": _oauth(auth, post, None),
                },
                {
                    # 2025-era clients too (legacy_clients: allow, the default).
                    "name": "everyone",
                    "path": "/everyone",
                    "upstream": modern.url,
                    "era": "modern",
                    "upstream_auth": _oauth(auth, post, modern.url),
                },
                {
                    "name": "short",
                    "path": "/short",
                    "upstream": short.url,
                    "era": "modern",
                    "legacy_clients": "deny",
                    "upstream_auth": _oauth(auth, post, short.url),
                },
                {
                    "name": "fed",
                    "path": "/fed",
                    "members": [
                        {
                            # No issuer, no resource: both from the upstream's protected-resource
                            # metadata (RFC 9728), as an MCP client finds them.
                            "name": "modern",
                            "upstream": modern.url,
                            "era": "modern",
                            "upstream_auth": _discovered(post),
                        },
                        {
                            "name": "legacy",
                            "upstream": legacy.url,
                            "era": "legacy",
                            "upstream_auth": _oauth(auth, post, legacy.url),
                        },
                    ],
                },
            ],
        }
        path = write_private(tmp / "gateway.yaml", json.dumps(config))
        for replica in replicas:
            replica.config = config
        remembering = Replica(
            2, tmp, {**config, "consent": {**config["consent"], "local_seconds": 60}}
        )
        for replica in (*replicas, remembering):
            replica.start(keys)
            stack.callback(replica.stop)
        stack.callback(nginx.stop)
        for replica in (*replicas, remembering):
            replica.wait()
        nginx.wait()
        yield Deployment(
            auth, redis, modern, legacy, short, replicas, remembering, nginx,
            KeyRing([parse_key_spec(keys)]), keys, path, tmp,
        )  # fmt: skip


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium(module_tmp: Path) -> AsyncIterator[Browser]:
    async with browser(module_tmp) as b:
        yield b


async def fresh(b: Browser) -> Browser:
    """The browser as a new user finds it: no cookie of anyone before."""
    await b.context.clear_cookies()
    return b


def marker() -> str:
    return f"m-{uuid.uuid4().hex[:12]}"


def rpc(request_id: int, method: str, caps: dict | None = None, **params: Any) -> dict[str, Any]:
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": URL_CAPS if caps is None else caps,
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


async def post(url: str, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    method = body["method"]
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    name = body["params"].get("name") or body["params"].get("uri")
    if name:
        headers["Mcp-Name"] = name
    async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
        r = await http.post(url, headers=headers, json=body)
    return r.status_code, r.json()


def consent_link(doc: dict[str, Any]) -> tuple[str, str]:
    result = doc["result"]
    assert result["resultType"] == "input_required", doc
    assert list(result["inputRequests"]) == [CONSENT]
    params = result["inputRequests"][CONSENT]["params"]
    assert params["mode"] == "url"
    return params["url"], result["requestState"]


def sdk_client(
    d: Deployment, token: str, path: str, on_elicit: Any, base: str | None = None
) -> tuple[Any, Client]:
    """The SDK client on ``path``, through nginx (or at ``base``: one replica)."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    return http, Client(
        streamable_http_client((base or d.nginx.base) + path, http_client=http),
        mode=MODERN,
        elicitation_callback=on_elicit,
    )


def consenting(b: Browser, d: Deployment, user: str, pages: list[Any]):
    """An elicitation callback that opens the URL in the browser as ``user`` would: signs in,
    consents, lands on the gateway's page; then answers ``accept``."""

    async def on_elicit(ctx: Any, params: Any) -> ElicitResult:
        assert params.mode == "url"
        page = await b.authorize(params.url, user, d.auth.password(user))
        pages.append(page)
        return ElicitResult(action="accept")

    return on_elicit


async def grant_on_the_page(b: Browser, d: Deployment, user: str, member: str) -> None:
    """``user`` grants ``member`` access from the authorizations page (no call asked)."""
    page = await b.authorize(d.url("/.mcp-edge/consent/"), user, d.auth.password(user))
    assert page.title == "Your authorizations", page.text
    tab = b.context.pages[0]
    async with tab.expect_navigation(wait_until="load"):
        await tab.click(f'form:has(input[name="member"][value="{member}"]) button')
    granted = await b.authorize(tab.url, user, d.auth.password(user))
    assert granted.title == "Access granted", granted.text


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def whoami(result: Any) -> dict[str, Any]:
    return json.loads(result.content[0].text)


# ---------------------------------------------------------------------------- the flow


async def test_consent_in_the_browser_then_the_sdk_retry_completes(
    deployment: Deployment, chromium: Browser
) -> None:
    d, user, m = deployment, "alice", marker()
    inbound = d.token(user, marker=f"inbound-{m}")
    pages: list[Any] = []
    http, client = sdk_client(
        d, inbound, "/tickets", consenting(await fresh(chromium), d, user, pages)
    )
    async with http, client:
        result = await client.call_tool("whoami", {"marker": m})
        assert whoami(result) == {"marker": m, "server": "audience", "era": "modern"}
        (page,) = pages
        assert page.status == 200 and page.title == "Access granted", page.text
        # The gateway's sign-in, then the upstream's consent, on the identity provider's pages.
        assert page.steps == ["login alice", "consent approve", "consent approve"], page.steps
        # A second call needs nobody: the grant is used (no browser, no round).
        again = marker()
        assert whoami(await client.call_tool("whoami", {"marker": again}))["marker"] == again
    assert len(pages) == 1

    # The upstream got the user's own token for it, never the caller's: found by marker.
    for mark in (m, again):
        (entry,) = d.modern.marked(mark)
        assert entry["sub"] == user and entry["aud"] == d.modern.url
        assert entry["client_id"] == "gateway-post" and "refused" not in entry
        assert entry["token_sha256"] != sha(inbound)
    every = [e for u in (d.modern, d.legacy, d.short) for e in u.entries()]
    assert sha(inbound) not in {e.get("token_sha256") for e in every}

    # The browser's steps went through both replicas (round robin, nothing sticky).
    served = d.consent_pages_served()
    assert {path for path, _ in served} >= {
        "/.mcp-edge/consent/start",
        "/.mcp-edge/consent/callback",
    }
    assert len({where for _, where in served}) == 2, served

    (grant,) = d.grants(user, replica=1)
    assert grant["member"] == "tickets" and grant["refreshable"] is True
    assert "token" not in json.dumps(grant).replace("refreshable", "")
    # Every stored value is sealed: nothing of the token is in Redis.
    keys = subprocess.run(
        ["redis-cli", "-p", str(d.redis.port), "--scan", "--pattern", "mcp-edge:vault:*"],
        capture_output=True, text=True, timeout=10, check=True,
    ).stdout.split()  # fmt: skip
    assert keys and not any(user in k for k in keys)
    for key in keys:
        value = subprocess.run(
            ["redis-cli", "-p", str(d.redis.port), "--no-raw", "GET", key],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout  # fmt: skip
        assert "eyJ" not in value  # no JWT (base64 of '{"') in the clear


async def test_a_second_user_opening_the_link_is_refused_and_nothing_is_stored(
    deployment: Deployment, chromium: Browser
) -> None:
    d = deployment
    carol = d.token("carol")
    status, doc = await post(
        d.url("/tickets"), carol, rpc(1, "tools/call", name="whoami", arguments={})
    )
    assert status == 200
    link, state = consent_link(doc)
    # Bob, signed in as himself, opens carol's link.
    page = await (await fresh(chromium)).authorize(link, "bob", d.auth.password("bob"))
    assert page.status == 403 and page.title == "Signed in as someone else", page.text
    assert page.steps == ["login bob", "consent approve"]
    assert d.grants("carol") == [] and d.grants("bob") == []
    # Carol's client retries: she is asked again, with a new link (the old one is spent).
    status, doc = await post(
        d.url("/tickets"),
        carol,
        rpc(2, "tools/call", name="whoami", arguments={}, requestState=state,
            inputResponses={CONSENT: {"action": "accept"}}),
    )  # fmt: skip
    new_link, _ = consent_link(doc)
    assert new_link != link
    assert "not complete yet" in doc["result"]["inputRequests"][CONSENT]["params"]["message"]


async def test_a_link_works_once_and_not_after_it_expires(
    deployment: Deployment, chromium: Browser
) -> None:
    d = deployment
    dave = d.token("dave")
    _, doc = await post(d.url("/tickets"), dave, rpc(1, "tools/call", name="whoami", arguments={}))
    link, _ = consent_link(doc)
    b = await fresh(chromium)
    first = await b.open(link)
    assert first.url.startswith(d.auth.issuer + "/"), first.url  # sent to sign in
    replayed = await b.open(link)
    assert replayed.status == 400 and replayed.title == "This link was already used"
    # A link whose ticket expired (made with the gateway's key ring, as it would have been).
    token, _ = cs.issue_ticket(
        d.ring, principal_id='["jwt-sub","x","dave"]', route="tickets", member="tickets",
        call="tools/call whoami", now=time.time() - 3600, ttl=300,
    )  # fmt: skip
    expired = await b.open(d.url(f"/.mcp-edge/consent/start?t={token}"))
    assert expired.status == 400 and expired.title == "This link has expired"
    tampered = await b.open(link[:-3] + ("AAA" if not link.endswith("AAA") else "BBB"))
    assert tampered.status == 400 and tampered.title == "This link is not valid"
    assert d.grants("dave") == []


# ---------------------------------------------------------------------------- withdrawn


async def test_a_user_sees_and_withdraws_a_grant_then_is_asked_again(
    deployment: Deployment, chromium: Browser
) -> None:
    d, user = deployment, "erin"
    inbound = d.token(user)
    b = await fresh(chromium)
    pages: list[Any] = []
    http, client = sdk_client(d, inbound, "/tickets", consenting(b, d, user, pages))
    async with http, client:
        await client.call_tool("whoami", {"marker": marker()})
    assert len(pages) == 1
    # The same browser (signed in at the gateway by the consent) shows what erin granted.
    page = await b.open(d.url("/.mcp-edge/consent/"))
    assert page.title == "Your authorizations" and "Signed in as erin" in page.text, page.text
    assert "tickets" in page.text and "granted" in page.text
    revocations = len(d.auth.requests(route="revocation"))
    tab = b.context.pages[0]
    async with tab.expect_navigation(wait_until="load"):
        await tab.click('form:has(input[name="member"][value="tickets"]) button')
    assert await tab.title() == "Your authorizations"
    text = await tab.locator("body").inner_text()
    assert "not granted" in text
    assert d.grants(user) == [] and d.grants(user, replica=1) == []
    # The tokens were revoked at the authorization server too (RFC 7009: refresh and access).
    assert len(d.auth.requests(route="revocation")) >= revocations + 1
    # The next call asks again.
    _, doc = await post(
        d.url("/tickets"), inbound, rpc(1, "tools/call", name="whoami", arguments={})
    )
    consent_link(doc)


async def test_an_operator_lists_and_revokes_a_principals_grants(
    deployment: Deployment, chromium: Browser
) -> None:
    d, user = deployment, "grace"
    # Grace grants access from the authorizations page itself (no call asked).
    await grant_on_the_page(await fresh(chromium), d, user, "fed/legacy")

    cli = [*venv_command("mcp-edge"), "grants"]
    who = ["--config", str(d.config), "--issuer", d.auth.issuer, "--subject", user]
    env = {**os.environ, "MCP_EDGE_STATE_KEYS": d.ring_spec}
    listed = subprocess.run(
        [*cli, "list", *who], capture_output=True, text=True, timeout=30, env=env
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["member"] == "fed/legacy" and row["scope"] == "mcp:tools"
    assert set(row) == {
        "member", "scope", "granted_at", "last_used", "access_expires_at", "refreshable",
        "forgotten_at",
    }  # fmt: skip
    # The admin listener revokes it (and the tokens at the server); the CLI sees it gone.
    admin = d.replicas[1].admin_base + "/grants"
    query = {"issuer": d.auth.issuer, "subject": user, "member": "fed/legacy"}
    r = httpx.delete(admin, params=query, timeout=10)
    assert r.status_code == 200 and r.json() == {"revoked": 1}
    assert d.grants(user) == [] and d.grants(user, replica=1) == []
    revoked = subprocess.run(
        [*cli, "revoke", *who], capture_output=True, text=True, timeout=30, env=env
    )
    assert revoked.returncode == 0 and revoked.stdout.strip() == "revoked 0 grant(s)"
    # A web page in an operator's browser (reaching the admin port by DNS rebinding, say) can
    # neither revoke nor list: the browser names the page's origin, the tools never do.
    for method in ("DELETE", "GET"):
        r = httpx.request(method, admin, params=query, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403, method
    r = httpx.get(admin, params=query, headers={"Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    # Never on the public listener (nginx passes every path on: still 404).
    assert httpx.get(d.url("/grants"), params=query, timeout=10).status_code == 404
    assert httpx.get(d.replicas[0].base + "/grants", params=query, timeout=10).status_code == 404


# ---------------------------------------------------------------------------- asked again


@pytest.mark.parametrize(
    ("path", "user", "era"), [("/opaque", "frank", "modern"), ("/legacy-opaque", "ivan", "legacy")]
)
async def test_an_upstream_401_drops_the_grant_and_asks_again(
    deployment: Deployment, chromium: Browser, path: str, user: str, era: str
) -> None:
    d = deployment
    upstream = d.modern if era == "modern" else d.legacy
    pages: list[Any] = []
    b = await fresh(chromium)
    http, client = sdk_client(d, d.token(user), path, consenting(b, d, user, pages))
    first, second = marker(), marker()
    async with http, client:
        await client.call_tool("whoami", {"marker": first})
        assert len(pages) == 1
        entries = upstream.marked(first)
        assert entries and all("refused" not in e and e["sub"] == user for e in entries)
        # The user takes the consent back at the authorization server: the upstream (which
        # introspects the opaque token) refuses it with 401 and WWW-Authenticate (a 2025-era
        # one at the bridge's session, before the call).
        assert d.auth.revoke_grants(user, "gateway-post") >= 1
        result = await client.call_tool("whoami", {"marker": second})
        assert whoami(result) == {"marker": second, "server": "audience", "era": era}
    assert len(pages) == 2  # asked again, as a new round, and granted again
    # The first grant's token (found by the first call's marker) was refused once revoked; the
    # second call went through with the new grant's token.
    revoked = {e["token_sha256"] for e in entries}
    assert any(
        e.get("refused") == "inactive (introspection)" and e["token_sha256"] in revoked
        for e in upstream.entries()
    ), "the upstream never refused the revoked token"
    accepted = [e for e in upstream.marked(second) if "refused" not in e]
    assert accepted and revoked.isdisjoint(e["token_sha256"] for e in accepted)


async def test_a_401_for_a_token_the_store_has_replaced_uses_the_new_grant_not_a_new_round(
    deployment: Deployment, chromium: Browser
) -> None:
    """A replica still holds a grant in memory after it was replaced through another: the
    upstream refuses the old token (revoked at the server), and the call goes once more with
    the grant the store holds now, instead of asking the user, who just granted it, again."""
    d, user = deployment, "judy"
    b = await fresh(chromium)
    pages: list[Any] = []
    consent = consenting(b, d, user, pages)
    asked_again: list[Any] = []

    async def once(ctx: Any, params: Any) -> ElicitResult:
        if pages:  # granted already: another round would be asking the user for nothing
            asked_again.append(params)
            return ElicitResult(action="decline")
        return await consent(ctx, params)

    # (Its memory keeps the first grant 60 s: the steps below take a few.)
    there = d.remembering.base
    first, second, third = marker(), marker(), marker()
    http, client = sdk_client(d, d.token(user), "/opaque", once, base=there)
    async with http, client:
        await client.call_tool("whoami", {"marker": first})  # granted; held in its memory
        assert len(pages) == 1
        # Withdrawn through replica 0 (its tokens revoked at the server), then granted again
        # when a call through the others asked.
        r = httpx.delete(
            d.replicas[0].admin_base + "/grants",
            params={"issuer": d.auth.issuer, "subject": user},
            timeout=10,
        )
        assert r.status_code == 200 and r.json() == {"revoked": 1}
        again: list[Any] = []
        other_http, other = sdk_client(d, d.token(user), "/opaque", consenting(b, d, user, again))
        async with other_http, other:
            await other.call_tool("whoami", {"marker": second})
        assert len(again) == 1
        result = await client.call_tool("whoami", {"marker": third})
        assert whoami(result)["marker"] == third
    assert asked_again == []
    old = {e["token_sha256"] for e in d.modern.marked(first)}
    new = {e["token_sha256"] for e in d.modern.marked(second) if "refused" not in e}
    sent = [(e["token_sha256"], e.get("refused")) for e in d.modern.marked(third)]
    assert sent == [(*old, "inactive (introspection)"), (*new, None)], sent
    assert len(d.grants(user)) == 1


async def test_an_access_token_is_refreshed_before_it_expires(
    deployment: Deployment, chromium: Browser
) -> None:
    d, user = deployment, "bob"
    pages: list[Any] = []
    b = await fresh(chromium)
    http, client = sdk_client(d, d.token(user), "/short", consenting(b, d, user, pages))

    def refreshes() -> int:
        return len(d.auth.requests(grant_type="refresh_token", client_id="gateway-post"))

    async with http, client:
        await client.call_tool("whoami", {"marker": marker()})
        assert len(pages) == 1
        before = refreshes()
        marks = [marker() for _ in range(3)]
        await asyncio.gather(*(client.call_tool("whoami", {"marker": m}) for m in marks))
    # The token lives 30 s, under the 60 s margin: every use renews it first, and calls at
    # the same moment share one renewal (one replica renews, the other takes what it stored).
    assert 1 <= refreshes() - before <= 2
    tokens = {d.short.marked(m)[0]["token_sha256"] for m in marks}
    assert all("refused" not in d.short.marked(m)[0] for m in marks)
    assert len(tokens) <= 2
    assert len(pages) == 1  # never asked again: renewed, not refused


# ---------------------------------------------------------------------------- every client and member


async def test_the_typescript_sdk_answers_the_url_elicitation_on_a_member(
    deployment: Deployment, chromium: Browser, module_tmp: Path
) -> None:
    require(ts_client_launcher() is not None, "the TypeScript client is not installed")
    d, user, m = deployment, "carol", marker()
    asked = module_tmp / f"asked-{m}.jsonl"
    plan = {
        "url": d.url("/fed"),
        "headers": {"Authorization": f"Bearer {d.token(user)}"},
        "capabilities": {"elicitation": {"url": {}}},
        "answers": {"elicitation": [{"action": "accept"}]},
        "askedFile": str(asked),
        "requestTimeoutMs": 60_000,
        "steps": [{"op": "callTool", "name": "modern__whoami", "arguments": {"marker": m}}],
    }
    running = asyncio.ensure_future(asyncio.to_thread(run_ts_client, plan, timeout=90))
    # The SDK answered "accept" and retried at once: the gateway holds the retry while the
    # person, in the browser, signs in and consents.
    deadline = time.monotonic() + 60
    while not asked.exists() or not asked.read_text().strip():
        if running.done():
            raise AssertionError(f"no URL was asked: {json.dumps(running.result())[:3000]}")
        assert time.monotonic() < deadline, "no URL was asked"
        await asyncio.sleep(0.1)
    request = json.loads(asked.read_text().splitlines()[0])
    assert request["params"]["mode"] == "url"
    page = await (await fresh(chromium)).authorize(
        request["params"]["url"], user, d.auth.password(user)
    )
    assert page.title == "Access granted", page.text
    report = await running
    (step,) = report["steps"]
    assert step["ok"], report
    assert json.loads(step["result"]["content"][0]["text"])["marker"] == m
    (entry,) = d.modern.marked(m)
    # The member's server and resource came from the upstream's metadata: a JWT for it.
    assert entry["sub"] == user and "refused" not in entry and entry["aud"] == d.modern.url


async def test_a_2025_era_member_through_the_bridge(
    deployment: Deployment, chromium: Browser
) -> None:
    d, user, m = deployment, "dave", marker()
    pages: list[Any] = []
    b = await fresh(chromium)
    http, client = sdk_client(d, d.token(user), "/fed", consenting(b, d, user, pages))
    async with http, client:
        result = await client.call_tool("legacy__whoami", {"marker": m})
        assert whoami(result) == {"marker": m, "server": "audience", "era": "legacy"}
        # Lists: the member with a grant is listed, the one without is left out (not sent).
        tools = sorted(t.name for t in (await client.list_tools()).tools)
    assert tools == ["legacy__whoami"]
    assert len(pages) == 1
    (entry,) = d.legacy.marked(m)
    assert entry["sub"] == user and entry["aud"] == d.legacy.url


async def test_a_2025_era_sdk_client_uses_the_grant_on_either_replica(
    deployment: Deployment, chromium: Browser
) -> None:
    """A 2025-era client cannot be asked: once the person granted access on the page, the mcp
    1.x client's session, its requests landing on both replicas, carries the grant's token."""
    d, user, m = deployment, "ken", marker()
    await grant_on_the_page(await fresh(chromium), d, user, "everyone")
    inbound = d.token(user, marker=f"inbound-{m}")
    calls = [f"{m}-{n}" for n in range(3)]
    report = await asyncio.to_thread(
        run_legacy_client,
        d.tmp,
        {
            "url": d.url("/everyone"),
            "headers": {"Authorization": f"Bearer {inbound}", "X-Test-Marker": m},
            "calls": [{"name": "whoami", "arguments": {"marker": c}} for c in calls],
        },
    )
    assert report.get("protocolVersion", "").startswith("2025"), report
    assert [json.loads(c["text"])["marker"] for c in report["calls"] if c["ok"]] == calls, report
    served = {e.rsplit("upstream=", 1)[1] for e in d.nginx.wait_marked(m, 6)}
    assert len(served) == 2, served
    for c in calls:
        (entry,) = d.modern.marked(c)
        assert entry["sub"] == user and entry["aud"] == d.modern.url and "refused" not in entry
    every = [e for u in (d.modern, d.legacy, d.short) for e in u.entries()]
    assert sha(inbound) not in {e.get("token_sha256") for e in every}


async def test_a_list_without_a_grant_goes_as_nobodys_and_says_where_to_grant(
    deployment: Deployment,
) -> None:
    d, m = deployment, marker()
    token = d.token("alice", marker=f"inbound-{m}")
    body = rpc(1, "tools/list")
    body["params"]["_meta"]["test.mcp-edge/marker"] = m
    status, doc = await post(d.url("/opaque"), token, body)
    assert status == 200
    assert doc["error"]["code"] == -32000
    assert doc["error"]["data"] == {
        "reason": "consent_required",
        "url": d.url("/.mcp-edge/consent/"),
    }
    # It went without any credential (the upstream refused it: 401), never with the caller's.
    (entry,) = d.modern.marked(m)
    assert entry["token_sha256"] is None and entry["refused"] == "no bearer token"
    # server/discover is answered for the member, so a client can connect.
    status, doc = await post(d.url("/opaque"), token, rpc(2, "server/discover"))
    assert status == 200 and doc["result"]["supportedVersions"] == [MODERN]
    assert d.url("/.mcp-edge/consent/") in doc["result"]["instructions"]


async def test_a_client_without_url_mode_gets_the_capability_error(deployment: Deployment) -> None:
    d = deployment
    status, doc = await post(
        d.url("/opaque"),
        d.token("alice"),
        rpc(1, "tools/call", {"elicitation": {"form": {}}}, name="whoami", arguments={}),
    )
    assert status == 400 and doc["error"]["code"] == -32021
    assert doc["error"]["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}
    assert "elicitation.url" in doc["error"]["message"]


# ---------------------------------------------------------------------------- hostile input


def _vault_keys(d: Deployment) -> list[str]:
    out = subprocess.run(
        ["redis-cli", "-p", str(d.redis.port), "--scan", "--pattern", "mcp-edge:vault:*"],
        capture_output=True, text=True, timeout=10, check=True,
    )  # fmt: skip
    return sorted(out.stdout.split())


def _page(r: httpx.Response) -> str:
    """The refusal page's title (every refusal is a page saying why)."""
    assert r.headers["content-type"] == "text/html; charset=utf-8", r.headers
    assert r.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in r.headers["content-security-policy"]
    return r.text.split("<title>", 1)[1].split("</title>", 1)[0]


async def _outcome(d: Deployment, consent_id: str) -> str | None:
    """What the browser's side of a consent ended with, as a waiting retry reads it."""
    vault = SecretVault(d.ring, RedisBackend(d.redis.url, timeout=5))
    try:
        return await GrantBook(
            vault, idle_seconds=60, touch_seconds=10, outcome_seconds=60
        ).outcome(consent_id, "tickets")
    finally:
        await vault.aclose()


def _transaction(d: Deployment, user: str, leg: str = cs.GRANT) -> cs.Transaction:
    """A transaction as the start page would have begun it for ``user`` (made with the
    gateway's key ring: what a browser's cookie holds)."""
    principal = f'["jwt-sub",{json.dumps(d.auth.issuer)},{json.dumps(user)}]'
    _, ticket = cs.issue_ticket(
        d.ring, principal_id=principal, route="tickets", member="tickets",
        call="tools/call whoami", now=time.time(), ttl=300,
    )  # fmt: skip
    return cs.begin_leg(
        ticket, leg, now=time.time(), ttl=600, principal_id=principal if leg == cs.GRANT else None
    )


async def test_every_consent_endpoint_refuses_hostile_input_with_a_page_and_stores_nothing(
    deployment: Deployment,
) -> None:
    d = deployment
    base = d.replicas[0].base + "/.mcp-edge/consent"
    stored = _vault_keys(d)
    _, doc = await post(
        d.url("/tickets"), d.token("heidi"), rpc(1, "tools/call", name="whoami", arguments={})
    )
    link, _ = consent_link(doc)
    ticket = parse_qs(urlsplit(link).query)["t"][0]
    async with httpx.AsyncClient(timeout=15, trust_env=False, follow_redirects=False) as http:

        async def get(path: str, **kw: Any) -> httpx.Response:
            return await http.get(base + path, **kw)

        # Wrong methods (a HEAD too: no link is spent by a preview), bodies on GET, unknown paths.
        for method in ("POST", "PUT", "DELETE", "HEAD"):
            r = await http.request(method, f"{base}/start", params={"t": ticket})
            assert r.status_code == 405 and r.headers["allow"] == "GET", method
        r = await http.request("POST", f"{base}/callback", params={"state": "x", "code": "y"})
        assert r.status_code == 405
        r = await http.request("GET", f"{base}/start", params={"t": ticket}, content=b"x" * 10)
        assert r.status_code == 400 and r.headers["connection"] == "close"
        r = await get("/nothing-here")
        assert r.status_code == 404 and _page(r) == "Not found"
        # Missing, repeated and oversized parameters.
        assert _page(await get("/start")) == "This request is not valid"
        r = await http.get(f"{base}/start?t={ticket}&t={ticket}")
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await get("/start", params={"t": "A" * 9000})
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await get("/start", params={"t": "mcpecs1.x.AAAA"})
        assert r.status_code == 400 and _page(r) == "This link is not valid"
        r = await get("/callback")
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await get("/callback", params={"state": "s" * 300, "code": "c"})
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await http.get(f"{base}/callback?state=a&state=b&code=c")
        assert r.status_code == 400 and _page(r) == "This request is not valid"

        # The link itself, with what an attacker would add (an open redirect): the only place
        # it sends the browser is the identity provider's authorization endpoint, back to the
        # gateway's own callback; nothing of the request's choosing.
        r = await get(
            "/start",
            params={
                "t": ticket,
                "redirect_uri": "https://evil.example/",
                "next": "https://evil.example/",
            },
        )
        assert r.status_code == 303
        location = urlsplit(r.headers["location"])
        assert (
            f"{location.scheme}://{location.netloc}{location.path}" == d.auth.authorization_endpoint
        )
        sent = parse_qs(location.query)
        assert sent["redirect_uri"] == [d.url("/.mcp-edge/consent/callback")]
        assert sent["code_challenge_method"] == ["S256"] and len(sent["code_challenge"][0]) == 43
        assert sent["state"] and sent["nonce"] and sent["scope"] == ["openid"]
        assert "evil" not in r.headers["location"]
        binding = r.headers["set-cookie"]
        assert "HttpOnly" in binding and "SameSite=Lax" in binding
        assert "Path=/;" in binding and "Domain" not in binding
        # Replayed, on either replica: used once.
        for replica in d.replicas:
            r = await http.get(f"{replica.base}/.mcp-edge/consent/start", params={"t": ticket})
            assert r.status_code == 400 and _page(r) == "This link was already used"

        # Callbacks: a forged state (no browser binding), a state whose binding is another's,
        # a binding without its state, a code the server never issued, and its replay.
        tx = _transaction(d, "heidi")
        cookie = cs.seal_transaction(d.ring, tx)
        r = await get("/callback", params={"state": tx.state, "code": "x"})
        assert r.status_code == 400 and _page(r) == "This sign-in did not start in this browser"
        other = _transaction(d, "heidi")
        r = await get(
            "/callback",
            params={"state": tx.state, "code": "x"},
            headers={"cookie": f"{tx.cookie_name}={cs.seal_transaction(d.ring, other)}"},
        )
        assert r.status_code == 400 and _page(r) == "This sign-in does not match"
        r = await get(
            "/callback",
            params={"state": "forged", "code": "x"},
            headers={"cookie": f"{tx.cookie_name}={cookie}"},
        )
        assert r.status_code == 400 and _page(r) == "This sign-in did not start in this browser"
        bound = {"cookie": f"{tx.cookie_name}={cookie}"}
        # RFC 9207: the server says it names itself in its answers; one that does not, or
        # names another server, is a mix-up (refused before any code is redeemed).
        for iss in (None, "https://other-server.example"):
            mixed = _transaction(d, "heidi")
            r = await get(
                "/callback",
                params={"state": mixed.state, "code": "c", **({"iss": iss} if iss else {})},
                headers={"cookie": f"{mixed.cookie_name}={cs.seal_transaction(d.ring, mixed)}"},
            )
            assert r.status_code == 400 and _page(r) == "This sign-in does not match"
        issued = {"state": tx.state, "code": "never-issued", "iss": d.auth.issuer}
        r = await get("/callback", params=issued, headers=bound)
        assert r.status_code == 502 and _page(r) == "The authorization did not complete"
        assert f"{tx.cookie_name}=;" in r.headers["set-cookie"]  # the binding is cleared
        for replica in d.replicas:  # the same answer again, on either replica: spent
            r = await http.get(
                f"{replica.base}/.mcp-edge/consent/callback", params=issued, headers=bound
            )
            assert r.status_code == 400 and _page(r) == "This link was already used"
        # A refusal at the server (the user said no): a page, and nothing stored.
        denied = _transaction(d, "heidi")
        r = await get(
            "/callback",
            params={"state": denied.state, "error": "access_denied"},
            headers={"cookie": f"{denied.cookie_name}={cs.seal_transaction(d.ring, denied)}"},
        )
        assert r.status_code == 403 and _page(r) == "Access was not allowed"
        # The same at the sign-in, by whoever opened heidi's link (nobody is identified yet):
        # a page, and nothing her waiting retry would take as her refusal.
        _, ticket_of_heidi = cs.issue_ticket(
            d.ring, principal_id=f'["jwt-sub",{json.dumps(d.auth.issuer)},"heidi"]',
            route="tickets", member="tickets", call="tools/call whoami", now=time.time(), ttl=300,
        )  # fmt: skip
        anyone = cs.begin_leg(ticket_of_heidi, cs.SIGN_IN, now=time.time(), ttl=600)
        r = await get(
            "/callback",
            params={"state": anyone.state, "error": "access_denied"},
            headers={"cookie": f"{anyone.cookie_name}={cs.seal_transaction(d.ring, anyone)}"},
        )
        assert r.status_code == 403 and _page(r) == "Access was not allowed"
        assert await _outcome(d, ticket_of_heidi.consent_id) is None
        assert await _outcome(d, denied.ticket.consent_id) == "denied"
        # A cookie that is not the gateway's.
        r = await get(
            "/callback",
            params={"state": tx.state, "code": "x"},
            headers={"cookie": f"{tx.cookie_name}=mcpecb1.k.AAAA"},
        )
        assert r.status_code == 400 and _page(r) == "This link is not valid"

        # The authorizations page's forms: no session, another session's token, not a form.
        r = await http.post(f"{base}/revoke", data={"csrf": "x", "member": "tickets"})
        assert r.status_code == 400 and _page(r) == "This sign-in did not start in this browser"
        session = cs.new_session('["jwt-sub","i","alice"]', "alice", now=time.time(), ttl=600)
        signed = {"cookie": f"{cs.SESSION_COOKIE}={cs.seal_session(d.ring, session)}"}
        r = await http.post(
            f"{base}/revoke", data={"csrf": "other", "member": "tickets"}, headers=signed
        )
        assert r.status_code == 400 and _page(r) == "This sign-in does not match"
        r = await http.post(f"{base}/revoke", json={"csrf": session.csrf}, headers=signed)
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await http.post(
            f"{base}/connect", data={"csrf": session.csrf, "member": "x" * 5000}, headers=signed
        )
        assert r.status_code == 400
        r = await http.post(
            f"{base}/connect", data={"csrf": session.csrf, "member": "nope"}, headers=signed
        )
        assert r.status_code == 400 and _page(r) == "This request is not valid"
        r = await http.get(f"{base}/revoke")
        assert r.status_code == 405 and r.headers["allow"] == "POST"

    # No grant was stored by any of it: the only new entries are the outcomes a waiting retry
    # reads (the consent denied at the server, the code it refused), each an entry and its index.
    assert d.grants("heidi") == []
    added = [k for k in _vault_keys(d) if k not in stored]
    assert len(added) == 4 and all(k.startswith("mcp-edge:vault:consent:") for k in added), added
