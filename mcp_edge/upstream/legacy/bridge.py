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
import logging
from typing import Any

from mcp_edge.auth.base import ANONYMOUS
from mcp_edge.cluster.forward import Forwarder
from mcp_edge.core import envelope, mrtr
from mcp_edge.core.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, RpcError
from mcp_edge.edge.asgi import Receive, Scope, Send, send_empty
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.edge.context import RequestContext, get_context
from mcp_edge.edge.draining import Draining
from mcp_edge.edge.responses import over_budget
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.calls import Calls
from mcp_edge.upstream.legacy.continuation import Continuation
from mcp_edge.upstream.legacy.failures import flow_lost
from mcp_edge.upstream.legacy.http_session import (
    AnswerOverBudget,
    SessionGone,
    UpstreamBusy,
    UpstreamRefused,
    UpstreamUnavailable,
)
from mcp_edge.upstream.legacy.listen import Listening
from mcp_edge.upstream.legacy.parking import ParkingLot
from mcp_edge.upstream.legacy.request import BridgeRequest, HeaderHook
from mcp_edge.upstream.legacy.sessions import Sessions
from mcp_edge.upstream.legacy.settings import BridgeSettings
from mcp_edge.upstream.legacy.writer import BufferWriter, Writer

#: Request headers that travel from the client to the legacy server (trace context).
_PASSED_HEADERS = (b"traceparent", b"tracestate")


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
        answer_budget: AnswerBudget | None = None,
    ) -> None:
        self.s = settings
        #: The process's answer budget, which what the bridge holds of an answer draws from.
        self.answer_budget = answer_budget
        self.sessions = sessions
        #: The process's graceful shutdown, which ends listen streams (None: they never end).
        self.draining = draining
        self.header_hook = header_hook
        self.parking = parking if parking is not None else ParkingLot()  # an empty lot is falsy
        self.forwarder = forwarder
        self.metrics = metrics or Metrics()
        self.metrics.parked.labels(settings.route).set(len(self.parking))  # exported from the start
        self._tasks: set[asyncio.Task[Any]] = set()
        self.calls = Calls(
            settings,
            sessions=sessions,
            parking=self.parking,
            forwarder=forwarder,
            metrics=self.metrics,
            background=self._background,
            answer_budget=answer_budget,
        )
        self.listening = Listening(
            sessions=sessions, draining=draining, background=self._background
        )

    # ------------------------------------------------------------------ ASGI

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ctx = get_context(scope)
        doc = ctx.message  # parsed and checked at the edge (and its MRTR fields verified)
        if "id" not in doc:  # 2026-07-28 has no client notifications over HTTP that matter here
            await send_empty(send, 202)
            return
        reservation = Reservation(self.answer_budget, kind="bridge")
        writer = Writer(send, doc["id"], reservation)
        params = doc.get("params") if isinstance(doc.get("params"), dict) else {}
        extra = list(self.header_hook(ctx)) if self.header_hook else []
        extra += [
            (k.decode(), v.decode("latin-1")) for k, v in scope["headers"] if k in _PASSED_HEADERS
        ]
        req = BridgeRequest(
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
            reservation=reservation,
        )
        try:
            await self._serve_until_disconnect(req, receive)
        finally:
            reservation.release()

    async def _serve_until_disconnect(self, req: BridgeRequest, receive: Receive) -> None:
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

    async def serve(self, req: BridgeRequest) -> None:
        try:
            if req.method not in wire.BRIDGED_METHODS:
                await req.writer.error(
                    RpcError(METHOD_NOT_FOUND, "Method not found", {"method": req.method})
                )
            elif req.method in mrtr.MRTR_METHODS:
                await self.calls.call(req)
            elif req.method == "subscriptions/listen":
                await self.listening.serve(req)
            else:
                await self.calls.one_shot(req)
        except AnswerOverBudget:
            self.metrics.answer_refused.labels(self.s.route, "answer_budget").inc()
            event(
                logging.WARNING,
                "answer refused: answer budget spent",
                route=self.s.route,
                method=req.method,
            )
            await req.writer.error(over_budget())
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
                flow_lost("upstream_session_gone", "The upstream session ended; try again")
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

    async def serve_forwarded(
        self, payload: dict[str, Any], collected: Reservation
    ) -> dict[str, Any]:
        """A retry forwarded by another replica for a call parked here (the payload was sealed by
        a holder of the key ring, and its state verified by that replica's flow middleware).

        What this replica holds of the answer draws from the answer budget as kind
        ``forwarded``: the parked call's stream as it is read, then the answer collected in
        ``collected``, which the caller keeps until it has sent the answer on."""
        params = payload.get("params")
        if not isinstance(params, dict):
            return {"lost": True}
        cont = Continuation.decode(params.get("requestState"))
        if cont is None or cont.strategy != "park" or cont.owner != self.s.advertise_url:
            return {"lost": True}
        reading = Reservation(self.answer_budget, kind="forwarded")
        writer = BufferWriter(payload.get("id"), reading, collected)
        method = str(payload.get("method"))
        req = BridgeRequest(
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
            reservation=reading,
        )
        try:
            await self.serve(req)
        finally:
            reading.release()
        return writer.reply()

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
