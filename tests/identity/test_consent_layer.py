"""The consent layer in front of a member, on its own: a call without a grant asks (URL mode,
its continuation sealed), a client without ``elicitation.url`` gets ``-32021``, a retry
resumes the call as it was (the upstream's own state and answers back), a declined round ends
the call, an upstream ``401`` drops the grant and asks again, an access token is refreshed
before it expires (once, for calls at the same time), and a list without a grant is not sent.

The vault is the real one (memory backend); the authorization server is a stand-in that
answers refresh requests as a server would (the real one is in the end-to-end tests).
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from prometheus_client import CollectorRegistry

from mcp_edge.auth.base import Principal
from mcp_edge.core.flow import Flow, FlowRules
from mcp_edge.core.jsonrpc import Message
from mcp_edge.core.seal import KeyRing, StateKey
from mcp_edge.edge.context import SCOPE_KEY, RequestContext
from mcp_edge.identity import consent_round as cr
from mcp_edge.identity import consent_seals as cs
from mcp_edge.identity.asclient import ASRefused, ASUnavailable, ServerMetadata
from mcp_edge.identity.config import OAuthConfig
from mcp_edge.identity.consent import ConsentLayer, ConsentMember
from mcp_edge.identity.consent_config import ConsentSection
from mcp_edge.identity.consent_wiring import ConsentMetrics
from mcp_edge.identity.grants import DENIED, Grant, GrantBook, grant_from_token_answer
from mcp_edge.identity.vault import MemoryBackend, SecretVault
from mcp_edge.store import MemoryStore

RING = KeyRing([StateKey.from_secret(b"\x07" * 32)])
ALICE = Principal(id='["jwt-sub","https://idp","alice"]', display="alice")
SERVICE = Principal(id='["jwt-client","https://idp","svc"]', display="svc")
URL_CAPS = {"elicitation": {"form": {}, "url": {}}}
MEMBER = "tickets"


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """Stands in for the authorization server: refresh answers, counted."""

    class section:
        timeout_seconds = 1.0
        allow_http = True

    client_id = "gateway"

    def __init__(self) -> None:
        self.refreshes = 0
        self.answer: Any = None
        self.gate: asyncio.Event | None = None
        #: The tokens revoked at its revocation endpoint (RFC 7009), in order.
        self.revoked: list[str] = []

    async def metadata(self) -> ServerMetadata:
        return ServerMetadata(
            issuer="http://127.0.0.1:9/",
            token_endpoint="http://127.0.0.1:9/token",
            document={"revocation_endpoint": "http://127.0.0.1:9/revoke"},
        )

    async def post_form(self, endpoint: str, form: list[tuple[str, str]]) -> bool:
        self.revoked.append(dict(form)["token"])
        return True

    async def token_request(self, form: list[tuple[str, str]]) -> dict[str, Any]:
        assert ("grant_type", "refresh_token") in form
        self.refreshes += 1
        if self.gate is not None:
            await self.gate.wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer or {
            "access_token": f"renewed-{self.refreshes}",
            "token_type": "Bearer",
            "expires_in": 3600,
        }

    async def aclose(self) -> None:
        pass


def build(
    clock: Clock, vault: SecretVault | None = None, **settings: Any
) -> tuple[ConsentMember, Server]:
    """A member (one replica's); ``vault``: the store it shares with another replica's."""
    vault = vault or SecretVault(RING, MemoryBackend(clock=clock), clock=clock)
    section = ConsentSection(**settings)
    store = MemoryStore(clock=clock)
    server = Server()
    member = ConsentMember(
        key=MEMBER,
        name=MEMBER,
        config=OAuthConfig(
            issuer="http://127.0.0.1:9/", client={"client_id": "gw", "secret_env": "X"}
        ),
        settings=section,
        server=server,  # type: ignore[arg-type]
        grants=GrantBook(
            vault,
            idle_seconds=section.grant_idle_seconds,
            touch_seconds=section.touch_seconds,
            outcome_seconds=600,
            clock=clock,
        ),
        spend=store.consume,
        ring=RING,
        public_base="https://edge.example",
        metrics=ConsentMetrics(CollectorRegistry()),
        clock=clock,
    )
    return member, server


def grant(
    clock: Clock, token: str = "user-token", expires_in: float = 3600, refresh: str | None = "rt"
) -> Grant:
    return Grant(
        MEMBER, token, refresh, clock.now + expires_in, "tickets:read", clock.now, clock.now
    )


class Upstream:
    """The member's adapter: records what reached it; answers 200, or 401 with a challenge."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.refuse = False
        #: Tokens refused (as its server revoked them), the others accepted.
        self.refused: set[str] = set()
        #: Awaited with the bearer token before each answer (what happens meanwhile elsewhere).
        self.before_answer: Any = None
        #: Refuse requests without a token (as a server that lists nothing to anyone).
        self.private = True
        self.answer: dict[str, Any] = {"resultType": "complete", "content": []}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        ctx: RequestContext = scope[SCOPE_KEY]
        assert ctx.rpc is not None
        self.seen.append(
            {
                "bearer": ctx.upstream_bearer,
                "principal": ctx.principal,
                "params": orjson.loads(ctx.forward_body)["params"],
            }
        )
        if self.before_answer is not None:
            await self.before_answer(ctx.upstream_bearer)
        refused = self.refuse or ctx.upstream_bearer in self.refused
        if refused or (self.private and ctx.upstream_bearer is None):
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"www-authenticate", b'Bearer error="invalid_token"')],
                }
            )
            await send({"type": "http.response.body", "body": b'{"error":"invalid_token"}'})
            return
        body = orjson.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": self.answer})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})


def request(
    method: str = "tools/call",
    caps: dict | None = None,
    principal: Principal = ALICE,
    **params: Any,
) -> tuple[dict, RequestContext]:
    if method == "tools/call":
        params.setdefault("name", "create_issue")
        params.setdefault("arguments", {"title": "x"})
    params["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": URL_CAPS if caps is None else caps,
    }
    raw = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    ctx = RequestContext(
        request_id=9,
        modern=True,
        principal=principal,
        client_token="the-callers-own-token",
        rpc=Message(raw),
        rpc_method=method,
        message=raw,
        body=orjson.dumps(raw),
    )
    if method == "tools/call":
        rules = FlowRules(ring=RING, audience="edge/tickets")
        ctx.flow = Flow(rules, principal_id=principal.id, method=method, params=params)
    scope = {"type": "http", "method": "POST", "headers": [], SCOPE_KEY: ctx}
    return scope, ctx


async def call(layer: ConsentLayer, scope: dict) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await layer(scope, receive, send)
    return sent[0]["status"], orjson.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def question_of(doc: dict[str, Any]) -> tuple[str, str]:
    result = doc["result"]
    assert result["resultType"] == "input_required"
    assert list(result["inputRequests"]) == [cr.CONSENT_KEY]
    params = result["inputRequests"][cr.CONSENT_KEY]["params"]
    assert params["mode"] == "url"
    return params["url"], result["requestState"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


async def test_no_grant_asks_with_a_start_link_and_nothing_goes_upstream(clock):
    member, _ = build(clock)
    upstream = Upstream()
    scope, _ = request()
    status, doc = await call(ConsentLayer(upstream, member=member), scope)
    assert status == 200 and upstream.seen == []
    url, state = question_of(doc)
    parts = urlsplit(url)
    assert (
        f"{parts.scheme}://{parts.netloc}{parts.path}"
        == "https://edge.example/.mcp-edge/consent/start"
    )
    ticket = cs.open_ticket(RING, parse_qs(parts.query)["t"][0], now=clock.now)
    assert ticket.member == MEMBER and ticket.is_for(RING, ALICE.id)
    assert ticket.call == "tools/call create_issue"
    cont = cs.open_continuation(RING, state, member=MEMBER)
    assert cont is not None and cont.consent_id == ticket.consent_id


async def test_a_client_without_url_mode_gets_the_capability_error(clock):
    member, _ = build(clock)
    upstream = Upstream()
    scope, _ = request(caps={"elicitation": {"form": {}}})
    status, doc = await call(ConsentLayer(upstream, member=member), scope)
    assert status == 400 and upstream.seen == []
    assert doc["error"]["code"] == -32021
    assert doc["error"]["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_a_client_credentials_caller_is_never_asked(clock):
    member, _ = build(clock)
    scope, _ = request(principal=SERVICE)
    status, doc = await call(ConsentLayer(Upstream(), member=member), scope)
    assert status == 400 and doc["error"]["data"] == {"reason": "consent_needs_user"}


async def test_with_a_grant_the_upstream_gets_its_token_never_the_callers(clock):
    member, _ = build(clock)
    await member.grants.put(ALICE.id, grant(clock))
    upstream = Upstream()
    scope, _ = request()
    status, doc = await call(ConsentLayer(upstream, member=member), scope)
    assert status == 200 and doc["result"]["resultType"] == "complete"
    assert [s["bearer"] for s in upstream.seen] == ["user-token"]


async def test_the_retry_resumes_the_call_as_the_round_found_it(clock):
    member, _ = build(clock)
    upstream = Upstream()
    layer = ConsentLayer(upstream, member=member)
    # The upstream's own round was in progress: its state and the client's answers to it.
    scope, _ = request(
        requestState="upstream-state-3",
        inputResponses={"q": {"action": "accept", "content": {"a": 1}}},
    )
    _, doc = await call(layer, scope)
    _, state = question_of(doc)
    await member.grants.put(ALICE.id, grant(clock))
    scope, ctx = request(requestState=state, inputResponses={cr.CONSENT_KEY: {"action": "accept"}})
    status, doc = await call(layer, scope)
    assert status == 200 and doc["result"]["resultType"] == "complete"
    (seen,) = upstream.seen
    assert seen["bearer"] == "user-token"
    assert seen["params"]["requestState"] == "upstream-state-3"
    assert seen["params"]["inputResponses"] == {"q": {"action": "accept", "content": {"a": 1}}}
    assert cr.CONSENT_KEY not in str(seen["params"])


async def test_a_declined_round_ends_the_call(clock):
    member, _ = build(clock)
    layer = ConsentLayer(Upstream(), member=member)
    _, doc = await call(layer, request()[0])
    _, state = question_of(doc)
    for action, reason in (("decline", "consent_declined"), ("cancel", "consent_cancelled")):
        scope, _ = request(requestState=state, inputResponses={cr.CONSENT_KEY: {"action": action}})
        status, doc = await call(layer, scope)
        assert status == 400 and doc["error"]["data"] == {"reason": reason}


async def test_an_unfinished_consent_asks_again_after_the_wait(clock):
    member, _ = build(clock, wait_seconds=0)
    layer = ConsentLayer(Upstream(), member=member)
    _, doc = await call(layer, request()[0])
    _, state = question_of(doc)
    scope, _ = request(requestState=state, inputResponses={cr.CONSENT_KEY: {"action": "accept"}})
    _, doc = await call(layer, scope)
    url, _ = question_of(doc)
    assert "not complete yet" in doc["result"]["inputRequests"][cr.CONSENT_KEY]["params"]["message"]


async def test_the_retry_waits_for_the_person_and_goes_on_once_granted(clock):
    member, _ = build(clock, wait_seconds=5)
    upstream = Upstream()
    layer = ConsentLayer(upstream, member=member)
    _, doc = await call(layer, request()[0])
    _, state = question_of(doc)
    scope, _ = request(requestState=state, inputResponses={cr.CONSENT_KEY: {"action": "accept"}})
    retry = asyncio.ensure_future(call(layer, scope))
    await asyncio.sleep(0.3)
    assert not retry.done() and upstream.seen == []
    await member.grants.put(ALICE.id, grant(clock))
    status, doc = await asyncio.wait_for(retry, 5)
    assert status == 200 and [s["bearer"] for s in upstream.seen] == ["user-token"]


async def test_a_denied_consent_ends_the_waiting_retry_at_once(clock):
    member, _ = build(clock, wait_seconds=30)
    layer = ConsentLayer(Upstream(), member=member)
    _, doc = await call(layer, request()[0])
    _, state = question_of(doc)
    cont = cs.open_continuation(RING, state, member=MEMBER)
    assert cont is not None
    await member.grants.record_outcome(cont.consent_id, MEMBER, DENIED)
    scope, _ = request(requestState=state, inputResponses={cr.CONSENT_KEY: {"action": "accept"}})
    status, doc = await asyncio.wait_for(call(layer, scope), 5)
    assert status == 400 and doc["error"]["data"] == {"reason": "consent_denied"}


async def test_an_upstream_401_drops_the_grant_and_asks_again(clock):
    member, _ = build(clock)
    await member.grants.put(ALICE.id, grant(clock))
    upstream = Upstream()
    upstream.refuse = True
    status, doc = await call(ConsentLayer(upstream, member=member), request()[0])
    assert status == 200 and len(upstream.seen) == 1
    question_of(doc)
    assert await member.grants.get(ALICE.id, MEMBER) is None


async def test_a_401_for_a_token_another_replica_renewed_sends_the_renewed_one_once(clock):
    """Two replicas share the store. One sends the grant's token; while it is on its way the
    other renews the grant (the token's time is up) and the server revokes the old token, as
    some do: the first one's call is refused, and goes again with the renewed token instead of
    asking the user again. The renewed one refused too: the grant is dropped and asked for."""
    one, server = build(clock)
    two, _ = build(clock, one.grants.vault)
    two.server = server  # (one authorization server)
    await one.grants.put(ALICE.id, grant(clock, token="old", expires_in=90))
    upstream = Upstream()

    async def renewed_on_the_other_replica(bearer: str | None) -> None:
        if bearer in ("old", "older") and bearer not in upstream.refused:
            clock.now += 31  # within the refresh margin now
            assert (await two.usable_grant(ALICE.id)) is not None
            upstream.refused.add(bearer)

    upstream.before_answer = renewed_on_the_other_replica
    status, doc = await call(ConsentLayer(upstream, member=one), request()[0])
    assert status == 200 and doc["result"]["resultType"] == "complete", doc
    assert [s["bearer"] for s in upstream.seen] == ["old", "renewed-1"]
    assert server.refreshes == 1
    kept = await two.grants.get(ALICE.id, MEMBER, fresh=True)
    assert kept is not None and kept.access_token == "renewed-1"

    await one.grants.put(ALICE.id, grant(clock, token="older", expires_in=90), replacing=True)
    upstream.refused = {"renewed-2"}
    upstream.seen.clear()
    status, doc = await call(ConsentLayer(upstream, member=one), request()[0])
    question_of(doc)
    assert [s["bearer"] for s in upstream.seen] == ["older", "renewed-2"]  # once, not a loop
    assert await two.grants.get(ALICE.id, MEMBER, fresh=True) is None


async def test_an_access_token_is_refreshed_before_it_expires_once_for_concurrent_calls(clock):
    member, server = build(clock, refresh_before_seconds=60)
    await member.grants.put(ALICE.id, grant(clock, token="old", expires_in=30))
    server.gate = asyncio.Event()
    upstream = Upstream()
    layer = ConsentLayer(upstream, member=member)
    calls = [asyncio.ensure_future(call(layer, request()[0])) for _ in range(5)]
    await asyncio.sleep(0.1)
    server.gate.set()
    results = await asyncio.gather(*calls)
    assert all(status == 200 for status, _ in results)
    assert server.refreshes == 1
    assert {s["bearer"] for s in upstream.seen} == {"renewed-1"}
    kept = await member.grants.get(ALICE.id, MEMBER)
    assert kept is not None and kept.access_token == "renewed-1"
    assert kept.refresh_token == "rt"  # the answer had none: the old one is kept (RFC 6749 §6)


async def test_a_grant_withdrawn_while_it_is_renewed_stays_withdrawn(clock):
    """Its user (or an operator) withdraws it while the server is renewing it: the renewal's
    tokens are not stored (that would bring the grant back), they are revoked, and the call
    asks again instead of using them."""
    member, server = build(clock, refresh_before_seconds=60)
    await member.grants.put(ALICE.id, grant(clock, token="old", expires_in=30))
    server.gate = asyncio.Event()
    upstream = Upstream()
    running = asyncio.ensure_future(call(ConsentLayer(upstream, member=member), request()[0]))
    while server.refreshes == 0:  # the renewal is at the server
        await asyncio.sleep(0.01)
    assert await member.grants.drop(ALICE.id, MEMBER)  # what the Withdraw button does
    server.gate.set()
    _, doc = await running
    question_of(doc)
    assert upstream.seen == []
    assert await member.grants.get(ALICE.id, MEMBER, fresh=True) is None
    assert server.revoked == ["rt", "renewed-1"]  # the renewal's tokens, refresh token first


async def test_a_use_recorded_after_a_withdrawal_does_not_bring_the_grant_back(clock):
    member, _ = build(clock, touch_seconds=60)
    await member.grants.put(ALICE.id, grant(clock))
    held = await member.grants.get(ALICE.id, MEMBER)  # read by a call (or another replica)
    assert held is not None
    await member.grants.drop(ALICE.id, MEMBER)
    clock.now += 120  # its last use is old enough to be written back
    assert await member.grants.used(ALICE.id, held) is None
    assert await member.grants.get(ALICE.id, MEMBER, fresh=True) is None


@pytest.mark.parametrize(
    "answer",
    [
        {"access_token": "a\r\nX-Injected: 1", "token_type": "Bearer"},  # would go in a header
        {"access_token": "a b", "token_type": "Bearer"},
        {"access_token": "t", "token_type": "DPoP"},  # not to be sent as a bearer token
        {"access_token": "t"},
        {"access_token": "t", "token_type": "Bearer", "expires_in": -5},
        {"access_token": "t", "token_type": "Bearer", "expires_in": 0},
        {"access_token": "t", "token_type": "Bearer", "expires_in": "an hour"},
        {"access_token": "t", "token_type": "Bearer", "expires_in": True},
        {"access_token": "t", "token_type": "Bearer", "expires_in": float("nan")},
    ],
)
def test_a_token_answer_that_cannot_be_used_as_given_is_no_grant(answer):
    assert grant_from_token_answer(MEMBER, answer, now=1.0e9, asked_scope="") is None


def test_a_lifetime_as_servers_give_it_a_huge_one_cut_to_ten_years():
    found = grant_from_token_answer(
        MEMBER,
        {"access_token": "t", "token_type": "bearer", "expires_in": 10**18},
        now=1.0e9,
        asked_scope="s",
    )
    assert found is not None and found.expires_at == 1.0e9 + 10 * 365 * 86400
    said = {"access_token": "t", "token_type": "Bearer", "expires_in": "3600"}  # as some servers
    found = grant_from_token_answer(MEMBER, said, now=1.0e9, asked_scope="s")
    assert found is not None and found.expires_at == 1.0e9 + 3600


async def test_a_refused_refresh_drops_the_grant_and_asks(clock):
    member, server = build(clock)
    await member.grants.put(ALICE.id, grant(clock, expires_in=10))
    server.answer = ASRefused("invalid_grant", "revoked", 400)
    upstream = Upstream()
    status, doc = await call(ConsentLayer(upstream, member=member), request()[0])
    question_of(doc)
    assert upstream.seen == [] and await member.grants.get(ALICE.id, MEMBER) is None


async def test_an_unreachable_server_uses_the_token_while_it_lasts_then_fails_closed(clock):
    member, server = build(clock)
    await member.grants.put(ALICE.id, grant(clock, expires_in=10))
    server.answer = ASUnavailable("down", "unreachable")
    upstream = Upstream()
    layer = ConsentLayer(upstream, member=member)
    status, _ = await call(layer, request()[0])
    assert status == 200 and [s["bearer"] for s in upstream.seen] == ["user-token"]
    clock.now += 20  # now expired, and still no server
    status, doc = await call(layer, request()[0])
    assert status == 503 and doc["error"]["data"] == {"reason": "consent_unavailable"}
    assert len(upstream.seen) == 1


async def test_a_list_without_a_grant_goes_as_nobodys_and_a_refusal_says_where_to_grant(clock):
    member, _ = build(clock)
    upstream = Upstream()
    status, doc = await call(ConsentLayer(upstream, member=member), request("tools/list")[0])
    # Sent without any credential or identity (never the caller's token, never anyone's)...
    assert [(s["bearer"], s["principal"]) for s in upstream.seen] == [(None, None)]
    # ...and refused by the upstream: the caller is told where to grant it.
    assert doc["error"]["code"] == -32000
    assert doc["error"]["data"] == {
        "reason": "consent_required",
        "url": "https://edge.example/.mcp-edge/consent/",
    }
    # A server that lists to anyone answers it.
    upstream.private = False
    status, doc = await call(ConsentLayer(upstream, member=member), request("tools/list")[0])
    assert status == 200 and "result" in doc
    # With a grant, the user's token.
    await member.grants.put(ALICE.id, grant(clock))
    status, doc = await call(ConsentLayer(upstream, member=member), request("tools/list")[0])
    assert status == 200 and upstream.seen[-1]["bearer"] == "user-token"


async def test_discover_without_a_grant_is_answered_for_the_member(clock):
    member, _ = build(clock)
    upstream = Upstream()
    status, doc = await call(ConsentLayer(upstream, member=member), request("server/discover")[0])
    assert status == 200
    result = doc["result"]
    assert result["supportedVersions"] == ["2026-07-28"] and result["capabilities"] == {}
    assert "https://edge.example/.mcp-edge/consent/" in result["instructions"]


async def test_a_grant_unused_for_its_idle_time_is_forgotten(clock):
    member, _ = build(clock, grant_idle_seconds=3600, touch_seconds=60)
    await member.grants.put(ALICE.id, grant(clock, expires_in=10**6))
    layer = ConsentLayer(Upstream(), member=member)
    clock.now += 3000
    status, doc = await call(layer, request()[0])
    assert doc["result"]["resultType"] == "complete"  # used: its life starts again
    clock.now += 3000
    status, doc = await call(layer, request()[0])
    assert doc["result"]["resultType"] == "complete"
    clock.now += 3601
    _, doc = await call(layer, request()[0])
    question_of(doc)


class Counting(MemoryBackend):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.gets = 0

    async def get(self, name: str) -> bytes | None:
        self.gets += 1
        return await super().get(name)


async def test_a_grant_is_kept_in_memory_briefly_and_a_withdrawal_reaches_every_replica(clock):
    backend = Counting(clock=clock)  # the store both "replicas" share
    vault = SecretVault(RING, backend, clock=clock)

    def book() -> GrantBook:
        return GrantBook(
            vault, idle_seconds=3600, touch_seconds=600, outcome_seconds=60, clock=clock,
            local_seconds=5,
        )  # fmt: skip

    one, two = book(), book()
    await one.put(ALICE.id, grant(clock))
    assert (await two.get(ALICE.id, MEMBER)) is not None
    reads = backend.gets
    for _ in range(10):  # calls within the window read no store
        assert (await two.get(ALICE.id, MEMBER)) is not None
    assert backend.gets == reads
    # Withdrawn through "one": gone there at once; on "two" once its window passed.
    await one.drop(ALICE.id, MEMBER)
    assert await one.get(ALICE.id, MEMBER) is None
    assert await two.get(ALICE.id, MEMBER) is not None
    assert await two.get(ALICE.id, MEMBER, fresh=True) is None  # what a renewal reads
    await one.put(ALICE.id, grant(clock))
    await one.drop(ALICE.id, MEMBER)
    clock.now += 5
    assert await two.get(ALICE.id, MEMBER) is None
    # Nothing is kept of a grant's absence: one given now is found at once.
    await one.put(ALICE.id, grant(clock))
    assert await two.get(ALICE.id, MEMBER) is not None
