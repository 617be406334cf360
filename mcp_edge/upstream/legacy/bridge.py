"""The legacy bridge: 2026-07-28 requests served by an unmodified 2025-era server.

An inner ASGI app behind the edge middlewares, like the HTTP proxy. To the edge it is a 2026-07-28
upstream: it answers ``server/discover``, lists and calls with 2026-07-28 results, and when the
legacy server asks the client something mid-call it answers with an InputRequiredResult whose
``requestState`` is the bridge's own continuation, which the flow middleware seals. On the retry, at any
replica, the continuation comes back verified and the call goes on by one of three strategies:

* **resume**: the upstream has an event store; post the answer into the upstream session and
  resume the call's stream with ``GET`` + ``Last-Event-ID``;
* **park**: the replica that got the question holds the call open; a retry arriving elsewhere is
  forwarded (sealed) to that replica;
* **replay**: re-run the call in a fresh session, answering the questions asked before from the
  recorded answers, as long as they are the same questions.

A question is the call's only when the server sent it for the call (on the call's own stream);
what the server sends on its own is answered by the bridge and never reaches the client, and no
request is answered twice (see :mod:`mcp_edge.upstream.legacy.driver`). ``subscriptions/listen``
is served from a legacy session held for the stream's lifetime (see
:mod:`mcp_edge.upstream.legacy.subscriptions`), and ended without a response when the process
begins draining (mcp_edge.edge.draining): the client listens again, elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from mcp_edge.auth.base import ANONYMOUS
from mcp_edge.cluster.forward import Forwarder
from mcp_edge.core import capabilities as caps
from mcp_edge.core import envelope, mrtr
from mcp_edge.core.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RpcError,
)
from mcp_edge.core.sse import encode_event
from mcp_edge.edge.asgi import (
    SSE_HEADERS,
    Receive,
    Scope,
    Send,
    json_headers,
    send_empty,
    start_response,
)
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.draining import Draining
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import subscriptions, wire
from mcp_edge.upstream.legacy.call import UpstreamCall
from mcp_edge.upstream.legacy.continuation import RERUN, Continuation, Pending
from mcp_edge.upstream.legacy.driver import Belongs, Ended, Final, Questions, drive, on_own_stream
from mcp_edge.upstream.legacy.http_session import (
    ResumedStream,
    SessionGone,
    UpstreamBusy,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcp_edge.upstream.legacy.parking import ParkedCall, ParkingLot, abandon
from mcp_edge.upstream.legacy.sessions import Caller, Feed, PoolKey, Sessions, key_digest

DEFAULT_STRATEGIES = ("resume", "park")
#: Request headers that travel from the client to the legacy server (trace context).
_PASSED_HEADERS = (b"traceparent", b"tracestate")
#: A listen stream with nothing to say sends an SSE comment this often (idle proxies and load
#: balancers close silent connections).
LISTEN_KEEPALIVE = 15.0


@dataclass(slots=True)
class BridgeSettings:
    route: str
    #: Strategies in order of preference, for calls without an override.
    strategies: Sequence[str] = DEFAULT_STRATEGIES
    tool_strategies: dict[str, Sequence[str]] = field(default_factory=dict)
    prompt_strategies: dict[str, Sequence[str]] = field(default_factory=dict)
    #: How long a parked call waits for its answer (well under the state TTL).
    park_seconds: float = 120.0
    #: A server in JSON-response mode cannot send a question mid-call; an MRTR-capable call
    #: that has not answered after this long is ended with an error saying so.
    json_response_timeout: float = 30.0
    max_event_bytes: int = 16 * 1024 * 1024
    #: Largest continuation the flow middleware will carry (it seals it as the upstream's state).
    max_state_chars: int = 128 * 1024
    #: This replica's own address, put in the sealed state of parked calls.
    advertise_url: str | None = None
    #: After a question, how long to listen for more asked at the same time (one round for all).
    question_window: float = 0.02

    def strategies_for(self, method: str, target: str | None) -> Sequence[str]:
        if target is not None:
            if method == "tools/call" and target in self.tool_strategies:
                return self.tool_strategies[target]
            if method == "prompts/get" and target in self.prompt_strategies:
                return self.prompt_strategies[target]
        return self.strategies


def _flow_lost(reason: str, message: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": reason}, status=502)


def _cannot_ask(message: str) -> RpcError:
    return RpcError(INTERNAL_ERROR, message, {"reason": "upstream_cannot_ask"})


class Writer:
    """The answer to one client request: JSON, or SSE once a notification must be relayed."""

    def __init__(self, send: Send, request_id: Any) -> None:
        self._send = send
        self.request_id = request_id
        self._sse = False
        self.done = False

    async def notify(self, message: dict[str, Any]) -> None:
        if self.done:
            return
        if not self._sse:
            self._sse = True
            await start_response(self._send, 200, list(SSE_HEADERS))
        await self._send(
            {
                "type": "http.response.body",
                "body": encode_event(orjson.dumps(message)),
                "more_body": True,
            }
        )

    async def message(
        self, message: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        if self.done:
            return
        self.done = True
        body = orjson.dumps(message)
        if self._sse:
            await self._send(
                {"type": "http.response.body", "body": encode_event(body), "more_body": False}
            )
            return
        extra = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()
        ]
        await start_response(self._send, status, json_headers(len(body), extra))
        await self._send({"type": "http.response.body", "body": body})

    async def result(self, result: dict[str, Any]) -> None:
        await self.message({"jsonrpc": "2.0", "id": self.request_id, "result": result})

    async def comment(self) -> None:
        """An SSE comment: keeps a quiet stream's connection alive."""
        if not self.done and self._sse:
            await self._send(
                {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
            )

    async def abort(self) -> None:
        """End an SSE answer without a response: an abrupt close (the client may ask again)."""
        if self.done:
            return
        self.done = True
        if self._sse:
            await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def error(self, err: RpcError) -> None:
        await self.message(err.to_response(self.request_id), err.http_status, err.headers)

    async def raw(self, status: int, content_type: str, body: bytes) -> None:
        """A whole answer made elsewhere (by the replica holding a parked call)."""
        if self.done:
            return
        self.done = True
        if self._sse:  # notifications already went out: the answer's events follow them
            await self._send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await start_response(
            self._send,
            status,
            [
                (b"content-type", content_type.encode("latin-1")),
                (b"content-length", b"%d" % len(body)),
            ],
        )
        await self._send({"type": "http.response.body", "body": body})


class BufferWriter(Writer):
    """Collects an answer instead of sending it (a forwarded retry, answered to the forwarder)."""

    def __init__(self, request_id: Any) -> None:
        self.parts: list[bytes] = []
        self.status = 200
        self.content_type = "application/json"
        super().__init__(self._collect, request_id)

    async def _collect(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            for k, v in message["headers"]:
                if k == b"content-type":
                    self.content_type = v.decode("latin-1")
        else:
            self.parts.append(message.get("body", b""))

    def reply(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "ctype": self.content_type,
            "body": b"".join(self.parts).decode(),
        }


@dataclass(slots=True)
class _Request:
    """One client request as the bridge works on it."""

    method: str
    params: dict[str, Any]
    principal_id: str
    declared: dict[str, Any]
    headers: list[tuple[str, str]]
    writer: Writer
    ctx: RequestContext
    target: str | None = None
    progress: str | int | None = None
    log_level: str | None = None
    #: The progress token the upstream call carries (the bridge's own, unique per upstream
    #: call): its notifications reach the client under this request's ``progress`` token, in
    #: whichever round they come.
    upstream_progress: str | None = None

    @property
    def caller(self) -> Caller:
        return Caller(
            principal_id=self.principal_id,
            capabilities=wire.session_capabilities(self.declared),
            client_info=wire.client_info(self.params),
            log_level=self.log_level,
            headers=tuple(self.headers),
        )

    async def relay(self, note: wire.Notification) -> None:
        """Progress and log notifications reach the client only when it asked for them."""
        if note.method == "notifications/progress":
            if (
                self.progress is not None
                and self.upstream_progress is not None
                and note.params.get("progressToken") == self.upstream_progress
            ):
                params = {**note.params, "progressToken": self.progress}
                await self.writer.notify(
                    {"jsonrpc": "2.0", "method": note.method, "params": params}
                )
        elif note.method == "notifications/message" and self.log_level is not None:
            await self.writer.notify(
                {"jsonrpc": "2.0", "method": note.method, "params": note.params}
            )


HeaderHook = Callable[[RequestContext], Sequence[tuple[str, str]]]


class LegacyBridge:
    """ASGI app serving one route's 2026-07-28 requests from its legacy upstream."""

    def __init__(
        self,
        settings: BridgeSettings,
        *,
        sessions: Sessions,
        header_hook: HeaderHook | None = None,
        parking: ParkingLot | None = None,
        forwarder: Forwarder | None = None,
        metrics: Metrics | None = None,
        draining: Draining | None = None,
    ) -> None:
        self.s = settings
        self.sessions = sessions
        #: The process's graceful shutdown, which ends listen streams (None: they never end).
        self.draining = draining
        self.header_hook = header_hook
        self.parking = parking if parking is not None else ParkingLot()  # an empty lot is falsy
        self.forwarder = forwarder
        self.metrics = metrics or Metrics()
        self.metrics.parked.labels(settings.route).set(len(self.parking))  # exported from the start
        self._warned: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        doc = ctx.message  # parsed and checked at the edge (and its MRTR fields verified)
        if "id" not in doc:  # 2026-07-28 has no client notifications over HTTP that matter here
            await send_empty(send, 202)
            return
        writer = Writer(send, doc["id"])
        params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
        extra = list(self.header_hook(ctx)) if self.header_hook else []
        extra += [
            (k.decode(), v.decode("latin-1")) for k, v in scope["headers"] if k in _PASSED_HEADERS
        ]
        req = _Request(
            method=doc["method"],
            params=params,
            principal_id=ctx.principal.id if ctx.principal else ANONYMOUS.id,
            declared=envelope.client_capabilities(params),
            headers=extra,
            writer=writer,
            ctx=ctx,
            target=envelope.target_of(doc["method"], params),
            progress=wire.progress_token(params),
            log_level=wire.log_level(params),
        )
        await self._serve_until_disconnect(req, receive)

    async def _serve_until_disconnect(self, req: _Request, receive: Receive) -> None:
        """In 2026-07-28 a client that goes away cancels its request: so does the bridge."""
        task = asyncio.current_task()
        gone = asyncio.Event()

        async def watch() -> None:
            while True:
                if (await receive())["type"] == "http.disconnect":
                    if not req.writer.done and task is not None:
                        gone.set()
                        task.cancel()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await self.serve(req)
        except asyncio.CancelledError:
            if not gone.is_set():
                raise
        finally:
            watcher.cancel()

    async def serve(self, req: _Request) -> None:
        try:
            if req.method not in wire.BRIDGED_METHODS:
                await req.writer.error(
                    RpcError(METHOD_NOT_FOUND, "Method not found", {"method": req.method})
                )
            elif req.method in mrtr.MRTR_METHODS:
                await self._call(req)
            elif req.method == "subscriptions/listen":
                await self._listen(req)
            else:
                await self._one_shot(req)
        except UpstreamBusy as exc:
            self._upstream_error("busy")
            await req.writer.error(
                RpcError(
                    INTERNAL_ERROR,
                    str(exc)
                    or "Every upstream process is busy with calls awaiting answers; try again shortly",
                    {"reason": "upstream_busy"},
                    status=503,
                    headers={"Retry-After": "1"},
                )
            )
        except UpstreamUnavailable as exc:
            self._upstream_error(exc.kind)
            if exc.kind == "exited":
                await req.writer.error(
                    RpcError(
                        INTERNAL_ERROR,
                        "The upstream process exited during the call; "
                        "it is being restarted, try again",
                        {"reason": "upstream_exited"},
                        status=502,
                    )
                )
            elif exc.kind == "timeout":
                await req.writer.error(
                    RpcError(
                        INTERNAL_ERROR,
                        "Upstream timed out",
                        {"reason": "upstream_timeout"},
                        status=504,
                    )
                )
            else:
                await req.writer.error(
                    RpcError(
                        INTERNAL_ERROR,
                        "Upstream unreachable",
                        {"reason": "upstream_unreachable"},
                        status=502,
                    )
                )
        except SessionGone:
            self._upstream_error("session_gone")
            await req.writer.error(
                _flow_lost("upstream_session_gone", "The upstream session ended; try again")
            )
        except UpstreamRefused as exc:
            self._upstream_error("refused")
            # The credential was refused: upstream identity (its layer) asks again.
            if exc.challenge is not None:
                req.ctx.upstream_challenge = exc.challenge
            await req.writer.error(
                RpcError(
                    INTERNAL_ERROR,
                    f"Upstream refused the request: {exc}",
                    {"reason": "upstream_error", "status": exc.status},
                    status=502,
                )
            )

    def _upstream_error(self, kind: str) -> None:
        self.metrics.upstream_errors.labels(self.s.route, kind).inc()
        event(logging.WARNING, "legacy upstream error", route=self.s.route, kind=kind)

    # ------------------------------------------------------------------ sessions

    async def _request(
        self, req: _Request, message: dict[str, Any], *, side: bool = False
    ) -> tuple[PoolKey | None, Any, Any]:
        """Send ``message`` in a session for this caller (a pooled one the upstream has forgotten
        is replaced once). ``side``: a call that may ask the client something (listen on the
        session's standalone stream first)."""
        for attempt in (1, 2):
            key, session, reused = await self.sessions.acquire(req.caller, req.ctx, for_call=side)
            try:
                if side:
                    await session.open_side()
                if side and session.json_mode:  # the answer's headers come only when the call ends
                    async with asyncio.timeout(self.s.json_response_timeout):
                        return key, session, await session.request(message)
                return key, session, await session.request(message)
            except SessionGone:
                self.sessions.discard(session)
                if attempt == 2 or not reused:
                    raise
            except BaseException:
                self.sessions.discard(session)
                raise
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ one-shot methods

    async def _one_shot(self, req: _Request) -> None:
        if req.method == "server/discover":
            key, session, _ = await self.sessions.acquire(req.caller, req.ctx, for_call=False)
            self.sessions.release(key, session)
            await req.writer.result(wire.discover_result(session.init_result))
            return
        call_id = wire.new_id()
        key, session, stream = await self._request(req, self._upstream_request(req, call_id))
        call = UpstreamCall(session, stream, call_id)
        try:
            outcome = await drive(
                call,
                session,
                call_id,
                on_notification=req.relay,
                questions_allowed=False,
                **self._triage(req, session, []),
            )
        except BaseException:
            call.close()
            self.sessions.discard(session)
            raise
        call.close()
        if isinstance(outcome, Final):
            self.sessions.release(key, session)
            await self._final(req, outcome, session)
        else:
            self.sessions.discard(session)
            await req.writer.error(
                _flow_lost("upstream_ended", "The upstream ended the stream without answering")
            )

    async def _final(self, req: _Request, outcome: Final, session: Any) -> None:
        response = outcome.response
        if response.error is not None:
            urls = (
                wire.url_elicitations(response.error) if req.method in mrtr.MRTR_METHODS else None
            )
            if urls is not None and caps.covers(req.declared, {"elicitation": {"url": {}}}):
                await self._ask_urls(req, urls, session.endpoint)
                return
            code, message, data = wire.modern_error(response.error)
            await req.writer.error(RpcError(code, message, data))
            return
        assert response.result is not None
        await req.writer.result(
            wire.complete_result(req.method, response.result, session.server_info)
        )

    def _upstream_request(self, req: _Request, call_id: str) -> dict[str, Any]:
        """The request the legacy server gets: its progress token (if the client sent one) is
        the call's own id, which every round maps back to the token of the client's request."""
        token = call_id if req.progress is not None else None
        req.upstream_progress = token
        params = wire.upstream_params_with_token(req.params, token)
        return wire.request_message(call_id, req.method, params)

    def _triage(self, req: _Request, session: Any, history: list[list[Any]]) -> dict[str, Any]:
        """How the driver tells this call's questions from the requests the bridge answers
        itself, and what it answers them with (on behalf of this request's client)."""
        declared = req.caller.capabilities
        roots = wire.roots_given(history)

        def unsolicited(request: wire.ServerRequest) -> dict[str, Any]:
            return wire.unsolicited_answer(request, declared, roots)

        belongs: Belongs = on_own_stream
        if not getattr(session, "ties_requests", True):
            # Nothing on a stdio process's wire names the call a request is for. Servers ask for
            # roots on their own (after initialize, after a roots change): a roots/list this
            # request did not declare is answered as the server's own (the client has no roots,
            # which is true whoever asked), never turned into -32021 for this call.
            def belongs(request: wire.ServerRequest, from_side: bool) -> bool:
                return not from_side and (
                    request.method != "roots/list" or isinstance(declared.get("roots"), dict)
                )

        return {"unsolicited": unsolicited, "belongs": belongs}

    async def _ask_urls(self, req: _Request, urls: list[dict[str, Any]], endpoint: str) -> None:
        """A legacy ``-32042``: the call is over, so the client visits the URLs and the retry
        makes the call again."""
        questions = {f"url-{i}": q for i, q in enumerate(urls, 1)}
        cont = Continuation(strategy=RERUN, questions=questions, pending=[], endpoint=endpoint)
        await req.writer.result(
            {
                "resultType": "input_required",
                "inputRequests": questions,
                "requestState": cont.encode(),
            }
        )

    # ------------------------------------------------------------------ MRTR methods

    async def _call(self, req: _Request) -> None:
        if "requestState" not in req.params:
            await self._start(req, history=[], replay=False, asked=0)
            return
        cont = Continuation.decode(req.params["requestState"])
        if cont is None:
            await req.writer.error(
                RpcError(
                    INVALID_PARAMS,
                    "This requestState was not issued for this upstream; restart the call",
                    {"reason": "binding"},
                )
            )
            return
        await self._continue(req, cont)

    async def _start(
        self, req: _Request, *, history: list[list[Any]], replay: bool, asked: int
    ) -> None:
        """Make the call in a (pooled) session; ``replay``: answer the questions asked before
        from ``history``."""
        call_id = wire.new_id()
        try:
            key, session, stream = await self._request(
                req, self._upstream_request(req, call_id), side=True
            )
        except TimeoutError:
            await req.writer.error(self._json_mode_error())
            return
        call = UpstreamCall(session, stream, call_id)
        await self._round(req, call, history=history, replay=replay, asked=asked, pool_key=key)

    async def _round(
        self,
        req: _Request,
        call: UpstreamCall,
        *,
        history: list[list[Any]],
        replay: bool,
        asked: int,
        pool_key: tuple[str, ...] | None = None,
        answered: set[str] | None = None,
    ) -> None:
        """Read the call until it needs the client or ends, and answer the client accordingly.

        ``pool_key``: the session came from the pool for this round and goes back to it if the
        call completes without a question; once a question is asked it belongs to the call.
        ``answered``: the server's requests already answered or asked in this call's session."""
        strategies = self.s.strategies_for(req.method, req.target)
        session = call.session
        handled = set() if answered is None else answered
        try:
            reading = drive(
                call,
                session,
                call.call_id,
                on_notification=req.relay,
                recorded=history if replay else None,
                window=self.s.question_window,
                answered=handled,
                **self._triage(req, session, history),
            )
            if session.json_mode:
                async with asyncio.timeout(self.s.json_response_timeout):
                    outcome = await reading
            else:
                outcome = await reading
        except TimeoutError:
            self._background(abandon(call, "no answer"))
            await req.writer.error(self._json_mode_error())
            return
        except BaseException:
            self._background(abandon(call, "request ended"))
            raise
        if isinstance(outcome, Final):
            call.close()
            if pool_key is not None:
                self.sessions.release(pool_key, session)
            else:
                self._background(session.close())
            if asked:
                self.metrics.bridge_flows.labels(self.s.route, "-", "completed").inc()
            await self._final(req, outcome, session)
            return
        if isinstance(outcome, Ended):
            self._background(abandon(call, "stream ended"))
            await req.writer.error(
                _flow_lost("upstream_ended", "The upstream ended the stream without answering")
            )
            return
        # What the next round's continuation carries: the answers given so far in this call.
        answers = outcome.used if replay else history
        await self._ask(
            req,
            call,
            outcome,
            answers=answers,
            asked=asked,
            strategies=strategies,
            pool_key=pool_key,
            answered=handled,
        )

    async def _ask(
        self,
        req: _Request,
        call: UpstreamCall,
        qs: Questions,
        *,
        answers: list[list[Any]],
        asked: int,
        strategies: Sequence[str],
        pool_key: tuple[str, ...] | None,
        answered: set[str],
    ) -> None:
        """The server asked something: end this round with an InputRequiredResult."""
        session = call.session
        need: dict[str, Any] = {}
        for q in qs.asked:
            required = caps.required_for(q.request.method, q.input_request.get("params") or {})
            if not caps.covers(req.declared, required):
                caps.merge(need, required)
        if need:
            self._background(abandon(call, "client cannot answer"))
            await req.writer.error(
                RpcError(
                    MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "The upstream needs a client capability this request did not declare",
                    {"requiredCapabilities": need},
                )
            )
            return
        if session.stateless:
            self._background(abandon(call, "no session"))
            await req.writer.error(
                _cannot_ask(
                    f"The upstream runs without sessions (stateless_http) and cannot receive the answer to its "
                    f"{qs.asked[0].request.method}; run it with sessions to use mid-call questions through the gateway"
                )
            )
            return
        strategy = self._pick(strategies, call)
        questions: dict[str, Any] = {}
        pending: list[Pending] = []
        for i, q in enumerate(qs.asked, asked + 1):
            key = f"{q.request.method.split('/')[0]}-{i}"
            questions[key] = q.input_request
            pending.append(Pending(key, q.request.id, q.fingerprint, q.from_side))
        cont = Continuation(
            strategy=strategy,
            questions=questions,
            pending=pending,
            endpoint=session.endpoint,
            fallback="replay" in strategies,
            asked=asked + len(pending),
            answers=answers,
        )
        if strategy in ("resume", "park"):
            cont.session_id, cont.version, cont.call_id = (
                session.session_id,
                session.version,
                call.call_id,
            )
            if pool_key is not None:
                cont.pool_key = key_digest(pool_key)
            cont.answered = sorted(answered)
        if strategy == "resume":
            cont.server_info = session.server_info
            cont.last_event_id = call.main.consumed_id
            cont.side_event_id = session.side.consumed_id if session.side is not None else None
        elif strategy == "park":
            cont.owner = self.s.advertise_url
            cont.ticket = "-" * 24  # the size check below counts a ticket
        if len(cont.encode()) > self.s.max_state_chars:
            self._background(abandon(call, "state too large"))
            await req.writer.error(
                RpcError(
                    INTERNAL_ERROR,
                    "This call's recorded answers outgrew the state limit; it cannot go on",
                    {"reason": "state_too_large"},
                )
            )
            return
        if strategy == "resume":
            # A legacy disconnect is not a cancellation: the server keeps the call and its events.
            call.close()
            session.drop_side()
        elif strategy == "park":
            parked = ParkedCall(route=self.s.route, principal_id=req.principal_id, call=call)
            cont.ticket = self.parking.park(parked, self.s.park_seconds)
            self.sessions.suspend(session)
            self.metrics.parked.labels(self.s.route).set(len(self.parking))
        else:
            self._background(abandon(call, "asking the client (replay)"))
        self.metrics.bridge_flows.labels(self.s.route, strategy, "asked").inc()
        await req.writer.result(
            {
                "resultType": "input_required",
                "inputRequests": questions,
                "requestState": cont.encode(),
            }
        )

    def _json_mode_error(self) -> RpcError:
        return _cannot_ask(
            f"The upstream answers in JSON-response mode and has not answered within "
            f"{self.s.json_response_timeout:g} s; such a server cannot deliver a question asked "
            "mid-call (json_response), so a tool that asks one never finishes"
        )

    def _pick(self, strategies: Sequence[str], call: UpstreamCall) -> str:
        """The first strategy in the route's order that this call can use now."""
        for strategy in strategies:
            if strategy == "resume" and call.resumable:
                return strategy
            if strategy == "park" and self.s.advertise_url and not self.parking.full:
                return strategy
            if strategy == "replay":
                return strategy
        if "resume" in strategies and "resume" not in self._warned:
            self._warned.add("resume")
            event(
                logging.WARNING,
                "resume is not possible with this upstream (its streams carry no event "
                "ids: it has no event store); the call is parked instead",
                route=self.s.route,
            )
        return "park"  # parking on this replica alone still works when nothing else can

    async def _continue(self, req: _Request, cont: Continuation) -> None:
        if cont.strategy == RERUN:
            await self._start(req, history=[], replay=False, asked=0)
            return
        responses = req.params.get("inputResponses")
        responses = responses if isinstance(responses, dict) else {}
        given: list[tuple[Pending, dict[str, Any]]] = []
        for p in cont.pending:
            answer = responses.get(p.key)
            question = cont.questions.get(p.key) or {}
            if not wire.answer_is_valid(str(question.get("method")), answer):
                # Missing or malformed: ask again (the call is still waiting for the answers).
                await req.writer.result(
                    {
                        "resultType": "input_required",
                        "inputRequests": cont.questions,
                        "requestState": cont.encode(),
                    }
                )
                return
            assert isinstance(answer, dict)
            given.append((p, answer))
        history = [*cont.answers, *([p.fingerprint, answer] for p, answer in given)]
        if cont.strategy == "replay":
            await self._start(req, history=history, replay=True, asked=cont.asked)
        elif cont.strategy == "resume":
            await self._resume(req, cont, given, history)
        else:
            await self._unpark(req, cont, given, history)

    async def _answer(self, session: Any, given: list[tuple[Pending, dict[str, Any]]]) -> None:
        for p, answer in given:
            await session.post(wire.response_message(p.request_id, wire.legacy_answer(answer)))

    async def _resume(
        self,
        req: _Request,
        cont: Continuation,
        given: list[tuple[Pending, dict[str, Any]]],
        history: list[list[Any]],
    ) -> None:
        assert cont.last_event_id is not None and cont.call_id is not None
        session = self.sessions.reattach(cont.endpoint, req.caller, cont.session_id, cont.version)
        if session is None:
            await self._lost(
                req,
                cont,
                history,
                "flow_lost",
                "This call cannot be resumed here; restart the call",
            )
            return
        if cont.server_info is not None:
            session.init_result = {"serverInfo": cont.server_info}
        try:
            # Listen first: what the server sends on its standalone stream after the answers
            # must find a listener.
            await session.open_side(cont.side_event_id, busy_wait=2.0)
            await self._answer(session, given)
            stream = ResumedStream(session, await session.resume(cont.last_event_id))
        except SessionGone:
            await self._lost(
                req,
                cont,
                history,
                "upstream_session_gone",
                "The upstream session holding this call has expired (the server's idle timeout); restart the call",
            )
            return
        except UpstreamUnavailable:
            await self._lost(
                req,
                cont,
                history,
                "upstream_unreachable",
                "The upstream holding this call cannot be reached; restart the call",
            )
            return
        self.metrics.bridge_flows.labels(self.s.route, "resume", "continued").inc()
        call = UpstreamCall(session, stream, cont.call_id)
        req.upstream_progress = cont.call_id
        await self._round(
            req,
            call,
            history=history,
            replay=False,
            asked=cont.asked,
            answered=set(cont.answered),
        )

    async def _unpark(
        self,
        req: _Request,
        cont: Continuation,
        given: list[tuple[Pending, dict[str, Any]]],
        history: list[list[Any]],
    ) -> None:
        if cont.owner != self.s.advertise_url:
            await self._forward(req, cont, history)
            return
        parked = self.parking.take(cont.ticket)
        self.metrics.parked.labels(self.s.route).set(len(self.parking))
        if (
            parked is None
            or parked.route != self.s.route
            or not hmac.compare_digest(parked.principal_id.encode(), req.principal_id.encode())
        ):
            await self._lost(
                req,
                cont,
                history,
                "flow_lost",
                "This call is no longer waiting (it waited too long, or its replica restarted); restart the call",
            )
            return
        try:
            await self.sessions.reacquire(parked.call.session)
        except UpstreamBusy:
            # Still waiting: it stays parked under the same ticket, the client may try again.
            self.parking.park(parked, self.s.park_seconds)
            self.metrics.parked.labels(self.s.route).set(len(self.parking))
            raise
        except (SessionGone, UpstreamUnavailable):
            self._background(abandon(parked.call, "process gone"))
            await self._lost(
                req,
                cont,
                history,
                "upstream_session_gone",
                "The upstream process holding this call has ended; restart the call",
            )
            return
        try:
            await self._answer(parked.call.session, given)
        except (SessionGone, UpstreamUnavailable):
            self._background(abandon(parked.call, "answer failed"))
            await self._lost(
                req,
                cont,
                history,
                "upstream_session_gone",
                "The upstream session holding this call has ended; restart the call",
            )
            return
        self.metrics.bridge_flows.labels(self.s.route, "park", "continued").inc()
        req.upstream_progress = parked.call.call_id
        await self._round(
            req,
            parked.call,
            history=history,
            replay=False,
            asked=cont.asked,
            pool_key=self.sessions.reuse_key(req.caller, cont.endpoint, cont.pool_key),
            answered=set(cont.answered),
        )

    async def _forward(self, req: _Request, cont: Continuation, history: list[list[Any]]) -> None:
        """The call is parked on another replica: hand it the (already verified) retry."""
        reply = None
        if self.forwarder is not None and cont.owner:
            reply = await self.forwarder.forward(
                cont.owner,
                {
                    "route": self.s.route,
                    "principal": req.principal_id,
                    "id": req.writer.request_id,
                    "method": req.method,
                    "params": req.params,
                },
            )
        if reply is None or reply.get("lost"):
            self.metrics.forwards.labels(self.s.route, "lost").inc()
            await self._lost(
                req,
                cont,
                history,
                "flow_lost",
                "The gateway replica holding this call is gone; restart the call",
            )
            return
        self.metrics.forwards.labels(self.s.route, "ok").inc()
        await req.writer.raw(int(reply["status"]), str(reply["ctype"]), str(reply["body"]).encode())

    async def serve_forwarded(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A retry forwarded by another replica for a call parked here (the payload was sealed by
        a holder of the key ring, and its state verified by that replica's flow middleware)."""
        params = payload.get("params")
        if not isinstance(params, dict):
            return {"lost": True}
        cont = Continuation.decode(params.get("requestState"))
        if cont is None or cont.strategy != "park" or cont.owner != self.s.advertise_url:
            return {"lost": True}
        writer = BufferWriter(payload.get("id"))
        method = str(payload.get("method"))
        req = _Request(
            method=method,
            params=params,
            principal_id=str(payload.get("principal")),
            declared=envelope.client_capabilities(params),
            headers=[],
            writer=writer,
            ctx=RequestContext(),
            target=envelope.target_of(method, params),
            progress=wire.progress_token(params),
            log_level=wire.log_level(params),
        )
        await self.serve(req)
        return writer.reply()

    async def _lost(
        self, req: _Request, cont: Continuation, history: list[list[Any]], reason: str, message: str
    ) -> None:
        """The call cannot go on where it was: re-run it where the route allows, else say so."""
        if cont.fallback:
            self.metrics.bridge_flows.labels(self.s.route, cont.strategy, "replayed").inc()
            event(
                logging.INFO, "bridged call lost; replaying it", route=self.s.route, reason=reason
            )
            await self._start(req, history=history, replay=True, asked=cont.asked)
            return
        self.metrics.bridge_flows.labels(self.s.route, cont.strategy, "lost").inc()
        event(logging.INFO, "bridged call lost", route=self.s.route, reason=reason)
        await req.writer.error(_flow_lost(reason, message))

    # ------------------------------------------------------------------ subscriptions/listen

    async def _listen(self, req: _Request) -> None:
        """A listen stream, fed by a legacy session (or the route's processes) held for as
        long as the client listens: acknowledged with what the server can deliver, then every
        notification of those kinds, tagged; ended abruptly when the upstream goes away or the
        process drains (the client listens again), gracefully when nothing can ever come."""
        feed = await self.sessions.listen(req.caller, req.ctx)
        try:
            capabilities = feed.capabilities
            if not subscriptions.offered(capabilities):
                # Neither advertised (server/discover) nor served: as for any method without use.
                await req.writer.error(
                    RpcError(METHOD_NOT_FOUND, "Method not found", {"method": req.method})
                )
                return
            flags, uris = subscriptions.honored(subscriptions.requested(req.params), capabilities)
            if subscriptions.delivers(flags, uris) and not await feed.open():
                flags, uris = {}, []  # no standalone stream on this server: nothing can come
            accepted = [uri for uri in uris if await feed.subscribe(uri)]
            sid = req.writer.request_id
            await req.writer.notify(subscriptions.acknowledgement(flags, accepted, sid))
            if not subscriptions.delivers(flags, accepted):
                await req.writer.result(subscriptions.closing(sid, feed.server_info))
                return
            await self._relay_listen(req, feed, flags, accepted)
        finally:
            self._background(feed.close())

    async def _relay_listen(
        self, req: _Request, feed: Feed, flags: dict[str, Any], uris: list[str]
    ) -> None:
        sid = req.writer.request_id
        declared = req.caller.capabilities
        answered: set[str] = set()
        reading: asyncio.Future[Any] | None = None
        drained = self.draining.future() if self.draining is not None else None
        try:
            while True:
                if reading is None:
                    reading = asyncio.ensure_future(feed.next())
                waits: list[asyncio.Future[Any]] = [reading]
                if drained is not None:
                    waits.append(drained)
                await asyncio.wait(
                    waits, timeout=LISTEN_KEEPALIVE, return_when=asyncio.FIRST_COMPLETED
                )
                if not reading.done():
                    if drained is not None and drained.done():
                        await req.writer.abort()
                        return
                    await req.writer.comment()
                    continue
                read, reading = reading, None
                try:
                    message = read.result()
                except (UpstreamUnavailable, SessionGone, UpstreamRefused):
                    message = None
                if message is None:
                    await req.writer.abort()
                    return
                incoming = wire.classify(message)
                if isinstance(incoming, wire.Notification):
                    note = subscriptions.event(incoming, flags, uris, sid)
                    if note is not None:
                        await req.writer.notify(note)
                elif isinstance(incoming, wire.ServerRequest):
                    key = wire.request_key(incoming.id)
                    if key not in answered:
                        answered.add(key)
                        with contextlib.suppress(UpstreamUnavailable, SessionGone, UpstreamRefused):
                            await feed.post(wire.unsolicited_answer(incoming, declared, None))
        finally:
            if reading is not None:
                reading.cancel()

    # ------------------------------------------------------------------ housekeeping

    def _background(self, coro: Any) -> None:
        """Clean-up that must not delay the client's answer (DELETE, cancellations)."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        await self.sessions.aclose()
        if self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(list(self._tasks), timeout=10.0)
