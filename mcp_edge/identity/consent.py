"""Per-user consent in front of one member (``upstream_auth.oauth``): the caller's own grant
as the upstream's ``Authorization``, or a consent round when there is none.

:class:`ConsentMember` is the member's side of it: its authorization server, the grants, the
refresh of an access token before it expires, the round's question. :class:`ConsentLayer`, in
front of the member's app (and of its edge cache), applies it to each request:

* a call (``tools/call``, ``prompts/get``, ``resources/read``) by a principal with a usable
  grant goes on with its access token; without one it ends with the consent round (an
  InputRequiredResult asking one URL-mode elicitation, whose ``requestState`` is the
  consent's continuation: the flow middleware seals it like any upstream's state). A client
  that did not declare ``elicitation.url`` gets ``-32021`` naming it, never a question it
  cannot answer;
* the retry of a consent round (its continuation verified by the flow, at any replica): a
  declined or cancelled answer ends the call with a clear error; otherwise the grant is looked
  up (waiting up to ``consent.wait_seconds`` for the person to finish, as the client may retry
  as soon as it opened the link) and the call goes on as it was when the round interrupted it
  (the upstream's own state and answers put back); no grant yet asks again;
* the upstream refusing the token (``401`` with ``WWW-Authenticate``) drops the grant and asks
  again, as a new round, instead of passing the refusal on; unless the store holds another
  grant by then (renewed, or granted again, through another replica while this one still
  used the old token): the request is then sent once more with that one;
* any other request (lists, ``server/discover``, listen streams; 2025-era clients) cannot ask:
  with a grant it goes on with the token; without one it goes as nobody's request (no
  credential at all, never anyone else's: a server that lists its tools to anyone answers, and
  calling one asks), and when the upstream refuses that (``401``) the answer is the error
  ``consent_required`` with the address of the authorizations page, where the person can grant
  it (on a route with members the member is left out of merged lists, as a member that cannot
  answer is); ``server/discover`` gets what the gateway can say of the member instead (its
  version, no capability claimed, instructions naming that page), so a client can connect.

The caller's own token never goes upstream (the header hook sends the grant's access token
only, mcp_edge.auth.upstream); the grant's tokens never go to the client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from mcp_edge.core import envelope, mrtr
from mcp_edge.core.errors import INTERNAL_ERROR, RpcError
from mcp_edge.core.jsonrpc import dumps
from mcp_edge.core.seal import KeyRing, StateRejected, principal_tag
from mcp_edge.edge.asgi import ASGIApp, Message, Receive, Scope, Send, send_json, send_rpc_error
from mcp_edge.edge.context import SCOPE_KEY, RequestContext, get_context
from mcp_edge.identity import consent_round as cr
from mcp_edge.identity import consent_seals as cs
from mcp_edge.identity import oauth_client
from mcp_edge.identity.asclient import ASRefused, ASUnavailable, AuthorizationServer
from mcp_edge.identity.config import OAuthConfig
from mcp_edge.identity.consent_config import GRANTS_PATH, START_PATH, ConsentSection
from mcp_edge.identity.flight import SingleFlight, TooManyFlights
from mcp_edge.identity.grants import DENIED, FAILED, GRANTED, OTHER_USER, Grant, GrantBook
from mcp_edge.identity.grants import grant_from_token_answer as from_answer
from mcp_edge.identity.vault import VaultUnavailable
from mcp_edge.observability.logs import event

log = logging.getLogger("mcp_edge.identity.consent")

#: A replica refreshing a grant holds it this long at most (others wait for its result).
REFRESH_LOCK_SECONDS = 15


class NoGrant(Exception):
    """The caller has no usable grant (nothing stored, or it could not be renewed)."""


class ConsentMember:
    """One member's side of per-user consent (see the module's docstring)."""

    def __init__(
        self,
        *,
        key: str,
        name: str,
        config: OAuthConfig,
        settings: ConsentSection,
        server: AuthorizationServer | None,
        grants: GrantBook,
        spend: Any,
        ring: KeyRing,
        public_base: str,
        metrics: Any,
        clock: Callable[[], float] = time.time,
        upstream: str | None = None,
    ) -> None:
        self.key = key
        self.name = name
        self.config = config
        self.settings = settings
        #: The authorization server (None until found from the upstream's metadata).
        self.server = server
        #: The upstream's URL (where its protected-resource metadata is, without an issuer).
        self.upstream = upstream
        #: The RFC 8707 resources asked for: configured, or the upstream's metadata's.
        self.resources = list(config.resource)
        self._finding = asyncio.Lock()
        self._found_failed_at = -1e9
        self.grants = grants
        #: The single-use store's ``consume`` (the cross-replica refresh lock).
        self.spend = spend
        self.ring = ring
        self.public_base = public_base.rstrip("/")
        self.metrics = metrics
        self.clock = clock
        issuer = config.issuer or config.token_endpoint or upstream or ""
        #: The authorization server's host, as the question names it.
        self.authority = urlsplit(issuer).netloc or issuer
        self.grants_url = self.public_base + GRANTS_PATH
        self._refreshes: SingleFlight[str, Grant | None] = SingleFlight(max_keys=4096)
        self._waiting = 0
        #: The authorization endpoint, once the server's metadata named it.
        self.known_authorization_endpoint: str | None = None

    async def authorization_server(self) -> AuthorizationServer:
        """The member's authorization server: configured, or the first one its upstream's
        protected-resource metadata names (RFC 9728; found once; a failure is tried again
        after 30 s). ASUnavailable."""
        if self.server is not None:
            return self.server
        async with self._finding:
            if self.server is not None:
                return self.server
            if self.upstream is None or time.monotonic() - self._found_failed_at < 30:
                raise ASUnavailable("the upstream's authorization server is not known yet")
            from mcp_edge.identity import prm

            try:
                found = await prm.discover(
                    self.upstream,
                    timeout=self.config.timeout_seconds,
                    max_bytes=self.config.max_response_bytes,
                    allow_http=self.config.allow_http,
                )
            except ASUnavailable as exc:
                self._found_failed_at = time.monotonic()
                event(
                    logging.WARNING,
                    "consent: no authorization server found",
                    member=self.key,
                    detail=exc.detail,
                )
                raise
            section = self.config.model_copy(update={"issuer": found.authorization_server})
            self.server = AuthorizationServer(section)
            if not self.resources:
                self.resources = [found.resource]
            self.authority = urlsplit(found.authorization_server).netloc
            event(
                logging.INFO,
                "consent: authorization server found in the upstream's metadata",
                member=self.key,
                issuer=found.authorization_server,
                source=found.source,
            )
            return self.server

    # ------------------------------------------------------------------ grants

    async def usable_grant(self, principal_id: str) -> Grant | None:
        """The caller's grant, its access token good for at least ``refresh_before_seconds``
        (refreshed when it is not), or None. Raises :class:`RpcError` when the store or the
        authorization server cannot be reached and the token on hand is no longer good."""
        try:
            grant = await self.grants.get(principal_id, self.key)
            if grant is None:
                return None
            margin = self.settings.refresh_before_seconds
            if grant.usable(self.clock(), margin):
                return await self.grants.used(principal_id, grant)
            if grant.refresh_token is None:
                if grant.usable(self.clock(), 0):
                    return grant
                await self.grants.drop(principal_id, self.key)
                return None
            return await self._refreshes.run(
                principal_id, lambda: self._refresh(principal_id, grant)
            )
        except VaultUnavailable:
            self.metrics.consent_errors.labels(self.key, "store_unavailable").inc()
            raise cr.unavailable(self.name, "the grant store does not answer") from None
        except TooManyFlights:
            raise cr.unavailable(self.name, "too many renewals at once") from None

    def _lock_id(self, principal_id: str, grant: Grant) -> str:
        """One renewal per access token, across replicas: the first to spend this id renews it
        (the next token has an id of its own, so nothing needs releasing)."""
        tag = principal_tag(
            self.ring.current, f"{principal_id}\x00{self.key}\x00{grant.access_token}"
        )
        return "consent-refresh:" + tag

    async def _refresh(self, principal_id: str, grant: Grant) -> Grant | None:
        """Renew the access token (one replica at a time: a refresh token may be good once)."""
        now = self.clock()
        try:
            await self.spend(self._lock_id(principal_id, grant), int(now) + REFRESH_LOCK_SECONDS)
        except StateRejected:  # another replica renews it: take what it stores
            return await self._renewed_elsewhere(principal_id, grant)
        except RpcError:  # the single-use store is down: renew without the lock
            pass
        assert grant.refresh_token is not None
        try:
            server = await self.authorization_server()
            doc = await oauth_client.refresh(server, grant.refresh_token, resources=self.resources)
        except ASRefused as refused:
            self.metrics.refreshes.labels(self.key, "refused").inc()
            event(
                logging.INFO,
                "grant not renewed: the authorization server refused the refresh token",
                member=self.key,
                error=refused.error,
            )
            current = await self.grants.get(principal_id, self.key, fresh=True)
            if current is not None and current.access_token != grant.access_token:
                return current  # renewed meanwhile, by another replica
            await self.grants.drop(principal_id, self.key)
            return None
        except ASUnavailable as down:
            self.metrics.refreshes.labels(self.key, "unavailable").inc()
            event(logging.WARNING, "grant not renewed", member=self.key, detail=down.detail)
            if grant.usable(self.clock(), 0):
                return grant  # still good for a little while
            raise cr.unavailable(self.name, "its authorization server does not answer") from None
        renewed = from_answer(
            self.key, doc, now=self.clock(), asked_scope=" ".join(self.config.scope), previous=grant
        )
        if renewed is None:
            self.metrics.refreshes.labels(self.key, "unusable").inc()
            await self.grants.drop(principal_id, self.key)
            return None
        if not await self.grants.put(principal_id, renewed, replacing=True):
            # Withdrawn (by its user or an operator) while the server renewed it: it stays
            # withdrawn, and the tokens just issued are revoked too.
            self.metrics.refreshes.labels(self.key, "withdrawn").inc()
            event(logging.INFO, "grant withdrawn while it was renewed", member=self.key)
            await self.revoke_at_server(renewed)
            return None
        self.metrics.refreshes.labels(self.key, "ok").inc()
        return renewed

    async def _renewed_elsewhere(self, principal_id: str, grant: Grant) -> Grant | None:
        deadline = time.monotonic() + self.config.timeout_seconds + 1
        while time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            current = await self.grants.get(principal_id, self.key, fresh=True)
            if current is None:
                return None
            if current.access_token != grant.access_token:
                return current
        if grant.usable(self.clock(), 0):
            return grant
        raise cr.unavailable(self.name, "its renewal did not finish")

    async def wait_for_grant(
        self, principal_id: str, consent_id: str
    ) -> tuple[Grant | None, str | None]:
        """After an ``accept``: the grant once the person finished (within ``wait_seconds``),
        or the outcome that says they will not (``denied``, ``other_user``, ``failed``)."""
        if self.settings.wait_seconds <= 0 or self._waiting >= self.settings.max_waiting:
            return None, None
        self._waiting += 1
        try:
            deadline = time.monotonic() + self.settings.wait_seconds
            delay = 0.1
            while True:
                grant = await self.usable_grant(principal_id)
                if grant is not None:
                    return grant, GRANTED
                try:
                    outcome = await self.grants.outcome(consent_id, self.key)
                except VaultUnavailable:
                    outcome = None
                if outcome in (DENIED, OTHER_USER, FAILED):
                    return None, outcome
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, None
                await asyncio.sleep(min(delay, left))
                delay = min(delay * 2, 1.0)
        finally:
            self._waiting -= 1

    # ------------------------------------------------------------------ the round

    def ask(
        self, ctx: RequestContext, method: str, params: dict[str, Any], *, again: bool
    ) -> dict[str, Any]:
        """The consent round for this call (its continuation as ``requestState``); raises
        :class:`RpcError` when the client cannot be asked."""
        principal = ctx.principal
        assert principal is not None
        target = envelope.target_of(method, params)
        if not principal.id.startswith('["jwt-sub",'):  # what the sign-in can be compared with
            raise cr.needs_user(self.name)
        declared = (
            ctx.flow.declared if ctx.flow is not None else envelope.client_capabilities(params)
        )
        if not cr.can_ask(declared):
            self.metrics.consent_rounds.labels(self.key, "needs_url_mode").inc()
            raise cr.needs_url_mode(method, target, self.name)
        token, ticket = cs.issue_ticket(
            self.ring,
            principal_id=principal.id,
            route=self.key,
            member=self.key,
            call=cs.describe_call(method, target),
            now=self.clock(),
            ttl=self.settings.link_seconds,
        )
        responses = params.get("inputResponses")
        if isinstance(responses, dict):
            responses = {k: v for k, v in responses.items() if k != cr.CONSENT_KEY} or None
        else:
            responses = None
        upstream_state = params.get("requestState")
        state = cs.seal_continuation(
            self.ring,
            cs.Continuation(
                consent_id=ticket.consent_id,
                member=self.key,
                upstream_state=upstream_state if isinstance(upstream_state, str) else None,
                responses=responses,
                endpoint=ctx.pinned_endpoint,
            ),
        )
        if len(state) > cs.MAX_CONTINUATION_CHARS:
            raise RpcError(
                INTERNAL_ERROR,
                "The upstream's requestState is too large to carry through a consent round",
                {"violation": "state_too_large"},
            )
        question = cr.consent_question(
            url=f"{self.public_base}{START_PATH}?t={token}",
            member=self.name,
            authority=self.authority,
            method=method,
            target=target,
            again=again,
        )
        question["requestState"] = state
        self.metrics.consent_rounds.labels(self.key, "again" if again else "asked").inc()
        return question

    # ------------------------------------------------------------------ the browser's leg

    async def authorization_url(self, tx: cs.Transaction, redirect_uri: str) -> str:
        """Where the browser is sent to grant access (ASUnavailable)."""
        server = await self.authorization_server()
        meta = await server.metadata()
        endpoint = oauth_client.authorization_endpoint(meta, allow_http=self.config.allow_http)
        self.known_authorization_endpoint = endpoint
        params = oauth_client.code_request(
            tx,
            client_id=server.client_id,
            redirect_uri=redirect_uri,
            scope=self.config.scope,
            resources=self.resources,
            nonce="openid" in self.config.scope,
        )
        return oauth_client.authorization_url(endpoint, params)

    async def redeem(
        self, code: str, tx: cs.Transaction, *, iss: str | None, redirect_uri: str
    ) -> Grant:
        """The grant an authorization code gives (:class:`ConsentRefused`)."""
        try:
            server = await self.authorization_server()
            meta = await server.metadata()
            oauth_client.check_issuer_parameter(meta, meta.issuer, iss)
            doc = await oauth_client.redeem(
                server, code, tx, redirect_uri=redirect_uri, resources=self.resources
            )
        except ASRefused as refused:
            event(
                logging.INFO,
                "consent: the authorization server refused the code",
                member=self.key,
                error=refused.error,
                description=refused.description,
            )
            raise cs.ConsentRefused("failed", refused.error) from None
        except ASUnavailable as down:
            raise cs.ConsentRefused("unavailable", down.detail) from None
        grant = from_answer(
            self.key, doc, now=self.clock(), asked_scope=" ".join(self.config.scope)
        )
        if grant is None:
            raise cs.ConsentRefused("failed", "the token endpoint gave no usable bearer token")
        return grant

    async def revoke_at_server(self, grant: Grant) -> None:
        """Withdrawn: the tokens revoked at the authorization server too, when it can (RFC
        7009; best effort: the grant is deleted here whatever it answers)."""
        try:
            server = await self.authorization_server()
        except ASUnavailable:
            return
        if grant.refresh_token is not None:
            await oauth_client.revoke(server, grant.refresh_token, "refresh_token")
        await oauth_client.revoke(server, grant.access_token, "access_token")

    async def aclose(self) -> None:
        await self._refreshes.aclose()
        if self.server is not None:
            await self.server.aclose()


class _Refusal:
    """``send`` for the member's answer, holding back an answer that refuses the token: a
    ``401`` with ``WWW-Authenticate`` (HTTP members), or what an adapter that does not pass the
    status on marks as such (``ctx.upstream_challenge``: the 2025-era bridge)."""

    __slots__ = ("ctx", "refused", "send", "started")

    def __init__(self, send: Send, ctx: RequestContext) -> None:
        self.send = send
        self.ctx = ctx
        self.refused = False
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            status = message["status"]
            challenged = status == 401 and any(
                k.lower() == b"www-authenticate" for k, _ in message.get("headers", ())
            )
            if challenged or self.ctx.upstream_challenge is not None:
                self.refused = True
                return
        elif self.refused:
            return  # the refusal's body goes nowhere
        await self.send(message)


class ConsentLayer:
    """A member's app with the caller's own grant for it (see the module's docstring)."""

    __slots__ = ("app", "member")

    def __init__(self, app: ASGIApp, *, member: ConsentMember) -> None:
        self.app = app
        self.member = member

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = get_context(scope)
        if ctx.principal is None:  # the gateway's own requests (probes): no user, no token
            await self.app(scope, receive, send)
            return
        try:
            rpc = ctx.rpc
            if rpc is not None and ctx.modern and rpc.method in mrtr.MRTR_METHODS:
                await self._call(scope, receive, send, ctx)
            else:
                await self._other(scope, receive, send, ctx)
        except RpcError as err:
            await send_rpc_error(send, err, ctx.request_id)

    async def _answer(self, send: Send, ctx: RequestContext, result: dict[str, Any]) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "id": ctx.request_id, "result": result})
        await send_json(send, 200, body)

    async def _call(self, scope: Scope, receive: Receive, send: Send, ctx: RequestContext) -> None:
        member = self.member
        assert ctx.rpc is not None and ctx.principal is not None
        method, params, principal_id = ctx.rpc.method, ctx.rpc.params, ctx.principal.id
        again = False
        state = params.get("requestState")
        cont = (
            cs.open_continuation(member.ring, state, member=member.key)
            if cs.is_continuation(state)
            else None
        )
        if cont is not None:
            answer = cr.read_answer(params.get("inputResponses"))
            if answer in (cr.DECLINED, cr.CANCELLED):
                member.metrics.consent_rounds.labels(member.key, answer).inc()
                raise cr.consent_declined(member.name, answer)
            _resume(ctx, params, cont)
            grant = await member.usable_grant(principal_id)
            if grant is None and answer == cr.ACCEPTED:
                grant, outcome = await member.wait_for_grant(principal_id, cont.consent_id)
                if outcome in (DENIED, FAILED):
                    member.metrics.consent_rounds.labels(member.key, outcome).inc()
                    raise cr.consent_outcome_error(member.name, outcome)
            again = grant is None
        else:
            grant = await member.usable_grant(principal_id)
        if grant is None:
            await self._answer(send, ctx, member.ask(ctx, method, params, again=again))
            return
        if not await self._send_with(grant, scope, receive, send, ctx):
            await self._answer(send, ctx, member.ask(ctx, method, params, again=True))

    async def _other(self, scope: Scope, receive: Receive, send: Send, ctx: RequestContext) -> None:
        member = self.member
        assert ctx.principal is not None
        grant = await member.usable_grant(ctx.principal.id)
        if grant is None:
            await self._anonymous(scope, receive, send, ctx)
            return
        if not await self._send_with(grant, scope, receive, send, ctx):
            raise cr.upstream_refused_list(member.name, member.grants_url)

    async def _anonymous(
        self, scope: Scope, receive: Receive, send: Send, ctx: RequestContext
    ) -> None:
        """A request that cannot ask, from a caller without a grant: sent as nobody's (no
        credential, no identity header: a server that serves lists to anyone answers, and the
        calls then ask); a refusal is answered here: ``consent_required`` with the page to
        grant it at, and for ``server/discover`` what the gateway can say of the member."""
        member = self.member
        anonymous = dataclasses.replace(
            ctx, principal=None, client_token=None, upstream_bearer=None
        )
        inner = dict(scope)
        inner[SCOPE_KEY] = anonymous
        watch = _Refusal(send, anonymous)
        await self.app(inner, receive, watch)
        if not watch.refused:
            return
        member.metrics.consent_rounds.labels(member.key, "not_asked").inc()
        if ctx.rpc is not None and ctx.modern and ctx.rpc.method == "server/discover":
            await self._answer(send, ctx, cr.discover_without_grant(member.name, member.grants_url))
            return
        raise cr.list_needs_grant(member.name, member.grants_url)

    async def _send_with(
        self, grant: Grant, scope: Scope, receive: Receive, send: Send, ctx: RequestContext
    ) -> bool:
        """The request sent upstream with the grant's token (False: refused, nothing sent to
        the client). A refused token that the store has replaced meanwhile (renewed, or granted
        again, through another replica: the refusal is for the old one) is tried once more with
        the stored grant; a refusal of the stored token itself drops the grant."""
        assert ctx.principal is not None
        principal_id = ctx.principal.id
        if await self._forward(grant, scope, receive, send, ctx):
            return True
        replaced = await self._refused(principal_id, grant, replace=True)
        if replaced is None:
            return False
        if await self._forward(replaced, scope, receive, send, ctx):
            return True
        await self._refused(principal_id, replaced, replace=False)
        return False

    async def _forward(
        self, grant: Grant, scope: Scope, receive: Receive, send: Send, ctx: RequestContext
    ) -> bool:
        """The member's answer with the grant's token, or False when it refused the token (its
        answer held back). The request was not served when refused: it can be sent again."""
        ctx.upstream_bearer = grant.access_token
        watch = _Refusal(send, ctx)
        await self.app(scope, receive, watch)
        ctx.upstream_challenge = None
        return not watch.refused

    async def _refused(self, principal_id: str, grant: Grant, *, replace: bool) -> Grant | None:
        """The upstream refused the grant's token: it is dropped when the store still holds
        it; with ``replace``, the grant the store holds instead (renewed or granted again
        meanwhile; renewed now if it must be), or None."""
        member = self.member
        member.metrics.consent_rounds.labels(member.key, "upstream_refused").inc()
        try:
            current = await member.grants.get(principal_id, member.key, fresh=True)
            if current is not None and current.access_token == grant.access_token:
                await member.grants.drop(principal_id, member.key)
                current = None
        except VaultUnavailable:
            raise cr.unavailable(member.name, "the grant store does not answer") from None
        if replace and current is not None:
            current = await member.usable_grant(principal_id)
        if not replace or current is None or current.access_token == grant.access_token:
            event(
                logging.INFO,
                "the upstream refused a grant's token; asking again",
                member=member.key,
            )
            return None
        member.metrics.consent_rounds.labels(member.key, "replaced").inc()
        event(
            logging.INFO,
            "the upstream refused a token the store had already replaced; sending the stored one",
            member=member.key,
        )
        return current


def _resume(ctx: RequestContext, params: dict[str, Any], cont: cs.Continuation) -> None:
    """The call as it was when its consent round interrupted it: the upstream's own state and
    answers back, the consent's answer gone, the endpoint that answered before pinned."""
    cr.without_answer(params)
    params.pop("requestState", None)
    params.pop("inputResponses", None)
    if cont.upstream_state is not None:
        params["requestState"] = cont.upstream_state
    if cont.responses:
        params["inputResponses"] = cont.responses
    ctx.pinned_endpoint = cont.endpoint
    assert ctx.rpc is not None
    ctx.rewritten_body = dumps(ctx.rpc.raw)
