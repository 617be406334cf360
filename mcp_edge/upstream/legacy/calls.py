"""A bridged request made upstream and read until it ends or needs the client: one-shot methods
in a pooled session, and the rounds of the three methods that may ask (``tools/call``,
``prompts/get``, ``resources/read``); a question hands the call to the strategies
(:mod:`mcp_edge.upstream.legacy.strategies`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from mcp_edge.cluster.forward import Forwarder
from mcp_edge.core import capabilities as caps
from mcp_edge.core import mrtr
from mcp_edge.core.errors import INVALID_PARAMS, RpcError
from mcp_edge.edge.body import AnswerBudget
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.call import UpstreamCall
from mcp_edge.upstream.legacy.continuation import Continuation
from mcp_edge.upstream.legacy.driver import HANDED_ON, Ended, Final, drive
from mcp_edge.upstream.legacy.failures import cannot_ask, flow_lost
from mcp_edge.upstream.legacy.http_session import NotSent, SessionGone
from mcp_edge.upstream.legacy.parking import ParkingLot, abandon
from mcp_edge.upstream.legacy.questions import ask_urls, triage
from mcp_edge.upstream.legacy.request import BridgeRequest
from mcp_edge.upstream.legacy.sessions import PoolKey, Sessions
from mcp_edge.upstream.legacy.settings import BridgeSettings
from mcp_edge.upstream.legacy.strategies import Strategies


class Calls:
    def __init__(
        self,
        settings: BridgeSettings,
        *,
        sessions: Sessions,
        parking: ParkingLot,
        forwarder: Forwarder | None,
        metrics: Metrics,
        background: Callable[[Any], None],
        answer_budget: AnswerBudget | None = None,
    ) -> None:
        self.s = settings
        self.sessions = sessions
        self.metrics = metrics
        self.background = background
        self.strategies = Strategies(
            settings,
            sessions=sessions,
            parking=parking,
            forwarder=forwarder,
            metrics=metrics,
            rounds=self,
            background=background,
            answer_budget=answer_budget,
        )

    # ------------------------------------------------------------------ sessions

    async def request(
        self, req: BridgeRequest, message: dict[str, Any], *, side: bool = False
    ) -> tuple[PoolKey | None, Any, Any]:
        """Send ``message`` in a session for this caller (a pooled one the upstream has forgotten
        is replaced once). ``side``: a call that may ask the client something (listen on the
        session's standalone stream first)."""
        for attempt in (1, 2):
            key, session, reused = await self.sessions.acquire(req.caller, req.ctx, for_call=side)
            try:
                if side:
                    await session.open_side(attach=True)
                if side and session.json_mode:  # the answer's headers come only when the call ends
                    async with asyncio.timeout(self.s.json_response_timeout):
                        return key, session, await session.request(message, req.reservation)
                return key, session, await session.request(message, req.reservation)
            except SessionGone as exc:
                # Forgotten by the upstream (a pooled session), or never sent (a local server's
                # process gone): once more, in a session of a live one.
                session.end_questions()
                self.sessions.discard(session)
                if attempt == 2 or not (reused or isinstance(exc, NotSent)):
                    raise
            except BaseException:
                session.end_questions()
                self.sessions.discard(session)
                raise
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ one-shot methods

    async def one_shot(self, req: BridgeRequest) -> None:
        if req.method == "server/discover":
            key, session, _ = await self.sessions.acquire(req.caller, req.ctx, for_call=False)
            self.sessions.release(key, session)
            await req.writer.result(wire.discover_result(session.init_result))
            return
        call_id = wire.new_id()
        key, session, stream = await self.request(req, self.upstream_request(req, call_id))
        call = UpstreamCall(session, stream, call_id)
        try:
            outcome = await drive(
                call,
                session,
                call_id,
                on_notification=req.relay,
                questions_allowed=False,
                **triage(req, session, []),
            )
        except BaseException:
            call.close()
            self.sessions.discard(session)
            raise
        call.close()
        if isinstance(outcome, Final):
            self.sessions.release(key, session)
            await self.final(req, outcome, session)
        else:
            self.sessions.discard(session)
            await req.writer.error(
                flow_lost("upstream_ended", "The upstream ended the stream without answering")
            )

    async def final(self, req: BridgeRequest, outcome: Final, session: Any) -> None:
        response = outcome.response
        outcome.response = HANDED_ON  # nothing but the client's answer keeps it from here on
        if response.error is not None:
            urls = (
                wire.url_elicitations(response.error) if req.method in mrtr.MRTR_METHODS else None
            )
            if urls is not None and caps.covers(req.declared, {"elicitation": {"url": {}}}):
                await ask_urls(req, urls, session.endpoint)
                return
            code, message, data = wire.modern_error(response.error)
            await req.writer.error(RpcError(code, message, data))
            return
        assert response.result is not None
        body = req.writer.encode_result(
            wire.complete_result(req.method, response.result, session.server_info)
        )
        del response  # (a large answer is then held once, as the JSON the client gets)
        await req.writer.encoded(body)

    def upstream_request(self, req: BridgeRequest, call_id: str) -> dict[str, Any]:
        """The request the legacy server gets: its progress token (if the client sent one) is
        the call's own id, which every round maps back to the token of the client's request."""
        token = call_id if req.progress is not None else None
        req.upstream_progress = token
        params = wire.upstream_params_with_token(req.params, token)
        return wire.request_message(call_id, req.method, params)

    # ------------------------------------------------------------------ MRTR methods

    async def call(self, req: BridgeRequest) -> None:
        if "requestState" not in req.params:
            await self.start(req, history=[], replay=False, asked=0)
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
        await self.strategies.continue_(req, cont)

    async def start(
        self, req: BridgeRequest, *, history: list[list[Any]], replay: bool, asked: int
    ) -> None:
        """Make the call in a (pooled) session; ``replay``: answer the questions asked before
        from ``history``."""
        call_id = wire.new_id()
        try:
            key, session, stream = await self.request(
                req, self.upstream_request(req, call_id), side=True
            )
        except TimeoutError:
            await req.writer.error(self.json_mode_error())
            return
        call = UpstreamCall(session, stream, call_id, asks=True)
        await self.round(req, call, history=history, replay=replay, asked=asked, pool_key=key)

    async def round(
        self,
        req: BridgeRequest,
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
        # What the call's stream holds of its answer counts in this request's share of the
        # answer budget (a parked call's stream, read again for its retry, too).
        call.main.reservation = req.reservation
        session = call.session
        # The session's own record (what its standalone stream answered between calls too),
        # with what this call's sealed state carried.
        handled: set[str] = session.answered
        if answered:
            handled.update(answered)
        try:
            reading = drive(
                call,
                session,
                call.call_id,
                on_notification=req.relay,
                recorded=history if replay else None,
                window=self.s.question_window,
                answered=handled,
                **triage(req, session, history),
            )
            if session.json_mode:
                async with asyncio.timeout(self.s.json_response_timeout):
                    outcome = await reading
            else:
                outcome = await reading
        except TimeoutError:
            self.background(abandon(call, "no answer"))
            await req.writer.error(self.json_mode_error())
            return
        except BaseException:
            self.background(abandon(call, "request ended"))
            raise
        if isinstance(outcome, Final):
            call.close()
            if pool_key is not None:
                self.sessions.release(pool_key, session)
            else:
                self.background(session.close())
            if asked:
                self.metrics.bridge_flows.labels(self.s.route, "-", "completed").inc()
            await self.final(req, outcome, session)
            return
        if isinstance(outcome, Ended):
            self.background(abandon(call, "stream ended"))
            await req.writer.error(
                flow_lost("upstream_ended", "The upstream ended the stream without answering")
            )
            return
        # What the next round's continuation carries: the answers given so far in this call.
        answers = outcome.used if replay else history
        await self.strategies.ask(
            req,
            call,
            outcome,
            answers=answers,
            asked=asked,
            strategies=strategies,
            pool_key=pool_key,
            answered=handled,
        )

    def json_mode_error(self) -> RpcError:
        return cannot_ask(
            f"The upstream answers in JSON-response mode and has not answered within "
            f"{self.s.json_response_timeout:g} s; such a server cannot deliver a question asked "
            "mid-call (json_response), so a tool that asks one never finishes"
        )
