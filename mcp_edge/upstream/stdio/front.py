"""2025-era clients on a stdio route: a small Streamable HTTP server over the route's processes.

A process has one legacy session with the gateway; each 2025-era client gets a *virtual* session
on one process (with ``isolation: principal``, one of its own principal's: what the server keeps
for its session, such as the log level a client sets, is then that principal's alone; virtual
sessions of one principal share it): its ``initialize`` is answered from the process's own, its
requests go to the process with the bridge's unique ids, and what the process sends for a
request (the server's questions, progress, log messages, the response) comes back on that
request's SSE stream, ids mapped back. The client answers a question with a separate POST, as in 2025. The edge seals
the virtual session id like any upstream's (bound to the caller and the route).

A virtual session lives in the replica that runs its process, and its id names that replica; a
request for it that reaches another replica is relayed there as it is, its answer streamed back
(mcp_edge.cluster.relay). The replica to relay to is only ever read from a session id the edge
opened from a sealed token (``RequestContext.session_id``), never from what a client sent.
The standalone GET stream is not offered (405, which the 2025 transport allows): over stdio the
server's requests belong to a call and travel on that call's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from mcp_edge.auth.base import ANONYMOUS
from mcp_edge.cluster.relay import Relay
from mcp_edge.core import mrtr
from mcp_edge.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import (
    SSE_HEADERS,
    ASGIApp,
    Receive,
    Scope,
    Send,
    json_headers,
    send_empty,
    send_json,
    send_rpc_error,
    start_response,
)
from mcp_edge.edge.body import Reservation
from mcp_edge.edge.context import get_context
from mcp_edge.edge.responses import over_budget
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.http_session import (
    AnswerOverBudget,
    SessionGone,
    UpstreamBusy,
    UpstreamUnavailable,
)
from mcp_edge.upstream.stdio.lease import StdioSession
from mcp_edge.upstream.stdio.process import StdioInstance
from mcp_edge.upstream.stdio.processes import StdioSessions

SESSION_HEADER = b"mcp-session-id"
#: Virtual sessions kept per route at most, and how long an idle one lives.
MAX_SESSIONS = 1024
IDLE_SECONDS = 30 * 60.0


@dataclass(slots=True)
class VirtualSession:
    id: str
    instance: StdioInstance
    generation: int
    principal_id: str
    last_used: float = field(default_factory=time.monotonic)
    #: The server's pending questions: the id the client sees -> the process's request id.
    asked: dict[str, Any] = field(default_factory=dict)


def _gone(vs: VirtualSession) -> bool:
    """Its process restarted (a new session), or was stopped (idle, or made room for another
    caller): the client gets 404 and opens a new session."""
    return vs.instance.generation != vs.generation or vs.instance.state == "stopped"


class LegacyFront:
    def __init__(
        self, route: str, sessions: StdioSessions, *, owner: str = "", relay: Relay | None = None
    ) -> None:
        self.route = route
        self.sessions = sessions
        self.owner = owner
        self.relay = relay
        self.virtual: dict[str, VirtualSession] = {}

    def session_id_for(self, vs: VirtualSession) -> str:
        """What the upstream session id is to the edge (it seals it): the owning replica too."""
        return f"{vs.id}@{self.owner}" if self.owner else vs.id

    def _lookup(self, token: str | None, principal_id: str) -> VirtualSession | None:
        if token is None:
            return None
        vid = token.split("@", 1)[0]
        vs = self.virtual.get(vid)
        if vs is None or _gone(vs) or vs.principal_id != principal_id:
            return None
        vs.last_used = time.monotonic()
        return vs

    def _sweep(self) -> None:
        now = time.monotonic()
        for vid, vs in list(self.virtual.items()):
            if now - vs.last_used > IDLE_SECONDS or _gone(vs):
                del self.virtual[vid]

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        principal_id = ctx.principal.id if ctx.principal else ANONYMOUS.id
        token = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER), None
        )
        # The owning replica, from a session id a replica sealed (opened by the legacy sessions middleware); a session
        # id the client sent as it is names no replica: it can only be one of this replica's.
        sealed = ctx.session_id
        owner = sealed.split("@", 1)[1] if sealed is not None and "@" in sealed else self.owner
        if owner != self.owner and self.relay is not None:
            ctx.answered_by = ctx.session_endpoint
            await self.relay.pass_on(owner, self.route, principal_id, scope, receive, send)
            return
        method = scope["method"]
        if method == "GET":
            await send_rpc_error(
                send,
                RpcError(
                    INVALID_REQUEST,
                    "No standalone stream on this route",
                    status=405,
                    headers={"Allow": "POST, DELETE"},
                ),
            )
            return
        vs = self._lookup(token, principal_id)
        if method == "DELETE":
            if vs is not None:
                self.virtual.pop(vs.id, None)
            await send_empty(send, 200 if vs is not None else 404)
            return
        doc = ctx.message  # parsed at the edge (or, relayed, at the cluster endpoint)
        if not isinstance(doc, dict):
            await send_rpc_error(
                send, RpcError(INVALID_REQUEST, "One JSON-RPC message per POST on this route")
            )
            return
        if doc.get("method") == "initialize":
            await self._initialize(doc, principal_id, ctx, send)
            return
        if vs is None:
            error = "Session not found" if token is not None else "Bad Request: Missing session ID"
            await send_rpc_error(
                send, RpcError(INVALID_REQUEST, error, status=404 if token else 400), doc.get("id")
            )
            return
        ctx.answered_by = vs.instance.endpoint
        if "method" not in doc:  # the client's answer to one of the server's questions
            await self._answer(vs, doc, send)
        elif "id" not in doc:
            await self._notify(vs, doc, send)
        else:
            await self._request(vs, doc, send, ctx)

    async def _initialize(
        self, doc: dict[str, Any], principal_id: str, ctx: Any, send: Send
    ) -> None:
        self._sweep()
        if len(self.virtual) >= MAX_SESSIONS:
            await send_rpc_error(
                send, RpcError(INTERNAL_ERROR, "Too many sessions", status=503), doc.get("id")
            )
            return
        try:
            ready = await self.sessions.ready_for(principal_id)
        except UpstreamBusy as exc:
            await send_rpc_error(
                send,
                RpcError(
                    INTERNAL_ERROR,
                    str(exc) or "Every upstream process is busy; try again shortly",
                    {"reason": "upstream_busy"},
                    status=503,
                    headers={"Retry-After": "1"},
                ),
                doc.get("id"),
            )
            return
        except UpstreamUnavailable:
            ready = []
        if not ready:
            await send_rpc_error(
                send,
                RpcError(
                    INTERNAL_ERROR,
                    "The upstream process is not ready",
                    {"reason": "upstream_unreachable"},
                    status=502,
                ),
                doc.get("id"),
            )
            return
        instance = min(ready, key=lambda i: sum(v.instance is i for v in self.virtual.values()))
        vs = VirtualSession(secrets.token_urlsafe(18), instance, instance.generation, principal_id)
        self.virtual[vs.id] = vs
        ctx.answered_by = instance.endpoint
        body = orjson.dumps(wire.response_message(doc.get("id"), instance.init_result))
        await start_response(
            send,
            200,
            json_headers(len(body), [(SESSION_HEADER, self.session_id_for(vs).encode("latin-1"))]),
        )
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, vs: VirtualSession, doc: dict[str, Any], send: Send) -> None:
        upstream_id = vs.asked.pop(str(doc.get("id")), None)
        if upstream_id is None:
            await send_empty(send, 404)
            return
        message = {k: v for k, v in doc.items() if k != "id"}
        with contextlib.suppress(UpstreamUnavailable):
            await vs.instance.write({**message, "id": upstream_id})
        await send_empty(send, 202)

    async def _notify(self, vs: VirtualSession, doc: dict[str, Any], send: Send) -> None:
        if doc.get("method") == "notifications/cancelled":
            await send_empty(
                send, 202
            )  # mapped ids are per request: a cancel is the stream closing
            return
        if doc.get("method") != "notifications/initialized":
            with contextlib.suppress(UpstreamUnavailable):
                await vs.instance.write(doc)
        await send_empty(send, 202)

    async def _request(self, vs: VirtualSession, doc: dict[str, Any], send: Send, ctx: Any) -> None:
        client_id = doc.get("id")
        if doc.get("method") == "ping":
            await _json(send, wire.response_message(client_id, {}))
            return
        may_ask = doc.get("method") in mrtr.MRTR_METHODS
        session = StdioSession(vs.instance, exclusive=may_ask)
        # What the process wrote for this request and waits to be relayed (kind ``bridge``).
        held = Reservation(self.sessions.budget, kind="bridge")
        try:
            await self._relay_request(vs, doc, send, session, held)
        finally:
            held.release()

    async def _relay_request(
        self,
        vs: VirtualSession,
        doc: dict[str, Any],
        send: Send,
        session: StdioSession,
        held: Reservation,
    ) -> None:
        client_id = doc.get("id")
        may_ask = session.exclusive
        try:
            if may_ask:
                await self._lease(vs.instance, session)
            call_id = wire.new_id()
            stream = await session.request({**doc, "id": call_id}, held)
        except (UpstreamBusy, SessionGone, UpstreamUnavailable, TimeoutError) as exc:
            session.release_lease()
            reason = (
                "upstream_busy"
                if isinstance(exc, (UpstreamBusy, TimeoutError))
                else "upstream_exited"
            )
            await send_rpc_error(
                send,
                RpcError(
                    INTERNAL_ERROR,
                    "The upstream process cannot take this request now",
                    {"reason": reason},
                    status=503,
                ),
                client_id,
            )
            return
        await start_response(send, 200, list(SSE_HEADERS))
        try:
            while True:
                try:
                    item = await stream.next()
                except (UpstreamUnavailable, AnswerOverBudget) as exc:
                    error = (
                        over_budget()
                        if isinstance(exc, AnswerOverBudget)
                        else RpcError(
                            INTERNAL_ERROR,
                            "The upstream process exited",
                            {"reason": "upstream_exited"},
                        )
                    )
                    await send(
                        {"type": "http.response.body", "body": encode_event(error.body(client_id))}
                    )
                    return
                if item is None:
                    return
                message = item[1]
                incoming = wire.classify(message)
                if isinstance(incoming, wire.Response):
                    final = {**message, "id": client_id}
                    await send(
                        {"type": "http.response.body", "body": encode_event(orjson.dumps(final))}
                    )
                    return
                if isinstance(incoming, wire.ServerRequest):
                    shown = f"q-{secrets.token_hex(6)}"
                    vs.asked[shown] = incoming.id
                    message = {**message, "id": shown}
                await send(
                    {
                        "type": "http.response.body",
                        "body": encode_event(orjson.dumps(message)),
                        "more_body": True,
                    }
                )
        finally:
            stream.close()
            session.release_lease()

    async def _lease(self, instance: StdioInstance, session: StdioSession) -> None:
        """Wait (bounded) for the process's lease: one call that may ask at a time."""
        async with asyncio.timeout(self.sessions.spec.acquire_timeout):
            while instance.lease is not None:
                await instance.lease_freed.wait()
        if instance.state != "ready":
            raise SessionGone
        instance.lease = session
        instance.lease_freed.clear()


class StdioRoute:
    """A stdio route's inner app: 2026-07-28 requests to the bridge, 2025-era ones to the front."""

    def __init__(self, bridge: ASGIApp, front: LegacyFront) -> None:
        self.bridge = bridge
        self.front = front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if get_context(scope).modern:
            await self.bridge(scope, receive, send)
        else:
            await self.front(scope, receive, send)


async def _json(send: Send, message: dict[str, Any]) -> None:
    await send_json(send, 200, orjson.dumps(message))
