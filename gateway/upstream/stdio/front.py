"""2025-era clients on a stdio route: a small Streamable HTTP server over the shared processes.

A process has one legacy session with the gateway; each 2025-era client gets a *virtual* session
on one process: its ``initialize`` is answered from the process's own, its requests go to the
process with the bridge's unique ids, and what the process sends for a request (the server's
questions, progress, log messages, the response) comes back on that request's SSE stream, ids
mapped back. The client answers a question with a separate POST, as in 2025. The edge guard seals
the virtual session id like any upstream's (bound to the caller and the route).

A virtual session lives in the replica that runs its process, and its id names that replica; a
request for it that reaches another replica is relayed there as it is, its answer streamed back.
The replica to relay to is only ever read from a session id the guard opened from a sealed token
(``EdgeContext.session_id``), never from what a client sent. The relayed request carries the
route, the caller and its session id in a header sealed with the key ring and bound to its
method, path and body (``gateway.core.peer``), as forwarded MRTR retries do.
The standalone GET stream is not offered (405, which the 2025 transport allows): over stdio the
server's requests belong to a call and travel on that call's stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.auth.base import ANONYMOUS
from gateway.upstream.legacy import wire
from gateway.upstream.legacy.http_session import SessionGone, UpstreamUnavailable
from gateway.upstream.stdio.processes import StdioInstance, StdioSession, StdioSessions, UpstreamBusy
from gateway.core import mrtr, peer
from gateway.core.errors import INTERNAL_ERROR, INVALID_REQUEST, RpcError
from gateway.core.seal import KeyRing
from gateway.core.sse import encode_event
from gateway.edge.asgi import ASGIApp, Receive, Scope, Send, read_body, send_rpc_error
from gateway.edge.context import get_context
from gateway.cluster.gate import REFUSED_HEADER

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


class LegacyFront:
    def __init__(self, route: str, sessions: StdioSessions, *, owner: str = "",
                 relay: Relay | None = None) -> None:  # fmt: skip
        self.route = route
        self.sessions = sessions
        self.owner = owner
        self.relay = relay
        self.virtual: dict[str, VirtualSession] = {}

    def session_id_for(self, vs: VirtualSession) -> str:
        """What the upstream session id is to the guard (it seals it): the owning replica too."""
        return f"{vs.id}@{self.owner}" if self.owner else vs.id

    def _lookup(self, token: str | None, principal_id: str) -> VirtualSession | None:
        if token is None:
            return None
        vid = token.split("@", 1)[0]
        vs = self.virtual.get(vid)
        if vs is None or vs.instance.generation != vs.generation or vs.principal_id != principal_id:
            return None
        vs.last_used = time.monotonic()
        return vs

    def _sweep(self) -> None:
        now = time.monotonic()
        for vid, vs in list(self.virtual.items()):
            if now - vs.last_used > IDLE_SECONDS or vs.instance.generation != vs.generation:
                del self.virtual[vid]

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        principal_id = ctx.principal.id if ctx.principal else ANONYMOUS.id
        token = next((v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER), None)
        # The owning replica, from a session id a replica sealed (opened by the guard); a session
        # id the client sent as it is names no replica: it can only be one of this replica's.
        sealed = ctx.session_id
        owner = sealed.split("@", 1)[1] if sealed is not None and "@" in sealed else self.owner
        if owner != self.owner and self.relay is not None:
            ctx.answered_by = ctx.session_endpoint
            await self.relay.pass_on(owner, self.route, principal_id, scope, receive, send)
            return
        method = scope["method"]
        if method == "GET":
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "No standalone stream on this route",
                                                status=405, headers={"Allow": "POST, DELETE"}))  # fmt: skip
            return
        vs = self._lookup(token, principal_id)
        if method == "DELETE":
            if vs is not None:
                self.virtual.pop(vs.id, None)
            await _empty(send, 200 if vs is not None else 404)
            return
        body = await read_body(receive)
        if body is None:
            return
        doc = orjson.loads(body) if body.strip() else None  # the guard has parsed it already
        if not isinstance(doc, dict):
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "One JSON-RPC message per POST on this route"))
            return
        if doc.get("method") == "initialize":
            await self._initialize(doc, principal_id, ctx, send)
            return
        if vs is None:
            error = "Session not found" if token is not None else "Bad Request: Missing session ID"
            await send_rpc_error(send, RpcError(INVALID_REQUEST, error, status=404 if token else 400), doc.get("id"))
            return
        ctx.answered_by = vs.instance.endpoint
        if "method" not in doc:  # the client's answer to one of the server's questions
            await self._answer(vs, doc, send)
        elif "id" not in doc:
            await self._notify(vs, doc, send)
        else:
            await self._request(vs, doc, send, ctx)

    async def _initialize(self, doc: dict[str, Any], principal_id: str, ctx: Any, send: Send) -> None:
        self._sweep()
        if len(self.virtual) >= MAX_SESSIONS:
            await send_rpc_error(send, RpcError(INTERNAL_ERROR, "Too many sessions", status=503), doc.get("id"))
            return
        ready = [i for i in self.sessions.instances if i.state == "ready"]
        if not ready:
            await send_rpc_error(send, RpcError(INTERNAL_ERROR, "The upstream process is not ready",
                                                {"reason": "upstream_unreachable"}, status=502), doc.get("id"))  # fmt: skip
            return
        instance = min(ready, key=lambda i: sum(v.instance is i for v in self.virtual.values()))
        vs = VirtualSession(secrets.token_urlsafe(18), instance, instance.generation, principal_id)
        self.virtual[vs.id] = vs
        ctx.answered_by = instance.endpoint
        body = orjson.dumps(wire.response_message(doc.get("id"), instance.init_result))
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (SESSION_HEADER, self.session_id_for(vs).encode("latin-1"))]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    async def _answer(self, vs: VirtualSession, doc: dict[str, Any], send: Send) -> None:
        upstream_id = vs.asked.pop(str(doc.get("id")), None)
        if upstream_id is None:
            await _empty(send, 404)
            return
        message = {k: v for k, v in doc.items() if k != "id"}
        with contextlib.suppress(UpstreamUnavailable):
            await vs.instance.write({**message, "id": upstream_id})
        await _empty(send, 202)

    async def _notify(self, vs: VirtualSession, doc: dict[str, Any], send: Send) -> None:
        if doc.get("method") == "notifications/cancelled":
            await _empty(send, 202)  # mapped ids are per request: a cancel is the stream closing
            return
        if doc.get("method") != "notifications/initialized":
            with contextlib.suppress(UpstreamUnavailable):
                await vs.instance.write(doc)
        await _empty(send, 202)

    async def _request(self, vs: VirtualSession, doc: dict[str, Any], send: Send, ctx: Any) -> None:
        client_id = doc.get("id")
        if doc.get("method") == "ping":
            await _json(send, wire.response_message(client_id, {}))
            return
        may_ask = doc.get("method") in mrtr.MRTR_METHODS
        session = StdioSession(vs.instance, exclusive=may_ask)
        try:
            if may_ask:
                await self._lease(vs.instance, session)
            call_id = wire.new_id()
            stream = await session.request({**doc, "id": call_id})
        except (UpstreamBusy, SessionGone, UpstreamUnavailable, TimeoutError) as exc:
            session.release_lease()
            reason = "upstream_busy" if isinstance(exc, (UpstreamBusy, TimeoutError)) else "upstream_exited"
            await send_rpc_error(send, RpcError(INTERNAL_ERROR, "The upstream process cannot take this request now",
                                                {"reason": reason}, status=503), client_id)  # fmt: skip
            return
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
            (b"x-accel-buffering", b"no")]})  # fmt: skip
        try:
            while True:
                try:
                    item = await stream.next()
                except UpstreamUnavailable:
                    error = RpcError(INTERNAL_ERROR, "The upstream process exited", {"reason": "upstream_exited"})
                    await send({"type": "http.response.body", "body": encode_event(error.body(client_id))})
                    return
                if item is None:
                    return
                message = item[1]
                incoming = wire.classify(message)
                if isinstance(incoming, wire.Response):
                    final = {**message, "id": client_id}
                    await send({"type": "http.response.body", "body": encode_event(orjson.dumps(final))})
                    return
                if isinstance(incoming, wire.ServerRequest):
                    shown = f"q-{secrets.token_hex(6)}"
                    vs.asked[shown] = incoming.id
                    message = {**message, "id": shown}
                await send({"type": "http.response.body", "body": encode_event(orjson.dumps(message)),
                            "more_body": True})  # fmt: skip
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


async def _empty(send: Send, status: int) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"0")]})
    await send({"type": "http.response.body", "body": b""})


async def _json(send: Send, message: dict[str, Any]) -> None:
    body = orjson.dumps(message)
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


RELAY_PATH = "/.mcp-edge/legacy"
#: Methods a relayed request may have (the 2025 transport's).
RELAY_METHODS = frozenset({"POST", "GET", "DELETE"})
#: Request headers a relayed 2025-era request keeps (the rest is the gateway's business).
_RELAYED_REQUEST_HEADERS = frozenset({"accept", "content-type", "mcp-session-id", "mcp-protocol-version",
                                      "last-event-id"})  # fmt: skip
_RELAYED_RESPONSE_HEADERS = frozenset({"content-type", "mcp-session-id", "cache-control", "allow",
                                       "x-accel-buffering"})  # fmt: skip


def relay_claims(route: str, principal_id: str, session_id: str | None) -> dict[str, Any]:
    """What a relayed request's sealed header says besides its method, path and body."""
    return {"r": route, "p": principal_id, "s": session_id}


class Relay:
    """Passes a 2025-era request for a virtual session to the replica that holds it, and streams
    its answer back byte for byte (an SSE stream with the server's questions included)."""

    def __init__(self, ring: KeyRing, client: Callable[[], aiohttp.ClientSession], *,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.ring = ring
        self._client = client
        self.clock = clock

    async def pass_on(self, owner: str, route: str, principal_id: str, scope: Scope, receive: Receive,
                      send: Send) -> None:  # fmt: skip
        method = scope["method"]
        body = await read_body(receive) if method == "POST" else b""
        if body is None:
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]
                   if k.decode("latin-1") in _RELAYED_REQUEST_HEADERS}  # fmt: skip
        claims = relay_claims(route, principal_id, headers.get("mcp-session-id"))
        headers[peer.HEADER] = peer.seal_message(self.ring, peer.RELAY, claims, method=method, path=RELAY_PATH,
                                                 body=body, now=self.clock())  # fmt: skip
        try:
            async with self._client().request(
                method, owner.rstrip("/") + RELAY_PATH, data=body if method == "POST" else None, headers=headers,
                allow_redirects=False, timeout=aiohttp.ClientTimeout(total=None, connect=5.0, sock_read=None),
            ) as response:  # fmt: skip
                if response.headers.get(REFUSED_HEADER) is not None:
                    await self._refused(response.status, send, get_context(scope).request_id)
                    return
                out = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()
                       if k.lower() in _RELAYED_RESPONSE_HEADERS]  # fmt: skip
                await send({"type": "http.response.start", "status": response.status, "headers": out})
                async for chunk in response.content.iter_any():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError):
            # The replica holding the session is gone: the client starts a new session.
            await send_rpc_error(send, RpcError(INVALID_REQUEST, "Session not found", status=404))

    @staticmethod
    async def _refused(status: int, send: Send, request_id: Any) -> None:
        """The replica holding the session refused the relayed request itself (gateway.cluster.gate)."""
        if status == 503:  # its body budget: the client may try again shortly
            error = RpcError(INTERNAL_ERROR, "The gateway is holding as many request bodies as it may; retry shortly",
                             {"reason": "body_budget"}, status=503, headers={"Retry-After": "1"})  # fmt: skip
        else:
            error = RpcError(INTERNAL_ERROR, "The gateway replica holding this session refused the relayed request",
                             {"reason": "relay_refused"}, status=502)  # fmt: skip
        await send_rpc_error(send, error, request_id)
