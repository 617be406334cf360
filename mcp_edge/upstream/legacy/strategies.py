"""How a bridged call goes on after a question (the route's strategies, see README.md here):
the round ends with an InputRequiredResult whose continuation says where the call waits
(:meth:`Strategies.ask`), and the retry continues it there (:meth:`Strategies.continue_`):

* **resume**: post the answers into the upstream session and resume the call's stream with
  ``GET`` + ``Last-Event-ID`` (any replica);
* **park**: the replica that got the question holds the call open; a retry arriving elsewhere is
  forwarded (sealed) to that replica;
* **replay**: re-run the call in a fresh session, answering the questions asked before from the
  recorded answers, as long as they are the same questions.

A call that cannot go on where it was is replayed where the route allows it, else the client is
told to restart it (``flow_lost``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from mcp_edge.cluster.forward import Forwarder, ReplyOverBudget
from mcp_edge.core import capabilities as caps
from mcp_edge.core.errors import INTERNAL_ERROR, MISSING_REQUIRED_CLIENT_CAPABILITY, RpcError
from mcp_edge.edge.body import AnswerBudget, Reservation
from mcp_edge.observability.logs import event
from mcp_edge.observability.metrics import Metrics
from mcp_edge.upstream.legacy import wire
from mcp_edge.upstream.legacy.call import UpstreamCall
from mcp_edge.upstream.legacy.continuation import RERUN, Continuation, Pending
from mcp_edge.upstream.legacy.driver import Questions
from mcp_edge.upstream.legacy.failures import cannot_ask, flow_lost
from mcp_edge.upstream.legacy.http_session import (
    AnswerOverBudget,
    ResumedStream,
    SessionGone,
    UpstreamBusy,
    UpstreamUnavailable,
)
from mcp_edge.upstream.legacy.parking import ParkedCall, ParkingLot, abandon
from mcp_edge.upstream.legacy.request import BridgeRequest
from mcp_edge.upstream.legacy.sessions import Sessions, key_digest
from mcp_edge.upstream.legacy.settings import BridgeSettings


class Rounds(Protocol):
    """What the strategies go on with: a call made afresh, or read on from where it waits."""

    async def start(
        self, req: BridgeRequest, *, history: list[list[Any]], replay: bool, asked: int
    ) -> None: ...

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
    ) -> None: ...


class Strategies:
    def __init__(
        self,
        settings: BridgeSettings,
        *,
        sessions: Sessions,
        parking: ParkingLot,
        forwarder: Forwarder | None,
        metrics: Metrics,
        rounds: Rounds,
        background: Callable[[Any], None],
        answer_budget: AnswerBudget | None = None,
    ) -> None:
        self.s = settings
        #: The process's answer pool (what is held of a forwarded retry's answer draws from it).
        self.answer_budget = answer_budget
        self.sessions = sessions
        self.parking = parking
        self.forwarder = forwarder
        self.metrics = metrics
        self.rounds = rounds
        self.background = background
        self._warned: set[str] = set()

    async def ask(
        self,
        req: BridgeRequest,
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
            self.background(abandon(call, "client cannot answer"))
            await req.writer.error(
                RpcError(
                    MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "The upstream needs a client capability this request did not declare",
                    {"requiredCapabilities": need},
                )
            )
            return
        if session.stateless:
            self.background(abandon(call, "no session"))
            await req.writer.error(
                cannot_ask(
                    f"The upstream runs without sessions (stateless_http) and cannot receive the answer to its "
                    f"{qs.asked[0].request.method}; run it with sessions to use mid-call questions through the gateway"
                )
            )
            return
        strategy = self.pick(strategies, call)
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
            side = session.standalone
            cont.side_event_id = side.resume_id if side is not None else None
        elif strategy == "park":
            cont.owner = self.s.advertise_url
            cont.ticket = "-" * 24  # the size check below counts a ticket
        if len(cont.encode()) > self.s.max_state_chars:
            self.background(abandon(call, "state too large"))
            await req.writer.error(
                RpcError(
                    INTERNAL_ERROR,
                    "This call's recorded answers outgrew the state limit; it cannot go on",
                    {"reason": "state_too_large"},
                )
            )
            return
        if strategy == "resume":
            # A legacy disconnect is not a cancellation: the server keeps the call and its events
            # (what the standalone stream had handed it is read again when it resumes).
            session.drop_side()
            call.close()
        elif strategy == "park":
            parked = ParkedCall(route=self.s.route, principal_id=req.principal_id, call=call)
            cont.ticket = self.parking.park(parked, self.s.park_seconds)
            self.sessions.suspend(session)
            self.metrics.parked.labels(self.s.route).set(len(self.parking))
        else:
            self.background(abandon(call, "asking the client (replay)"))
        self.metrics.bridge_flows.labels(self.s.route, strategy, "asked").inc()
        await req.writer.result(
            {
                "resultType": "input_required",
                "inputRequests": questions,
                "requestState": cont.encode(),
            }
        )

    def pick(self, strategies: Sequence[str], call: UpstreamCall) -> str:
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

    async def continue_(self, req: BridgeRequest, cont: Continuation) -> None:
        if cont.strategy == RERUN:
            await self.rounds.start(req, history=[], replay=False, asked=0)
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
            await self.rounds.start(req, history=history, replay=True, asked=cont.asked)
        elif cont.strategy == "resume":
            await self._resume(req, cont, given, history)
        else:
            await self._unpark(req, cont, given, history)

    async def _answer(self, session: Any, given: list[tuple[Pending, dict[str, Any]]]) -> None:
        for p, answer in given:
            await session.post(wire.response_message(p.request_id, wire.legacy_answer(answer)))

    async def _resume(
        self,
        req: BridgeRequest,
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
            session.answered.update(cont.answered)
            await session.open_side(cont.side_event_id, busy_wait=2.0, attach=True)
            await self._answer(session, given)
            stream = ResumedStream(
                session, await session.resume(cont.last_event_id, req.reservation)
            )
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
        call = UpstreamCall(session, stream, cont.call_id, asks=True)
        req.upstream_progress = cont.call_id
        await self.rounds.round(
            req,
            call,
            history=history,
            replay=False,
            asked=cont.asked,
            answered=set(cont.answered),
        )

    async def _unpark(
        self,
        req: BridgeRequest,
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
            self.background(abandon(parked.call, "process gone"))
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
            self.background(abandon(parked.call, "answer failed"))
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
        await self.rounds.round(
            req,
            parked.call,
            history=history,
            replay=False,
            asked=cont.asked,
            pool_key=self.sessions.reuse_key(req.caller, cont.endpoint, cont.pool_key),
            answered=set(cont.answered),
        )

    async def _forward(
        self, req: BridgeRequest, cont: Continuation, history: list[list[Any]]
    ) -> None:
        """The call is parked on another replica: hand it the (already verified) retry. What
        this replica holds of the owner's answer is counted (kind ``forwarded``) until it is
        handed to the edge."""
        reply = None
        held = Reservation(self.answer_budget, kind="forwarded")
        try:
            if self.forwarder is not None and cont.owner:
                try:
                    reply = await self.forwarder.forward(
                        cont.owner,
                        {
                            "route": self.s.route,
                            "principal": req.principal_id,
                            "id": req.writer.request_id,
                            "method": req.method,
                            "params": req.params,
                        },
                        held,
                    )
                except ReplyOverBudget:
                    self.metrics.forwards.labels(self.s.route, "over_budget").inc()
                    raise AnswerOverBudget from None
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
            body = str(reply.pop("body", "")).encode()  # (the text given up: the bytes are held)
            headers = [
                (str(k).lower().encode("latin-1"), str(v).encode("latin-1"))
                for k, v in reply.get("headers") or ()
                if str(k).lower() == "retry-after"
            ]
            held.release()  # handed to the edge, which counts what it holds of it
            await req.writer.raw(int(reply["status"]), str(reply["ctype"]), body, headers)
        finally:
            held.release()

    async def _lost(
        self,
        req: BridgeRequest,
        cont: Continuation,
        history: list[list[Any]],
        reason: str,
        message: str,
    ) -> None:
        """The call cannot go on where it was: re-run it where the route allows, else say so."""
        if cont.fallback:
            self.metrics.bridge_flows.labels(self.s.route, cont.strategy, "replayed").inc()
            event(
                logging.INFO, "bridged call lost; replaying it", route=self.s.route, reason=reason
            )
            await self.rounds.start(req, history=history, replay=True, asked=cont.asked)
            return
        self.metrics.bridge_flows.labels(self.s.route, cont.strategy, "lost").inc()
        event(logging.INFO, "bridged call lost", route=self.s.route, reason=reason)
        await req.writer.error(flow_lost(reason, message))
